"""The live display's words for a running job (``labextension.magics.describe``), from the
workload the service returns: where it runs, when it last saved, and whether it saves when
stopped. The kernel test (test_magics_kernel.py) shows the same display end to end."""

import time

from labextension.magics import describe


def running(**extra) -> dict:
    now = time.time()
    return {"id": "w0000007", "name": "train", "state": "running", "queue": "vision",
            "placement": [{"node": "gpu-1", "gpus": [0, 1]}], "started_at": now - 600,
            "checkpointed_at": None, "saves_on_stop": False, **extra}


def test_a_running_job_says_where_it_runs_and_nothing_of_saves_it_has_not_made():
    head, detail = describe(running())
    assert head == "w0000007 (train): running on gpu-1 GPU 0,1", head
    assert detail == ""


def test_a_save_of_this_run_is_shown_and_one_of_an_earlier_run_is_not():
    now = time.time()
    head, _ = describe(running(checkpointed_at=now - 125))
    assert head.endswith(" — checkpoint saved 2m05s ago"), head
    head, _ = describe(running(checkpointed_at=now - 900))     # before this run started
    assert "checkpoint" not in head, head


def test_a_job_seen_saving_when_stopped_says_so():
    head, _ = describe(running(saves_on_stop=True, checkpointed_at=time.time() - 30))
    assert head.endswith(" — checkpoint saved 30s ago — saves when stopped"), head
    head, _ = describe(running(saves_on_stop=True, state="pending", explanation={}))
    assert "saves when stopped" not in head, head


def test_held_work_says_what_it_runs_after():
    w = running(state="held", placement=[], reason="runs after w0000006 finishes (it is pending)",
                explanation={"reason": "runs after w0000006 finishes (it is running)"})
    assert describe(w) == ("w0000007 (train): held in vision", "runs after w0000006 finishes (it is running)")
    # With the service's estimate from when what it runs after ends (scheduler/estimate.py).
    w["explanation"] = {"reason": "runs after w0000006 finishes (it is running)", "eta_seconds": 5400.0}
    assert describe(w)[0] == "w0000007 (train): held in vision, ETA ~1.5 h"
    w["explanation"]["eta_seconds"] = None          # none to give: said as before
    assert describe(w)[0] == "w0000007 (train): held in vision"
