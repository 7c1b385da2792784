"""Following a job's log by byte offset: ``GET workloads/{id}/logs?after=N`` on the real hub,
proxy and service; ``computehub logs --follow`` on a log longer than any one answer (it used to
re-read the last 100,000 lines each second and stopped showing new ones past them); and the
offset reader against splitlines on files grown a random piece at a time."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time

from test_authz import call
from test_cli_client import ENV_VARS, computehub

from hub_ext.job_logs import read_after, read_tail


def test_reading_on_from_each_offset_gives_every_line_once(tmp_path):
    rng = random.Random(11)
    path = tmp_path / "x.log"
    for _ in range(300):
        # Lines of at most 7 bytes, newline included: none is longer than the smallest read.
        text = "\n".join("".join(rng.choice("ab é\r") for _ in range(rng.randint(0, 3)))
                         for _ in range(rng.randint(0, 60)))
        data = text.encode()
        path.write_bytes(b"")
        got, offset, written = [], 0, 0
        while written < len(data):
            step = rng.randint(1, 30)
            with open(path, "ab") as f:
                f.write(data[written:written + step])
            written += step
            while True:
                piece = read_after(str(path), offset, final=False, max_bytes=rng.randint(8, 64))
                got += piece.lines
                assert piece.offset >= offset and piece.size == min(written, len(data))
                offset = piece.offset
                if not piece.more:
                    break
        end = read_after(str(path), offset, final=True, max_bytes=1 << 20)
        got += end.lines
        assert end.offset == len(data) and not end.more
        assert got == text.splitlines(), text


def test_a_line_longer_than_one_read_comes_in_pieces_and_nothing_is_lost(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"x" * 50 + b"\nshort\n")
    pieces, offset = [], 0
    while True:
        piece = read_after(str(path), offset, final=False, max_bytes=16)
        pieces += piece.lines
        offset = piece.offset
        if not piece.more:
            break
    assert "".join(pieces[:-1]) == "x" * 50 and pieces[-1] == "short" and offset == 57


def test_the_tail_stops_its_offset_before_a_line_still_being_written(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"one\ntwo\nthr")
    piece = read_tail(str(path), 2)
    assert (piece.lines, piece.offset, piece.partial, piece.size) == (["two", "thr"], 8, True, 11)
    assert read_after(str(path), piece.offset, final=False).lines == []
    with open(path, "ab") as f:
        f.write(b"ee\nfour")
    assert read_after(str(path), 8, final=False).lines == ["three"]
    assert read_after(str(path), 8, final=True).lines == ["three", "four"]
    path.write_bytes(b"one\n")
    assert (read_tail(str(path), 5).offset, read_tail(str(path), 5).partial) == (4, False)


def _log(hub, wid: str):
    log = hub.data_dir / "logs" / f"{wid}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return log


def test_after_through_the_hub(hub):
    r = call(hub, "alice", "POST", "/api/v1/workloads", {"resources": {"cpu": "100m"}, "name": "follow-me"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    url = f"/api/v1/workloads/{wid}/logs"
    try:
        log = _log(hub, wid)
        log.write_bytes(b"a\nb\nhalf")
        first = call(hub, "alice", "GET", f"{url}?tail=2").json()
        assert first == {"id": wid, "lines": ["b", "half"], "offset": 4, "size": 8, "partial": True,
                         "more": False}, first
        assert call(hub, "alice", "GET", f"{url}?after=4").json()["lines"] == []     # still being written
        with open(log, "ab") as f:
            f.write(b" done\nc\nd")
        nxt = call(hub, "alice", "GET", f"{url}?after=4").json()
        assert (nxt["lines"], nxt["offset"]) == (["half done", "c"], 16), nxt
        for query, says in (("after=-1", "after must be between 0"), ("after=99", "past the end of the log (17 bytes)"),
                            ("after=x", "whole number"), ("after=1&tail=5", "not both")):
            r = call(hub, "alice", "GET", f"{url}?{query}")
            assert r.status_code == 400 and says in r.json()["message"], (query, r.text)
        assert call(hub, "bob", "GET", f"{url}?after=0").status_code == 404     # not bob's to read
        call(hub, "alice", "DELETE", f"/api/v1/workloads/{wid}")
        # Ended, its last line comes without a newline: nothing more will be written.
        end = call(hub, "alice", "GET", f"{url}?after=16").json()
        assert (end["lines"], end["offset"]) == (["d"], 17), end
    finally:
        call(hub, "alice", "DELETE", f"/api/v1/workloads/{wid}")


def _until(what: str, done, timeout: float):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.1)


class _Reader(threading.Thread):
    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.lines = stream, []

    def run(self):
        for line in self.stream:
            self.lines.append(line.rstrip("\n"))


def test_cli_follows_a_log_past_any_one_answer(hub):
    r = call(hub, "alice", "POST", "/api/v1/workloads", {"resources": {"cpu": "100m"}, "name": "chatty"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    log = _log(hub, wid)
    # 120,000 lines: past the 100,000 the old follower re-read each second.
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(120_000)))
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(COMPUTEHUB_URL=hub.service_url, JUPYTERHUB_API_TOKEN=hub.tokens["alice"])
    p = subprocess.Popen([computehub(), "logs", wid, "--follow", "--tail", "3"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _Reader(p.stdout), _Reader(p.stderr)
    out.start(), err.start()
    try:
        _until("the last 3 lines", lambda: len(out.lines) >= 3, 30)
        with open(log, "ab") as f:
            f.write(b"new 1\nnew 2\nhal")
        _until("the new lines", lambda: len(out.lines) >= 5, 30)
        time.sleep(2.5)      # two more looks: the half line is not shown until it is whole
        assert out.lines == ["old 119997", "old 119998", "old 119999", "new 1", "new 2"], out.lines
        # More than one answer holds (4 MiB): all of it, in order.
        with open(log, "ab") as f:
            f.write(b"f\n" + b"".join(b"burst %06d\n" % i for i in range(400_000)) + b"last")
        _until("the burst", lambda: len(out.lines) >= 400_006, 120)
        call(hub, "alice", "DELETE", f"/api/v1/workloads/{wid}")
        assert p.wait(30) == 0
        out.join(10), err.join(10)
        assert out.lines[5:7] == ["half", "burst 000000"] and out.lines[-2:] == ["burst 399999", "last"]
        assert out.lines[6:-1] == [f"burst {i:06d}" for i in range(400_000)]
        assert err.lines == [f"[{wid} cancelled: cancelled by alice]"], err.lines
    finally:
        p.kill()
        call(hub, "alice", "DELETE", f"/api/v1/workloads/{wid}")
