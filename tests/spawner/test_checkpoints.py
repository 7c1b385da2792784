"""``spawner.checkpoints.newest_save``: when a job last saved, read from its checkpoint folder."""

import os

from spawner.checkpoints import newest_save


def _file(path, mtime):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("x")
    os.utime(path, (mtime, mtime))


def test_the_newest_saved_file_counts_also_in_subfolders(tmp_path):
    assert newest_save(str(tmp_path / "missing")) is None
    assert newest_save(str(tmp_path)) is None                 # empty
    (tmp_path / "empty-dir").mkdir()
    assert newest_save(str(tmp_path)) is None                 # folders alone are not saves
    _file(str(tmp_path / "last.pt"), 1000)
    assert newest_save(str(tmp_path)) == 1000
    _file(str(tmp_path / "checkpoint-500" / "model.safetensors"), 2000)     # Trainer's layout
    assert newest_save(str(tmp_path)) == 2000
    _file(str(tmp_path / "a" / "b" / "deep.pt"), 9000)        # two levels down: not looked at
    assert newest_save(str(tmp_path)) == 2000


def test_files_being_written_do_not_count(tmp_path):
    _file(str(tmp_path / "last.pt"), 1000)
    for name in ("last.pt.tmp", ".last.pt.swp", "shard.partial", "x.part", "y.incomplete"):
        _file(str(tmp_path / name), 5000)
    _file(str(tmp_path / "step-2.tmp" / "model.pt"), 5000)    # a folder still being written
    assert newest_save(str(tmp_path)) == 1000
