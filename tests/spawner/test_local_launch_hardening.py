"""What a local job may reach, whatever its submission says (spawner/launch_local.py).

Real processes, no hub; GPUs are emulated (their indices only go into the environment).

- A root launcher runs a job as the user's OS account. Python's ``Popen(cwd=..., user=...)``
  changes directory *before* it drops root, so root enters a working directory below a
  folder the account may not pass (another user's 0700 folder inside a shared
  ``allowed_roots`` entry such as '/scratch'; or reached by a link swapped into the path
  after the launcher checked it). The job's wrapper (``local_failures.WRAPPER``) checks, as
  the account, that it may reach its directory by path, and refuses to run otherwise: this
  guards that (a job's own ``PWD`` cannot fool it: the shell checks it against ".").
- ``CUDA_VISIBLE_DEVICES`` holds NVML's indices (PCI bus order); a job gets
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA numbers them the same way, and cannot change it.
"""

from __future__ import annotations

import os
import pwd

import pytest
from test_launch_local import launcher, py, root, run, until_ended, workload  # noqa: F401 (root: fixture)


def nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def as_nobody(root):
    """A root launcher running jobs as their OS accounts; the job's own folders outside its
    working directory ('nobody' has no home)."""
    return launcher(root, allow_launcher_user=False, min_uid=1000, run_dir_template=str(root / "runs" / "{id}"),
                    checkpoint_dir_template=str(root / "ckpt" / "{id}"))


@pytest.mark.skipif(os.getuid() != 0 or nobody() is None, reason="needs a root launcher and a 'nobody' account")
def test_a_job_cannot_start_below_a_folder_its_account_may_not_pass(root):
    locked = root / "scratch" / "bob"                 # bob's 0700 folder in a shared allowed root
    inner = locked / "results"
    inner.mkdir(parents=True)
    (inner / "secret.txt").write_text("bob's numbers\n")
    inner.chmod(0o755)
    (inner / "secret.txt").chmod(0o644)
    locked.chmod(0o700)
    lch = as_nobody(root)
    w = workload("w-locked", ["/bin/cat", "secret.txt"], root, user="nobody", env={"PWD": str(root)})
    w["metadata"]["job"]["workdir"] = str(inner)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    ended = run(go())
    log = (root / "logs" / "w-locked.log").read_text()
    assert "bob's numbers" not in log, log
    assert ended.exit_code == 126, ended
    assert "may not enter it" in ended.reason and str(inner) in ended.reason, ended


@pytest.mark.skipif(os.getuid() != 0 or nobody() is None, reason="needs a root launcher and a 'nobody' account")
def test_a_job_of_another_account_still_runs_in_its_folder(root):
    mine = root / "scratch" / "nobody" / "proj"
    mine.mkdir(parents=True)
    os.chown(mine, nobody().pw_uid, nobody().pw_gid)
    (root / "scratch").chmod(0o755)
    (root / "scratch" / "nobody").chmod(0o755)
    lch = as_nobody(root)
    w = workload("w-mine", ["/bin/sh", "-c", 'printf "%s %s" "$(pwd -P)" "$(id -u)" > where'],
                 root, user="nobody")
    w["metadata"]["job"]["workdir"] = str(mine)

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    ended = run(go())
    assert ended.exit_code == 0, (ended, (root / "logs" / "w-mine.log").read_text())
    assert (mine / "where").read_text() == f"{mine} {nobody().pw_uid}"


def test_cuda_numbers_gpus_as_the_placement_does(root):
    lch = launcher(root)
    (root / "homes" / "alice").mkdir(parents=True)
    code = ("import os; open('cuda-' + os.environ['RANK'], 'w').write(repr((os.environ.get('CUDA_DEVICE_ORDER'), "
            "os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('NVIDIA_VISIBLE_DEVICES'))))")
    w = workload("w-order", py(code), root, workers=2,
                 env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "NVIDIA_VISIBLE_DEVICES": "all"})

    async def go():
        await lch.start(w)
        return await until_ended(lch, w)
    ended = run(go())
    assert ended.exit_code == 0, ended
    assert [eval((root / f"cuda-{r}").read_text()) for r in (0, 1)] == [("PCI_BUS_ID", "0", None),
                                                                      ("PCI_BUS_ID", "1", None)]
