"""Who a local job runs as and where: the OS account of its hub user (or the launcher's own, in
demo mode), its home, a working directory it may use, and its folders made as that account."""

from __future__ import annotations

import asyncio
import os
import pwd

from .launch_base import LaunchError
from .local_failures import start_error

# Run as the job's OS account: its folders, no exit codes of an earlier run, the script from stdin.
PREPARE = ('umask 022; mkdir -p -- "$1" "$2" || exit 1; rm -f -- "$1"/exit.* || exit 1; '
           'if [ -n "$3" ]; then cat > "$3" || exit 1; fi')


class LocalAccounts:
    """The part of ``LocalLauncher`` that decides who a job runs as and where (its settings:
    ``run_as_os_user``, ``min_uid``, ``max_uid``, ``allow_launcher_user``, ``home_template``,
    ``allowed_roots``)."""

    def identity(self, user: str) -> pwd.struct_passwd | None:
        """The OS account to run as, or None for the launcher's own user (demo mode)."""
        if os.getuid() == 0 and self.run_as_os_user:
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                pw = None
            if pw is not None:
                if not self.min_uid <= pw.pw_uid <= self.max_uid:
                    raise LaunchError(f"user {user!r} maps to a system account (uid {pw.pw_uid}, outside "
                                      f"{self.min_uid}-{self.max_uid}); jobs do not run as such accounts")
                return pw
        if not self.allow_launcher_user:
            why = "has no OS account on this machine" if self.run_as_os_user or os.getuid() != 0 else \
                "is not mapped to an OS account (run_as_os_user is off)"
            raise LaunchError(f"user {user!r} {why} and jobs may not run as the launcher's user "
                              f"({'root' if os.getuid() == 0 else 'uid %d' % os.getuid()}) here")
        return None

    def home_of(self, user: str, pw) -> str:
        if pw is not None:
            return pw.pw_dir
        return self.home_template.format(username=user) if self.home_template else ""

    def check_workdir(self, user: str, workdir: str, home: str, pw=None) -> str:
        """The real working directory, if it lies in the user's home or an allowed root."""
        roots = [r.format(username=user) for r in self.allowed_roots] + ([home] if home else [])
        if not workdir:
            if not home:
                raise LaunchError("no working directory given and the user has no home here")
            workdir = home
            if pw is None:                       # a demo home (home_template) is made on first use
                os.makedirs(workdir, exist_ok=True)
        real = os.path.realpath(workdir)
        for root in roots:
            r = os.path.realpath(root)
            if real == r or real.startswith(r.rstrip("/") + "/"):
                break
        else:
            where = ", ".join(dict.fromkeys(roots)) or "nowhere (no home, no LocalLauncher.allowed_roots)"
            raise LaunchError(f"working directory {workdir} is outside the folders jobs may run in: {where}")
        if not os.path.isdir(real):
            raise LaunchError(f"working directory {workdir} does not exist")
        return real

    async def _prepare(self, pw, run_dir: str, ckpt: str, script: str | None, text: str | None) -> None:
        """Make the job's run and checkpoint folders, clear exit codes of an earlier run and write
        the %%submit cell's script. For a job of an OS account this runs *as that account*: the
        folders lie in the user's home, and a root launcher that followed a link planted there
        would write where the user may not (a script "saved" over /etc/passwd)."""
        if pw is None:                   # the launcher's own user: no one to trick
            try:
                for d in (run_dir, ckpt):
                    os.makedirs(d, 0o755, exist_ok=True)
                for name in os.listdir(run_dir):
                    if name.startswith("exit."):
                        os.unlink(os.path.join(run_dir, name))    # from a run before a preemption
                if script is not None:
                    with open(script, "w") as f:
                        f.write(text)
            except OSError as e:
                raise LaunchError(start_error(e, "could not prepare the job's folders")) from None
            return
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", PREPARE, "computehub-prepare", run_dir, ckpt, script or "",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            cwd="/", env={"PATH": "/usr/bin:/bin"}, user=pw.pw_uid, group=pw.pw_gid,
            extra_groups=os.getgrouplist(pw.pw_name, pw.pw_gid), start_new_session=True)
        try:
            _, err = await asyncio.wait_for(proc.communicate((text or "").encode()), 30)
        except asyncio.TimeoutError:
            proc.kill()
            raise LaunchError(f"preparing the job's folders as {pw.pw_name} took over 30 s") from None
        if proc.returncode:
            why = err.decode(errors="replace").strip().splitlines()
            why = why[-1] if why else "exit code %d" % proc.returncode
            if "No space left" in why or "Disk quota" in why:
                why += " (the disk is full: an operator must free space)"
            raise LaunchError(f"could not prepare the job's folders as {pw.pw_name}: {why}")
