"""How a wait is put in words, the same on the spawn page and in ``%submit``'s display.

Imports nothing (the notebook kernel's magics use it too)."""

from __future__ import annotations


def eta_text(seconds, earliest: bool = False) -> str:
    """``ETA ~40 s`` / ``ETA ~12 min`` / ``ETA ~2.5 h``; ``ETA unknown`` without an estimate;
    ``ETA ≥ 2.5 h`` when the estimate is only a lower bound (the work would borrow GPUs)."""
    if seconds is None:
        return "ETA unknown"
    about = "≥ " if earliest else "~"
    if seconds < 90:
        return f"ETA {about}{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"ETA {about}{round(seconds / 60)} min"
    return f"ETA {about}{seconds / 3600:.1f} h"
