"""The Kubernetes launcher's settings as its application passes them (no API server needed)."""

from __future__ import annotations


def test_pods_reach_the_service_where_the_launcher_does():
    """Unless configured, $COMPUTEHUB_URL in job pods (for their own checkpoint reports) is the
    launcher's service URL: both run in the cluster."""
    from spawner.launch_kube import KubeLauncher
    from spawner.launcher_app import LauncherApp
    app = LauncherApp(computehub_url="http://proxy-public/services/computehub")
    assert KubeLauncher(parent=app).pod_computehub_url == "http://proxy-public/services/computehub"
    assert KubeLauncher(parent=app, pod_computehub_url="").settings({"priority": ""}).computehub_url == ""
