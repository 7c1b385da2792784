"""ComputeHub inside JupyterLab: the lab extension's server side and the %submit / %serve magics.

``%load_ext labextension`` loads the magics (see docs/magics.md); the server
extension (see docs/labextension.md) is enabled by the config the wheel installs.
"""


def load_ipython_extension(ipython):
    from .magics import load_ipython_extension as load

    load(ipython)


def _jupyter_labextension_paths():
    # The prebuilt frontend (built by `jlpm build:prod` into prebuilt/, installed by the wheel).
    return [{"src": "prebuilt", "dest": "computehub"}]


def _jupyter_server_extension_points():
    return [{"module": "labextension"}]


def _load_jupyter_server_extension(serverapp):
    from .server import load

    load(serverapp)
