"""A job's log is answered from its end: ``GET workloads/{id}/logs?tail=N`` on the real hub,
proxy and service with a log of a terabyte (a sparse file: its start is a hole), and the
tail reader against splitlines on many small files cut into blocks of every size."""

from __future__ import annotations

import random

from test_authz import call

from hub_ext.job_logs import tail_lines


def test_the_tail_of_a_terabyte_log_comes_back_at_once(hub):
    r = call(hub, "alice", "POST", "/api/v1/workloads", {"resources": {"cpu": "100m"}, "name": "chatty"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    try:
        log = hub.data_dir / "logs" / f"{wid}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as f:
            f.truncate(1 << 40)     # read whole, as it was, this is a MemoryError (a 500) or a hang
            f.seek(1 << 40)
            f.write(b"".join(b"step %d loss 0.%d\n" % (i, i) for i in range(10)) + b"done")
        r = call(hub, "alice", "GET", f"/api/v1/workloads/{wid}/logs?tail=3")
        assert r.status_code == 200, r.text
        assert r.json()["lines"] == ["step 8 loss 0.8", "step 9 loss 0.9", "done"]
        # More lines than the bytes one request reads hold: whole lines only (the first, which
        # begins in the hole, is a fragment).
        lines = call(hub, "alice", "GET", f"/api/v1/workloads/{wid}/logs?tail=100000").json()["lines"]
        assert lines == [f"step {i} loss 0.{i}" for i in range(1, 10)] + ["done"]
    finally:
        call(hub, "alice", "DELETE", f"/api/v1/workloads/{wid}")


def test_tail_lines_matches_splitlines(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "x.log"
    for _ in range(2000):
        lines = ["".join(rng.choice("ab é\r") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 30))]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        path.write_bytes(text.encode())
        n, block = rng.randint(1, 35), rng.randint(1, 20)
        assert tail_lines(str(path), n, block=block) == text.splitlines()[-n:], (text, n, block)
    # Cut by max_bytes: whole lines only, the last ones.
    path.write_bytes(b"x" * 100 + b"\n" + b"\n".join(b"line %d" % i for i in range(50)))
    got = tail_lines(str(path), 1000, max_bytes=64, block=16)
    assert got and got == [f"line {i}" for i in range(50 - len(got), 50)]
