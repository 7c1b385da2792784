"""The hub's login form in a browser test (DummyAuthenticator, every test user's password "pw")."""

from __future__ import annotations

import re


def fill_hub_login(page, user: str, password: str = "pw") -> None:
    """On the way to a page that needs a login: wait for the hub's form, log ``user`` in."""
    page.wait_for_url(re.compile(r".*/hub/login.*"))
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")
