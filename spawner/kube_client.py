"""One Kubernetes API client per process, configured as ComputeHub's pods need it: a kubeconfig
file named in the settings wins; else the pod's service account; else $KUBECONFIG or
~/.kube/config (running outside the cluster)."""

from __future__ import annotations


async def api_client(kubeconfig: str = ""):
    """A ``kubernetes_asyncio`` ApiClient with its own configuration (the global default is left alone)."""
    from kubernetes_asyncio import client, config
    conf = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
    else:
        try:
            config.load_incluster_config(client_configuration=conf)
        except config.ConfigException:
            await config.load_kube_config(client_configuration=conf)
    return client.ApiClient(configuration=conf)
