"""A real IPython kernel (ipykernel, driven by jupyter_client) for the magics' tests: a reader
thread keeps every IOPub message, since display updates arrive at any time."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from jupyter_client.manager import KernelManager
from launcherhub import wait_for


class Kernel:
    """A real kernel; a reader thread keeps every IOPub message (display updates arrive any time)."""

    def __init__(self, cwd: Path, env: dict):
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.msgs: list[dict] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while not self.done.is_set():
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            with self.lock:
                self.msgs.append(msg)

    def run(self, code: str, timeout: float = 60) -> dict:
        """Run a cell; its stdout, stderr, results and errors (as text)."""
        msg_id = self.kc.execute(code)
        while self.kc.get_shell_msg(timeout=timeout)["parent_header"].get("msg_id") != msg_id:
            pass                                # e.g. the kernel_info reply of wait_for_ready

        def idle():
            with self.lock:
                return any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                           and m["parent_header"].get("msg_id") == msg_id for m in self.msgs)
        wait_for("the cell's outputs", idle, timeout)
        out = {"stdout": "", "stderr": "", "result": "", "error": "", "display_ids": []}
        with self.lock:
            mine = [m for m in self.msgs if m["parent_header"].get("msg_id") == msg_id]
        for m in mine:
            c = m["content"]
            if m["msg_type"] == "stream":
                out[c["name"]] += c["text"]
            elif m["msg_type"] == "execute_result":
                out["result"] += c["data"].get("text/plain", "")
            elif m["msg_type"] == "error":
                out["error"] += "\n".join(c["traceback"])
            elif m["msg_type"] == "display_data" and c.get("transient", {}).get("display_id"):
                out["display_ids"].append(c["transient"]["display_id"])
        return out

    def value(self, expr: str) -> str:
        out = self.run(f"print({expr})")
        assert not out["error"] and not out["stderr"], out
        return out["stdout"].strip()

    def display_texts(self, display_id: str) -> list[str]:
        with self.lock:
            return [m["content"]["data"]["text/plain"] for m in self.msgs
                    if m["msg_type"] in ("display_data", "update_display_data")
                    and m["content"].get("transient", {}).get("display_id") == display_id]

    def all_stdout(self) -> str:
        with self.lock:
            return "".join(m["content"]["text"] for m in self.msgs
                           if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")

    def stop(self):
        self.done.set()
        self.reader.join(5)
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
