"""Report tokens (``hub_ext.report_tokens``): one workload's checkpoint reports and nothing
else, for one run of it, signed with a secret the service keeps in its database, so a
restarted service (or another replica on the same database) accepts the tokens handed out
before. The HTTP side is
in test_checkpoint_reports.py; the `computehub checkpoint` command's own mistakes are here."""

from __future__ import annotations

import os
import subprocess
import sys

from hub_ext.report_tokens import ReportTokens, bearer, load_secret
from scheduler.model import run_label
from scheduler.store.sql import SqlStore


def test_the_secret_lives_in_the_database_and_tokens_name_one_workload_and_run(store_url, tmp_path):
    first = SqlStore(store_url)
    tokens = ReportTokens(load_secret(first))
    run = run_label(1767225600.25)
    t1 = tokens.issue("w0000001", run)
    first.close()
    again = SqlStore(store_url)                       # the service restarted
    restarted = ReportTokens(load_secret(again))
    assert restarted.valid(t1, "w0000001", run) and not restarted.valid(t1, "w0000002", run)
    assert not restarted.valid(t1[:-1] + ("0" if t1[-1] != "0" else "1"), "w0000001", run)
    # admitted again (after a preemption): the earlier run's token is void, the new one differs
    later = run_label(1767229200.5)
    assert not restarted.valid(t1, "w0000001", later) and not restarted.valid(t1, "w0000001", run_label(None))
    assert restarted.issue("w0000001", later) != t1 and restarted.issue("w0000001", run) == t1
    again.close()
    other = SqlStore(f"sqlite:///{tmp_path / 'other.sqlite'}")   # another installation
    assert not ReportTokens(load_secret(other)).valid(t1, "w0000001", run)
    other.close()


def test_only_report_tokens_are_taken_from_the_header():
    assert bearer("token chrt_abc") == "chrt_abc" and bearer("Bearer  chrt_abc ") == "chrt_abc"
    assert bearer("token 0123abcd") is None            # a hub token: the hub decides
    assert bearer("") is None and bearer("Basic chrt_abc") is None


def test_the_command_says_what_is_missing_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPUTEHUB_", "JUPYTERHUB_"))}
    cli = [sys.executable, "-m", "hub_ext", "checkpoint"]
    for args, words in (([], "needs a workload id"), (["w1", "w2"], "unexpected argument 'w2'"),
                        (["w1", "--at", "banana"], "--at expects a duration ago"),
                        (["w1"], "COMPUTEHUB_URL")):
        out = subprocess.run(cli + args, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and words in out.stderr, (args, out.stderr)
