"""Status reports in batches (``POST workloads/status``) through the real hub and proxy, and
the launcher's ``ReportBatcher`` that sends them: results per report in order, one report's
mistake leaves the others applied, only on-behalf callers may report, bad bodies are 400s; a
launcher newer than its service stops reporting checkpoints the service does not take."""

from __future__ import annotations

import asyncio
import time

from spawner.launch_base import Ended, LauncherBackend
from spawner.launcher_app import LauncherApp
from spawner.report_batch import ReportBatcher
from spawner.service_client import ServiceClient, ServiceError


def _admitted(hub, n: int) -> list[str]:
    tok = hub.launcher_token
    ids = [hub.call("POST", "/workloads", tok, json={"user": "carol", "kind": "training", "name": f"batch-{i}",
                                                     "resources": {"cpu": "100m"}}).json()["id"] for i in range(n)]
    deadline = time.time() + 15
    for wid in ids:
        while hub.call("GET", f"/workloads/{wid}", tok).json()["state"] != "admitted":
            assert time.time() < deadline, f"{wid} not admitted"
            time.sleep(0.05)
    return ids


def _state(hub, wid: str) -> str:
    return hub.call("GET", f"/workloads/{wid}", hub.launcher_token).json()["state"]


def test_a_batch_applies_each_report_and_answers_each_in_order(hub):
    a, b = _admitted(hub, 2)
    tok = hub.launcher_token
    reports = [{"id": a, "state": "running"},
               {"id": b, "state": "running", "message": "on node x"},
               {"id": "w-no-such", "state": "running"},
               {"id": a, "state": "stopped"},          # a is running, not being preempted
               {"id": b, "state": "update"},            # an update without notes
               "not an object",
               {"id": b, "state": "asleep"},
               {"id": True, "state": "running"}]        # an id that is not text is not echoed
    r = hub.call("POST", "/workloads/status", tok, json={"reports": reports})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res] == [200, 200, 404, 409, 400, 400, 400, 400], res
    assert [x["id"] for x in res] == [a, b, "w-no-such", a, b, None, b, None]
    assert res[0]["body"]["state"] == "running" and res[1]["body"]["metadata"]["status"]["message"] == "on node x"
    assert "not being preempted" in res[3]["message"] and "needs at least one" in res[4]["message"]
    assert "workload's id" in res[5]["message"] and "one of" in res[6]["message"]
    assert "workload's id" in res[7]["message"]
    assert _state(hub, a) == _state(hub, b) == "running"      # the mistakes did not undo the rest

    r = hub.call("POST", "/workloads/status", tok, json={"reports": [
        {"id": a, "state": "finished"}, {"id": b, "state": "failed", "exit_code": 3, "reason": "boom"}]})
    assert [x["body"]["state"] for x in r.json()["results"]] == ["finished", "failed"], r.text
    w = hub.call("GET", f"/workloads/{b}", tok).json()
    assert (w["state"], w["exit_code"], w["reason"]) == ("failed", 3, "boom")
    kinds = [e["kind"] for e in hub.call("GET", f"/audit?workload={a}", hub.tokens["ada"]).json()["events"]]
    assert "started" in kinds and "finished" in kinds, kinds


def test_only_on_behalf_callers_report_and_bad_bodies_are_refused(hub):
    (a,) = _admitted(hub, 1)
    r = hub.call("POST", "/workloads/status", hub.tokens["carol"], json={"reports": [{"id": a, "state": "running"}]})
    assert r.status_code == 403 and "submit-on-behalf" in r.json()["message"], r.text
    assert _state(hub, a) == "admitted"
    for body, word in (({}, "list of 1 to 1000"), ({"reports": []}, "list of 1 to 1000"),
                       ({"reports": {"id": a}}, "list of 1 to 1000"),
                       ({"reports": [{"id": a, "state": "running"}] * 1001}, "list of 1 to 1000")):
        r = hub.call("POST", "/workloads/status", hub.launcher_token, json=body)
        assert r.status_code == 400 and word in r.json()["message"], r.text
    assert _state(hub, a) == "admitted"
    hub.call("DELETE", f"/workloads/{a}", hub.launcher_token)


async def _report(batcher: ReportBatcher, ids: list[str], state: str) -> list:
    """Report ``state`` for every id at the same moment; each answer, or the ServiceError it raised."""
    return await asyncio.gather(*(batcher.report(wid, state) for wid in ids), return_exceptions=True)


def test_the_batcher_sends_reports_made_together_in_few_requests(hub):
    ids = _admitted(hub, 12)

    async def go():
        batcher = ReportBatcher(ServiceClient(hub.service_url, hub.launcher_token))
        out = await _report(batcher, ids, "running")
        (err,) = await _report(batcher, ids[:1], "stopped")
        done = await _report(batcher, ids, "finished")
        return batcher.requests, out, err, done

    requests, out, err, done = asyncio.run(go())
    assert [w["state"] for w in out] == ["running"] * 12
    assert isinstance(err, ServiceError) and err.status == 409 and "not being preempted" in err.message
    assert [w["state"] for w in done] == ["finished"] * 12
    # 12 + 1 + 12 reports; those made at the same moment share a request.
    assert requests <= 4, requests
    assert all(_state(hub, wid) == "finished" for wid in ids)


class _OlderService(ServiceClient):
    """A client whose batch request goes to a path the service does not serve, as against a
    service from before ``POST workloads/status`` (the real service answers 404/405)."""

    async def report_many(self, reports):
        return (await self.request("POST", "workloads/status-of-many", {"reports": reports}))["results"]


def test_the_batcher_falls_back_to_one_request_per_report_when_the_service_has_no_batch_endpoint(hub):
    ids = _admitted(hub, 3)

    async def go():
        batcher = ReportBatcher(_OlderService(hub.service_url, hub.launcher_token))
        out = await _report(batcher, ids, "running")
        (err,) = await _report(batcher, ids[:1], "stopped")
        return batcher, out, err

    batcher, out, err = asyncio.run(go())
    assert batcher.one_by_one
    assert [w["state"] for w in out] == ["running"] * 3        # not dropped as "it ended"
    assert isinstance(err, ServiceError) and err.status == 409
    assert all(_state(hub, wid) == "running" for wid in ids)
    for wid in ids:
        hub.call("DELETE", f"/workloads/{wid}", hub.launcher_token)


class _ServiceWithoutCheckpoints(ServiceClient):
    """A service from before checkpoint reports (a launcher upgraded first): it answers them
    400, as the real service does for a state it does not know, here by renaming the state."""

    async def report_many(self, reports):
        return await super().report_many([{**r, "state": "saved"} if r["state"] == "checkpoint" else r
                                           for r in reports])


class _SavingBackend(LauncherBackend):
    """The process side, emulated: a job that starts, keeps saving checkpoints, and ends when told."""

    done = False

    async def start(self, workload):
        return {"message": "started"}

    async def poll(self, workload):
        return Ended(0, "exit code 0") if self.done else None

    async def last_checkpoint(self, workload):
        return time.time()


def test_a_launcher_stops_reporting_checkpoints_to_a_service_that_does_not_take_them(hub, tmp_path):
    r = hub.call("POST", "/workloads", hub.launcher_token, json={
        "user": "carol", "kind": "training", "name": "old-service", "resources": {"cpu": "100m"},
        "metadata": {"job": {"command": ["true"]}}})
    wid = r.json()["id"]
    app = LauncherApp(computehub_url=hub.service_url, token=hub.launcher_token, data_dir=str(tmp_path),
                      config_file="")
    app.initialize([])
    app.backend = _SavingBackend()
    app.client = _ServiceWithoutCheckpoints(hub.service_url, hub.launcher_token)
    app.reports = ReportBatcher(app.client)

    async def looks():
        deadline = time.time() + 15
        while _state(hub, wid) != "running":      # admitted, then started by a look
            assert time.time() < deadline, _state(hub, wid)
            await app.reconcile()
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.05)
        await app.reconcile()                     # its checkpoint report gets a 400: no error
        assert app.report_checkpoints is False
        app.backend.done = True
        await app.reconcile()                     # later looks go on: its end is reported
        await asyncio.gather(*app.tasks)

    asyncio.run(looks())
    assert _state(hub, wid) == "finished"
