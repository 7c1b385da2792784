"""The chart's tests: helm renders it (chart.py); no Kubernetes cluster can run here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "hub_ext"))
