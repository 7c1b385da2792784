# Installed by the computehub wheel as <sys.prefix>/etc/ipython/ipython_kernel_config.py, which
# IPython reads for every kernel of this environment: the %submit / %serve magics are loaded
# without %load_ext (docs/magics.md). append() keeps extensions configured elsewhere.
c.InteractiveShellApp.extensions.append("labextension")  # noqa: F821 - `c` is the config IPython passes
