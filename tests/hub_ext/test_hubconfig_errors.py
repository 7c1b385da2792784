"""``configure_jupyterhub`` refuses mistaken arguments with a TypeError / ValueError naming the
argument, before it changes the hub's config: a lone string where a list is meant would
otherwise be read letter by letter (admins="ada" made users "a" and "d" ComputeHub admins),
and settings an external service ignores would be dropped without a word."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from hub_ext.hubconfig import configure_jupyterhub


def roles(c) -> dict:
    return {r["name"]: r for r in c.JupyterHub.load_roles}


@pytest.mark.parametrize("kw,error,says", [
    ({"admins": "ada"}, TypeError, ["admins=", "list of user names", "admins=['ada']"]),
    ({"admins": ["ada", None]}, TypeError, ["admins=", "None"]),
    ({"team_leads": {"vision": "lin"}}, TypeError, ["team_leads['vision']", "['lin']"]),
    ({"team_leads": ["lin"]}, TypeError, ["team_leads=", "{'vision': ['lin']}"]),
    ({"on_behalf_services": "launcher"}, TypeError, ["on_behalf_services=", "service names"]),
    ({"inventory_services": "inv"}, TypeError, ["inventory_services="]),
    ({"port": "10101"}, ValueError, ["port=", "1 to 65535"]),
    ({"port": 0}, ValueError, ["port="]),
    ({"name": "compute hub"}, ValueError, ["name=", "service name"]),
    ({"api_token": "t"}, ValueError, ["api_token=", "url="]),
    ({"url": "computehub:10101", "api_token": "t"}, ValueError, ["url=", "http(s)://"]),
    ({"url": "http://computehub:10101", "api_token": "t", "db_url": "postgresql+psycopg://x@db/c"},
     ValueError, ["db_url=", "c.ComputeHubService.db_url"]),
    ({"url": "http://computehub:10101", "api_token": "t", "data_dir": "/srv/c"}, ValueError, ["data_dir="]),
    ({"environment": ["A=1"]}, TypeError, ["environment="]),
    ({"concurrent_spawn_limit": -1}, ValueError, ["concurrent_spawn_limit="]),
    ({"notebook_watch": 30}, TypeError, ["notebook_watch=", "{'interval': 30}"]),
    ({"notebook_watch": {"intervall": 30}}, ValueError, ["'intervall' is no NotebookWatch setting"]),
    ({"notebook_watch": {"interval": -5}}, ValueError, ["NotebookWatch.interval must be greater than 0"]),
    ({"spawner_api_token": ""}, TypeError, ["spawner_api_token="]),
])
def test_a_mistaken_argument_is_refused_and_the_config_left_alone(kw, error, says):
    c = Config()
    with pytest.raises(error) as e:
        configure_jupyterhub(c, **kw)
    for s in says:
        assert s in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert "load_roles" not in c.JupyterHub and "services" not in c.JupyterHub     # nothing was changed


def test_lists_tuples_and_sets_of_names_are_all_fine():
    c = Config()
    configure_jupyterhub(c, admins=("ada",), team_leads={"vision": {"lin"}}, on_behalf_services=["launcher"],
                         notebook_watch={"interval": 30})
    r = roles(c)
    assert r["computehub-admin"]["users"] == ["ada"] and r["computehub-lead-vision"]["users"] == ["lin"]
    assert r["computehub-on-behalf"]["services"] == ["launcher"]


def test_an_external_service_with_a_launcher_keeps_data_dir_and_config_file():
    """With launcher=True data_dir and config_file go to the launcher the hub runs: not ignored."""
    c = Config()
    configure_jupyterhub(c, url="http://computehub:10101", api_token="t", launcher=True, data_dir="/srv/c",
                         config_file="/etc/c.py")
    launcher = next(s for s in c.JupyterHub.services if s["name"] == "computehub-launcher")
    assert "--data-dir=/srv/c" in launcher["command"] and "--config=/etc/c.py" in launcher["command"]
