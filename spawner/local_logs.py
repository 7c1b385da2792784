"""A local gang's output in the workload's log, each line marked with its worker (``[worker 1] ``).

A job of one worker writes to the workload's log itself. Each worker of a gang (or replica of
a service with several) writes to a file of its own beside it (``<id>.log.w<rank>``), and each
time the launcher looks at the job (``poll``, every ``poll_interval``) it appends the whole lines
every worker wrote since, marked with the worker, to the workload's log — as torchrun's
``--tee`` does with its workers' files — so ``computehub logs --follow``, ``%logs --follow`` and
the lab panel show whose line each is. At the end (finished, failed, stopped) it appends the
rest, a last line without its newline too, and removes the files. How far each file was read is
kept beside them (``<id>.log.workers``), so a restarted launcher goes on where it stopped. Lines
of different workers written within one look keep each worker's order, not the order between
workers (the Kubernetes launcher orders by the runtime's timestamps; kube_logs.py).
"""

from __future__ import annotations

import json
import os

MAX_READ = 4 * 1024 * 1024      # bytes read from one worker's file per look (a chatty gang catches up)


class WorkerLogs:
    """Needs ``logs_dir`` and ``log_path`` of the launcher."""

    def worker_log(self, wid: str, rank: int) -> str:
        return os.path.join(self.logs_dir, f"{wid}.log.w{rank}")

    def _marks_path(self, wid: str) -> str:
        return os.path.join(self.logs_dir, f"{wid}.log.workers")

    def merge_worker_logs(self, workload: dict, workers: int, label: str, final: bool = False) -> None:
        """Append what each of ``workers`` wrote since the last look to the workload's log, each line
        marked ``[<label> <rank>] ``; ``final``: everything (a last line without its newline too),
        then remove the workers' files and the marks. Best effort: a full disk loses lines, not
        the job."""
        wid = workload["id"]
        marks_path = self._marks_path(wid)
        try:
            with open(marks_path) as f:
                marks = {int(k): int(v) for k, v in json.load(f).items()}
        except (OSError, ValueError, AttributeError):
            marks = {}
        out: list[bytes] = []
        moved = False
        for rank in range(workers):
            prefix = f"[{label} {rank}] ".encode()
            try:
                f = open(self.worker_log(wid, rank), "rb")
            except OSError:
                continue
            with f:
                f.seek(marks.get(rank, 0))
                while True:
                    data = f.read(MAX_READ)
                    # Whole lines, unless it ended (all of it) or one line fills a whole read.
                    end = len(data) if final else data.rfind(b"\n") + 1 or (len(data) if len(data) == MAX_READ else 0)
                    if end <= 0:
                        break
                    lines = data[:end].split(b"\n")
                    if lines[-1] == b"":
                        lines.pop()
                    out.extend(prefix + line + b"\n" for line in lines)
                    marks[rank] = marks.get(rank, 0) + end
                    moved = True
                    if not final or len(data) < MAX_READ:
                        break
        if out:
            try:
                with open(self.log_path(workload), "ab") as log:
                    log.write(b"".join(out))
            except OSError:
                pass
        if final:
            for path in [self.worker_log(wid, rank) for rank in range(workers)] + [marks_path]:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        elif moved:
            try:
                with open(marks_path + ".tmp", "w") as f:
                    json.dump(marks, f)
                os.replace(marks_path + ".tmp", marks_path)
            except OSError:
                pass
