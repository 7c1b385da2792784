"""``python -m hub_ext ...`` is the ``computehub`` command."""

import sys

from .cli import main

sys.exit(main())
