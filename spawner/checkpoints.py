"""When a job last saved a checkpoint, read from its ``$COMPUTEHUB_CHECKPOINT_DIR``.

A job saves into its folder; the newest modification time of the files there (and in their
direct subfolders: ``checkpoint-500/`` of the Hugging Face Trainer, per-step folders of
torch.distributed.checkpoint) says when it last saved. A job should write each checkpoint
atomically (to a temporary name, then ``os.replace``), so that a file caught half-written is
never taken for a saved checkpoint: temporary names (``*.tmp``, ``*.partial``, names starting
with ``.``) are not counted.
"""

from __future__ import annotations

import os

MAX_ENTRIES = 10_000        # bounds the cost of one look at a folder of many shards
_UNFINISHED = (".tmp", ".partial", ".part", ".incomplete")


def newest_save(folder: str) -> float | None:
    """The newest modification time (UNIX time) of a saved file in ``folder`` or its direct
    subfolders; None when it holds none (or cannot be read)."""
    newest = None
    seen = 0
    try:
        top = list(os.scandir(folder))
    except OSError:
        return None
    for entry in top:
        if _unfinished(entry.name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as inner:
                    for e in inner:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            return newest
                        if not _unfinished(e.name) and e.is_file(follow_symlinks=False):
                            newest = max(newest or 0.0, e.stat(follow_symlinks=False).st_mtime)
            elif entry.is_file(follow_symlinks=False):
                newest = max(newest or 0.0, entry.stat(follow_symlinks=False).st_mtime)
        except OSError:
            continue                    # removed while looked at: the next look sees the rest
        seen += 1
        if seen > MAX_ENTRIES:
            break
    return newest


def _unfinished(name: str) -> bool:
    return name.startswith(".") or name.endswith(_UNFINISHED)
