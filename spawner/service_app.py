"""What ComputeHub's small client services share (``computehub-launcher``,
``computehub-inventory``): where the service is, the token, a config file.

Like jupyterhub-idle-culler they run as hub services and talk to ComputeHub only
through its REST API (``ServiceClient``).
"""

from __future__ import annotations

import os

from traitlets import Unicode, default, validate
from traitlets.config import Application

from scheduler.config_checks import ConfigError, StrictConfig, check_url, recheck
from .service_client import ServiceClient


class ServiceClientApp(StrictConfig, Application):
    token_scope = ""    # the scope the token needs, for the message when none is set

    config_file = Unicode("computehub_config.py", config=True, help="""Config file to load: Python, or JSON
        when it ends in .json (the Helm chart's); the service's own file works. The default may be
        missing; a file named with --config must exist and load.""")
    computehub_url = Unicode(config=True, help="""URL of the service, e.g. http://127.0.0.1:10101/services/computehub
        (default: $COMPUTEHUB_URL).""")
    token = Unicode(config=True, help="""API token with the scope this service needs (see its docs)
        (default: $COMPUTEHUB_TOKEN, else $JUPYTERHUB_API_TOKEN, which the hub gives a managed service).""")

    @default("computehub_url")
    def _url(self):
        return os.environ.get("COMPUTEHUB_URL", "")

    @default("token")
    def _token(self):
        return os.environ.get("COMPUTEHUB_TOKEN") or os.environ.get("JUPYTERHUB_API_TOKEN", "")

    @validate("computehub_url")
    def _url_ok(self, proposal):
        return check_url(f"{type(self).__name__}.computehub_url (--url, $COMPUTEHUB_URL)", proposal.value,
                         empty_ok=True)

    def initialize(self, argv=None):
        # Settings are checked before the service is called (scheduler/config_checks.py).
        self.parse_command_line(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
        self.check_config_sections()
        recheck(self, ["computehub_url"])       # $COMPUTEHUB_URL too
        if not self.computehub_url or not self.token:
            raise ConfigError(f"set --url (or $COMPUTEHUB_URL) and a token with {self.token_scope} "
                              "($COMPUTEHUB_TOKEN or $JUPYTERHUB_API_TOKEN)")
        self.client = ServiceClient(self.computehub_url, self.token)
