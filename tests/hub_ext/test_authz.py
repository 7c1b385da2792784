"""Who may do what: every route × method × caller, on a real hub, proxy and service.

Callers: no credentials, ``nobody`` (a service token the hub knows, with no
scopes), alice and bob (vision), carol (nlp), lin (vision's team lead), ada
(ComputeHub admin) and ``launcher`` (a service with submit-on-behalf). Each
cell asserts the exact status. Denied writes are checked to change nothing
(the target read back as ada before and after), list and usage endpoints to
return only what the caller may see, and error bodies to carry nothing of
other users' work. Then XSRF: cookie-authenticated writes without the token.

The targets are made here and removed at the end: a queue, a class and a
node of this module's own, two 1-GPU workloads (alice's in vision, carol's in
nlp) and one awaiting approval; fresh workloads for the cells that cancel,
approve or report status, so every allowed cell acts on something unused.
"""

from __future__ import annotations

import time

import pytest
import requests

CALLERS = ("none", "nobody", "alice", "bob", "carol", "lin", "ada", "launcher")
EVERYONE = {"none": 401, "nobody": 403, "alice": 200, "bob": 200, "carol": 200, "lin": 200, "ada": 200,
            "launcher": 200}
ADMIN_ONLY = {"none": 401, "nobody": 403, "alice": 403, "bob": 403, "carol": 403, "lin": 403, "ada": 200,
              "launcher": 403}
VOLATILE = {"explanation", "position", "position_in_queue", "usage", "effective_guaranteed", "pending",
            "running", "free_gpus", "free_cpu", "free_memory", "workloads"}


def token(hub, who: str) -> str | None:
    if who == "none":
        return None
    return {"nobody": hub.nobody_token, "launcher": hub.launcher_token}.get(who) or hub.tokens[who]


def call(hub, who: str, method: str, path: str, body=None) -> requests.Response:
    """``path`` is relative to the service (``/api/v1/...`` or ``/metrics``)."""
    headers = {}
    if token(hub, who):
        headers["Authorization"] = f"token {token(hub, who)}"
    kw = {"json": body} if body is not None else {}
    if path.endswith("/events"):
        with requests.get(hub.service_url + path, headers=headers, stream=True, timeout=10) as r:
            if r.status_code != 200:
                r.content  # noqa: B018 - read the error body before closing
            return r
    return requests.request(method, hub.service_url + path, headers=headers, timeout=10, **kw)


def stable(obj):
    """A resource as read back, without what the scheduler changes on its own."""
    if isinstance(obj, dict):
        return {k: stable(v) for k, v in obj.items() if k not in VOLATILE}
    return obj


def wait_state(hub, wid: str, states=("admitted", "running"), timeout: float = 15) -> dict:
    deadline = time.time() + timeout
    while True:
        w = call(hub, "ada", "GET", f"/api/v1/workloads/{wid}").json()
        if w["state"] in states or time.time() > deadline:
            assert w["state"] in states, w
            return w
        time.sleep(0.1)


class World:
    def __init__(self, hub):
        self.hub = hub
        self.workloads: list[str] = []
        self.queues: list[str] = []
        self.classes: list[str] = []
        self.nodes: list[str] = []

    def ok(self, who, method, path, body=None, status=(200, 201, 204)) -> dict:
        r = call(self.hub, who, method, path, body)
        assert r.status_code in status, (who, method, path, r.status_code, r.text)
        return r.json() if r.content else {}

    def submit(self, who: str, body: dict) -> str:
        wid = self.ok(who, "POST", "/api/v1/workloads", body)["id"]
        self.workloads.append(wid)
        return wid

    def cheap(self, owner: str = "alice", admitted: bool = False) -> str:
        """A CPU-only workload in this module's open queue: takes no GPU from other tests."""
        wid = self.submit(owner, {"queue": "authz-q", "resources": {"cpu": "100m"}, "name": "authz-cheap"})
        if admitted:
            wait_state(self.hub, wid)
        return wid

    def held_back(self, owner: str, hold: bool = False) -> str:
        """Held behind its owner's standing workload (``after``), and with ``hold`` by its owner too."""
        wid = self.submit(owner, {"queue": "authz-q", "resources": {"cpu": "100m"}, "name": "authz-held",
                                  "after": [self.alice if owner == "alice" else self.carol], "hold": hold})
        assert wait_state(self.hub, wid, ("held",))
        return wid

    def array_of(self, owner: str) -> str:
        """The first task of a held job array of ``owner``'s (held: it takes nothing)."""
        return self.submit(owner, {"queue": "authz-q", "resources": {"cpu": "100m"}, "name": "authz-array",
                                   "array": "0-1", "hold": True})

    def awaiting_array(self) -> str:
        wid = self.submit("carol", {"queue": "nlp", "resources": {"gpu": 4}, "workers": 2, "name": "carol-big",
                                    "array": "0-1"})
        assert wait_state(self.hub, wid, ("awaiting_approval",))
        return wid

    def awaiting(self) -> str:
        wid = self.submit("carol", {"queue": "nlp", "resources": {"gpu": 4}, "workers": 2, "name": "carol-big"})
        assert wait_state(self.hub, wid, ("awaiting_approval",))
        return wid

    def queue(self) -> str:
        name = f"authz-q{len(self.queues)}"
        self.ok("ada", "PUT", f"/api/v1/queues/{name}", {"parent": "org"})
        self.queues.append(name)
        return name

    def klass(self) -> str:
        name = f"authz-c{len(self.classes)}"
        self.ok("ada", "PUT", f"/api/v1/classes/{name}", {"rank": 1})
        self.classes.append(name)
        return name

    def node(self) -> str:
        name = f"authz-n{len(self.nodes)}"
        self.ok("ada", "PUT", f"/api/v1/nodes/{name}", {"gpus": 0, "cpu": 1, "memory": "1Gi"})
        self.nodes.append(name)
        return name

    def cleanup(self):
        for wid in self.workloads:
            call(self.hub, "ada", "DELETE", f"/api/v1/workloads/{wid}")
        for kind, names in (("nodes", self.nodes), ("classes", self.classes), ("queues", self.queues)):
            for name in names:
                call(self.hub, "ada", "DELETE", f"/api/v1/{kind}/{name}")
        call(self.hub, "ada", "DELETE", "/api/v1/queues/authz-q")


@pytest.fixture(scope="module")
def world(hub):
    w = World(hub)
    try:
        w.ok("ada", "PUT", "/api/v1/queues/authz-q", {"parent": "org", "description": "authz tests"})
        w.class_name = w.klass()
        w.node_name = w.node()
        w.alice = w.submit("alice", {"queue": "vision", "resources": {"gpu": 1}, "name": "alice-private-run"})
        w.carol = w.submit("carol", {"queue": "nlp", "resources": {"gpu": 1}, "name": "carol-secret-run"})
        for wid in (w.alice, w.carol):
            wait_state(hub, wid)
            (hub.data_dir / "logs" / f"{wid}.log").write_text(f"log of {wid}\n")
        w.waiting = w.awaiting()
        time.sleep(1.1)                 # some GPU-seconds for the usage rows
        yield w
    finally:
        w.cleanup()


# --- the matrix -----------------------------------------------------------------------------
#
# Each row: method, path (with {alice}, {carol}, {waiting}, {node}, {class} of the world),
# a body, the status per caller, and for writes the path that shows whether anything changed.
# ``fresh`` rows give each *allowed* caller a target of its own (made by ``fresh(world)``),
# while refused callers aim at the shared one.

def sees_alice(**kw):   # alice's vision workload: owner, her team lead, admin, launcher
    return {**EVERYONE, "bob": 404, "carol": 404, **kw}


def sees_carol(**kw):   # carol's nlp workload: lin leads vision, not nlp
    return {**EVERYONE, "alice": 404, "bob": 404, "lin": 404, **kw}


def only(ok: int, allowed=("ada",), **kw):
    return {**ADMIN_ONLY, "ada": 403, **{c: ok for c in allowed}, **kw}


ROWS = [
    # reads open to every caller with access to the service
    ("GET", "/api/v1/me", None, EVERYONE, None, None),
    ("GET", "/api/v1/openapi.json", None, EVERYONE, None, None),
    ("GET", "/api/v1/workloads", None, EVERYONE, None, None),
    ("GET", "/api/v1/usage", None, EVERYONE, None, None),
    ("GET", "/api/v1/events", None, EVERYONE, None, None),
    ("GET", "/api/v1/queues", None, EVERYONE, None, None),
    ("GET", "/api/v1/queues/vision", None, EVERYONE, None, None),
    ("GET", "/api/v1/classes", None, EVERYONE, None, None),
    ("GET", "/api/v1/classes/{class}", None, EVERYONE, None, None),
    ("GET", "/api/v1/nodes", None, EVERYONE, None, None),
    ("GET", "/api/v1/nodes/{node}", None, EVERYONE, None, None),
    # one workload: others' ids are not revealed (404), a team lead sees the team's
    ("GET", "/api/v1/workloads/{alice}", None, sees_alice(), None, None),
    ("GET", "/api/v1/workloads/{carol}", None, sees_carol(), None, None),
    ("GET", "/api/v1/workloads/{alice}/logs", None, sees_alice(), None, None),
    ("GET", "/api/v1/workloads/{carol}/logs", None, sees_carol(), None, None),
    # submit: any user (into a queue open to all); a service must name the user (400 here), a
    # scopeless service may not submit at all
    ("POST", "/api/v1/workloads", {"queue": "authz-q", "resources": {"cpu": "100m"}, "name": "authz-submit"},
     {**EVERYONE, **{c: 201 for c in ("alice", "bob", "carol", "lin", "ada")}, "launcher": 400}, None, None),
    # cancel: the owner, the launcher and the admin; the team lead sees but may not cancel
    ("DELETE", "/api/v1/workloads/{alice}", None, sees_alice(lin=403),
     lambda w: w.cheap("alice"), "/api/v1/workloads/{alice}"),
    ("DELETE", "/api/v1/workloads/{carol}", None, sees_carol(),
     lambda w: w.cheap("carol"), "/api/v1/workloads/{carol}"),
    # hold and release: as cancel
    ("POST", "/api/v1/workloads/{alice}/hold", {"reason": "authz"}, sees_alice(lin=403),
     lambda w: w.held_back("alice"), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/hold", None, sees_carol(),
     lambda w: w.held_back("carol"), "/api/v1/workloads/{carol}"),
    ("POST", "/api/v1/workloads/{alice}/release", None, sees_alice(lin=403),
     lambda w: w.held_back("alice", hold=True), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/release", None, sees_carol(),
     lambda w: w.held_back("carol", hold=True), "/api/v1/workloads/{carol}"),
    # what live work mails about: as cancel (no mail set up here: [] is still accepted)
    ("POST", "/api/v1/workloads/{alice}/mail", {"mail": []}, sees_alice(lin=403),
     lambda w: w.cheap("alice"), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/mail", {"mail": "none"}, sees_carol(),
     lambda w: w.cheap("carol"), "/api/v1/workloads/{carol}"),
    # changing waiting work: as cancel
    ("PATCH", "/api/v1/workloads/{alice}", {"name": "authz-renamed"}, sees_alice(lin=403),
     lambda w: w.cheap("alice"), "/api/v1/workloads/{alice}"),
    ("PATCH", "/api/v1/workloads/{carol}", {"time_limit": 600}, sees_carol(),
     lambda w: w.cheap("carol"), "/api/v1/workloads/{carol}"),
    # a job array's limit: as cancel
    ("POST", "/api/v1/workloads/{alice}/array-limit", {"limit": 3}, sees_alice(lin=403),
     lambda w: w.array_of("alice"), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/array-limit", {"limit": 3}, sees_carol(),
     lambda w: w.array_of("carol"), "/api/v1/workloads/{carol}"),
    # a whole job array at once: as cancel; approving and rejecting: as approvals
    ("POST", "/api/v1/workloads/{alice}/array-action", {"action": "cancel"}, sees_alice(lin=403),
     lambda w: w.array_of("alice"), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/array-action", {"action": "release"}, sees_carol(),
     lambda w: w.array_of("carol"), "/api/v1/workloads/{carol}"),
    ("POST", "/api/v1/workloads/{waiting}/array-action", {"action": "reject", "reason": "authz"}, ADMIN_ONLY,
     lambda w: w.awaiting_array(), "/api/v1/workloads/{waiting}"),
    # status reports: launcher and admin only
    ("POST", "/api/v1/workloads/{alice}/status", {"state": "running"}, sees_alice(alice=403, lin=403),
     lambda w: w.cheap("alice", admitted=True), "/api/v1/workloads/{alice}"),
    ("POST", "/api/v1/workloads/{carol}/status", {"state": "running"}, sees_carol(carol=403),
     lambda w: w.cheap("carol", admitted=True), "/api/v1/workloads/{carol}"),
    # administration
    ("PUT", "/api/v1/queues/authz-q", {"parent": "org", "description": "changed", "weight": 7},
     ADMIN_ONLY, None, "/api/v1/queues/authz-q"),
    ("PATCH", "/api/v1/queues/authz-q", {"weight": 9}, ADMIN_ONLY, None, "/api/v1/queues/authz-q"),
    ("DELETE", "/api/v1/queues/{queue}", None, {**ADMIN_ONLY, "ada": 204},
     lambda w: w.queue(), "/api/v1/queues/{queue}"),
    ("PUT", "/api/v1/classes/{class}", {"rank": 2, "description": "changed"}, ADMIN_ONLY, None,
     "/api/v1/classes/{class}"),
    ("DELETE", "/api/v1/classes/{class}", None, {**ADMIN_ONLY, "ada": 204},
     lambda w: w.klass(), "/api/v1/classes/{class}"),
    ("PUT", "/api/v1/nodes/{node}", {"gpus": 0, "cpu": 2, "memory": "2Gi"}, ADMIN_ONLY, None,
     "/api/v1/nodes/{node}"),
    ("PATCH", "/api/v1/nodes/{node}", {"draining": True}, ADMIN_ONLY, None, "/api/v1/nodes/{node}"),
    ("DELETE", "/api/v1/nodes/{node}", None, ADMIN_ONLY, lambda w: w.node(), "/api/v1/nodes/{node}"),
    ("GET", "/api/v1/approvals", None, ADMIN_ONLY, None, None),
    ("POST", "/api/v1/approvals/{waiting}", {"approve": False, "reason": "authz test"}, ADMIN_ONLY,
     lambda w: w.awaiting(), "/api/v1/workloads/{waiting}"),
    ("GET", "/api/v1/audit", None, ADMIN_ONLY, None, None),
    ("GET", "/metrics", None, ADMIN_ONLY, None, None),
]


def fill(path: str, w: World, target: str | None = None) -> str:
    names = {"alice": w.alice, "carol": w.carol, "waiting": w.waiting, "node": w.node_name,
             "class": w.class_name, "queue": "authz-q"}
    if target is not None:
        for key in names:
            if "{" + key + "}" in path:
                names[key] = target
    return path.format(**names)


@pytest.mark.parametrize("method,path,body,expected,fresh,observe", ROWS,
                         ids=[f"{m} {p}" for m, p, *_ in ROWS])
def test_matrix(hub, world, method, path, body, expected, fresh, observe):
    assert set(expected) == set(CALLERS)
    wrong = []
    for who in CALLERS:
        want = expected[who]
        allowed = want < 400
        target = fresh(world) if fresh and allowed else None
        url = fill(path, world, target)
        before = call(hub, "ada", "GET", fill(observe, world, target)) if observe else None
        r = call(hub, who, method, url, body)
        if r.status_code != want:
            wrong.append(f"{who}: {method} {url} -> {r.status_code} (expected {want}) {r.text[:200]}")
            continue
        if r.status_code >= 400:
            err = r.json()
            assert set(err) == {"error", "message"} and all(isinstance(v, str) for v in err.values()), err
            assert_no_leak(r.text, who, world)
        if observe and not allowed:
            after = call(hub, "ada", "GET", fill(observe, world, target))
            assert after.status_code == before.status_code == 200, (who, method, url, after.text)
            assert stable(after.json()) == stable(before.json()), f"{who}'s refused {method} {url} changed it"
        if allowed and method == "POST" and path == "/api/v1/workloads":
            world.workloads.append(r.json()["id"])
    assert not wrong, "\n".join(wrong)


def assert_no_leak(text: str, who: str, world: World) -> None:
    """An error body names nobody else and none of their work."""
    for owner, secret in (("alice", "alice-private-run"), ("carol", "carol-secret-run"), ("carol", "carol-big")):
        if owner != who:
            assert owner not in text and secret not in text, (who, text)


# --- what lists and usage show --------------------------------------------------------------

def listed(hub, who: str, query: str = "") -> list[dict]:
    r = call(hub, who, "GET", "/api/v1/workloads" + query)
    assert r.status_code == 200, r.text
    return r.json()["workloads"]


def test_lists_show_only_what_the_caller_may_see(hub, world):
    for who in ("alice", "bob", "carol"):
        items = listed(hub, who)
        assert items and all(w["user"] == who for w in items), (who, items)
        assert listed(hub, who, "?user=carol" if who != "carol" else "?user=alice") == []
    assert world.alice in {w["id"] for w in listed(hub, "alice")}
    assert world.carol not in {w["id"] for w in listed(hub, "alice", "?queue=nlp")}
    lead = listed(hub, "lin")
    ids = {w["id"] for w in lead}
    assert world.alice in ids and world.carol not in ids and world.waiting not in ids
    assert all(w["queue"] == "vision" or w["user"] == "lin" for w in lead), lead
    for who in ("ada", "launcher"):
        ids = {w["id"] for w in listed(hub, who)}
        assert {world.alice, world.carol, world.waiting} <= ids, who
    # terminal states go through another path in the handler
    for who in ("alice", "lin"):
        assert all(w["user"] == who or who == "lin" and w["queue"] == "vision"
                   for w in listed(hub, who, "?state=cancelled&state=rejected&state=finished"))


def test_usage_shows_only_what_the_caller_may_see(hub, world):
    def rows(who, by):
        r = call(hub, who, "GET", f"/api/v1/usage?by={by}")
        assert r.status_code == 200, r.text
        return r.json()["rows"]

    mine = rows("alice", "user")
    assert mine and {r["user"] for r in mine} == {"alice"}
    assert world.alice in {r["workload"] for r in rows("alice", "workload")}
    assert world.carol not in {r["workload"] for r in rows("alice", "workload")}
    assert {r["queue"] for r in rows("alice", "queue")} <= {"vision", "authz-q"}
    assert {r["user"] for r in rows("carol", "user")} == {"carol"}
    assert "carol" not in {r["user"] for r in rows("lin", "user")}
    assert {r["queue"] for r in rows("lin", "queue")} <= {"vision", "authz-q"}
    assert {"alice", "carol"} <= {r["user"] for r in rows("ada", "user")}


def test_no_leak_through_guessed_ids_and_filters(hub, world):
    """Bob guessing carol's id, or asking for her queue, learns nothing: the same 404
    as for an id that never existed."""
    a = call(hub, "bob", "GET", f"/api/v1/workloads/{world.carol}")
    b = call(hub, "bob", "GET", "/api/v1/workloads/w9999999")
    assert a.status_code == b.status_code == 404
    assert a.json()["error"] == b.json()["error"] == "not_found"
    assert a.json()["message"].replace(world.carol, "ID") == b.json()["message"].replace("w9999999", "ID")
    assert listed(hub, "bob", "?queue=nlp") == [] and listed(hub, "bob", "?user=carol&queue=nlp") == []


def test_users_cannot_submit_as_others_or_into_others_queues(hub, world):
    before = {w["id"] for w in listed(hub, "ada")}
    r = call(hub, "alice", "POST", "/api/v1/workloads", {"queue": "authz-q", "user": "carol"})
    assert r.status_code == 403, r.text
    r = call(hub, "alice", "POST", "/api/v1/workloads", {"queue": "nlp", "resources": {"gpu": 1}})
    assert r.status_code == 403, r.text
    assert "carol" not in r.text
    r = call(hub, "lin", "POST", "/api/v1/workloads", {"queue": "authz-q", "user": "alice"})
    assert r.status_code == 403, r.text                 # a team lead does not submit for the team
    for who in ("none", "nobody"):
        r = call(hub, who, "POST", "/api/v1/workloads", {"queue": "authz-q"})
        assert r.status_code == (401 if who == "none" else 403), r.text
    assert {w["id"] for w in listed(hub, "ada")} == before
    wid = call(hub, "launcher", "POST", "/api/v1/workloads",
               {"queue": "nlp", "user": "carol", "resources": {"cpu": "100m"}}).json()["id"]
    world.workloads.append(wid)
    assert call(hub, "carol", "GET", f"/api/v1/workloads/{wid}").json()["user"] == "carol"


# --- XSRF: browser (cookie) requests ------------------------------------------------------

def hub_login(hub, user: str = "alice") -> requests.Session:
    s = requests.Session()
    r = s.get(hub.url + "/hub/login", timeout=10)
    assert r.status_code == 200 and s.cookies.get("_xsrf")
    r = s.post(hub.url + "/hub/login", data={"username": user, "password": "pw", "_xsrf": s.cookies["_xsrf"]},
               allow_redirects=False, timeout=10)
    assert r.status_code == 302, r.text
    assert any(c.name.startswith("jupyterhub-hub-login") for c in s.cookies)
    return s


def service_login(hub, user: str = "alice") -> requests.Session:
    """The browser's way in: log in to the hub, open a service page, follow the OAuth round trip."""
    s = hub_login(hub, user)
    r = s.get(hub.service_url + "/", timeout=10)
    assert r.status_code == 200 and r.url.rstrip("/") == hub.service_url, (r.url, r.history)
    assert any("/hub/api/oauth2/authorize" in x.url for x in r.history)
    assert s.cookies.get("service-computehub", path="/services/computehub/")
    return s


def test_cookie_writes_need_the_xsrf_token(hub, world):
    """With the service's OAuth cookie, reads work as they do for a token, but a write
    without the service's XSRF token, or with the hub's, is refused and changes nothing;
    the same write with the token goes through."""
    s = service_login(hub)
    assert s.get(hub.api + "/me", timeout=10).json()["name"] == "alice"
    before = {w["id"] for w in listed(hub, "ada")}
    job = {"queue": "authz-q", "resources": {"cpu": "100m"}, "name": "authz-cookie"}
    hub_xsrf = s.cookies.get("_xsrf", path="/hub/")
    for method, path, body in (("POST", "/workloads", job), ("DELETE", f"/workloads/{world.alice}", None),
                               ("POST", f"/workloads/{world.alice}/status", {"state": "failed"})):
        for headers in ({}, {"X-XSRFToken": hub_xsrf}):
            r = s.request(method, hub.api + path, json=body, headers=headers, timeout=10)
            assert r.status_code == 403, (method, path, headers, r.text)
            assert r.json()["error"] == "forbidden" and "XSRF" in r.json()["message"].upper(), r.text
    assert {w["id"] for w in listed(hub, "ada")} == before
    assert wait_state(hub, world.alice)["state"] in ("admitted", "running")
    token = s.cookies.get("_xsrf", path="/services/computehub/")
    r = s.post(hub.api + "/workloads", json=job, headers={"X-XSRFToken": token}, timeout=10)
    assert r.status_code == 201, r.text
    world.workloads.append(r.json()["id"])
    assert r.json()["user"] == "alice"


def test_hub_cookies_are_not_service_credentials(hub, world):
    """Every cookie the hub sets (and the hub's XSRF token) sent to the service API: unauthenticated."""
    s = hub_login(hub)
    cookies = "; ".join(f"{c.name}={c.value}" for c in s.cookies)
    before = {w["id"] for w in listed(hub, "ada")}
    for headers in ({"Cookie": cookies}, {"Cookie": cookies, "X-XSRFToken": s.cookies["_xsrf"]}):
        r = requests.post(hub.api + "/workloads", json={"queue": "authz-q"}, headers=headers, timeout=10)
        assert r.status_code == 401, r.text
        assert r.json()["error"] == "unauthenticated"
    r = requests.get(hub.api + "/me", headers={"Cookie": cookies}, timeout=10)
    assert r.status_code == 401, r.text
    assert {w["id"] for w in listed(hub, "ada")} == before
