"""``QueueTree.access``: who may use a queue — its own groups, else its nearest ancestor's that
names some, else everyone (()). The service authorises submissions and team leads by it
(tests/hub_ext/test_queue_access.py has the real hub)."""

from __future__ import annotations

from scheduler import Scheduler


def test_groups_come_from_the_nearest_ancestor_that_names_some_and_follow_its_changes():
    s = Scheduler()
    s.put_queue({"name": "org"}, now=0)
    s.put_queue({"name": "team", "parent": "org", "groups": ["vision"]}, now=0)
    s.put_queue({"name": "mid", "parent": "team"}, now=0)
    s.put_queue({"name": "leaf", "parent": "mid"}, now=0)
    s.put_queue({"name": "other", "parent": "team", "groups": ["nlp", "audio"]}, now=0)
    s.put_queue({"name": "open", "parent": "org"}, now=0)
    access = s.state.tree.access
    assert access == {"org": (), "team": ("vision",), "mid": ("vision",), "leaf": ("vision",),
                      "other": ("nlp", "audio"), "open": ()}
    s.put_queue({"name": "team", "parent": "org", "groups": ["vision", "robotics"]}, now=1)
    assert s.state.tree.access["leaf"] == ("vision", "robotics")
    s.put_queue({"name": "team", "parent": "org"}, now=2)
    assert s.state.tree.access["leaf"] == ()
