"""The ``bwrap`` backend: Linux namespaces through Debian's ``bubblewrap``.

What the child sees (mounts are applied in this order, later ones win):

1. the host's ``/`` bound read-only; a fresh ``/dev`` and ``/proc``;
2. empty tmpfs over ``/tmp``, ``/var/tmp``, the home directories (``/root``,
   ``/home``, ``/run/user``, the parent's ``$HOME``) and every ``hidden`` path, so
   the user's repository, dotfiles and the host's temporary files are not
   visible (a hidden *file* is replaced by an empty read-only one);
3. the ``readable`` paths (interpreter, virtualenv) bound read-only again;
4. the workspace bound read-only at its own path (hidden directories are made
   read-only too, unless one of these binds lies inside them);
5. the ``writable`` paths, the scratch directory and ``extra_writable`` bound
   read-write.  Scratch and ``extra_writable`` directories are created when
   missing; a ``writable`` path (file or directory) that does not exist yet is
   not bound, so nothing can be created there: create artifact roots first.

The child gets new PID, IPC and UTS namespaces (and a new network namespace,
with only a loopback of its own, for network ``none``), a new session (no
TIOCSTI into the parent's terminal), every capability dropped (bwrap keeps
them for root otherwise, which would allow remounting ``/`` read-write), and
dies with its parent.  Resource limits, the process ceiling, the timeout and
output capture are the ``local`` backend's (:func:`run_supervised`); killing
the tree takes the PID namespace's init with it, so no process survives.
bwrap's init reports a child killed by signal N as exit status 128 + N; it is
turned back into ``-N`` (so a command that itself exits with 129..159 is read as
a signal: pytest never does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from agentdescent_core.sandbox.local import (
    ProbedOnce,
    SandboxSetupError,
    require_workspace,
    run_supervised,
)
from agentdescent_core.sandbox.spec import RunResult, RunSpec

__all__ = ["HOME_LIKE_DIRS", "BwrapBackend"]

HOME_LIKE_DIRS: tuple[str, ...] = ("/tmp", "/var/tmp", "/root", "/home", "/run/user")
"""Host directories replaced by empty tmpfs in every run (plus the parent's ``$HOME``)."""

_WRAPPER_PROCESSES = 2  # bwrap's monitor and the PID namespace's init
_PROBE_TIMEOUT = 15.0


def _existing(paths: Iterable[Path]) -> list[Path]:
    return [Path(p).absolute() for p in paths if Path(p).exists() or Path(p).is_symlink()]


def _depth(path: Path) -> int:
    return len(path.parts)


class BwrapBackend(ProbedOnce):
    """Namespaces: host and workspace read-only except the artifact paths and scratch."""

    name = "bwrap"
    added_env: tuple[str, ...] = ("PWD",)
    """bwrap always sets PWD to the working directory (the workspace)."""

    def __init__(self, executable: str | None = None) -> None:
        super().__init__()
        self._executable = executable

    @property
    def executable(self) -> str | None:
        return self._executable or shutil.which("bwrap")

    def _probe(self) -> str | None:
        """Is bwrap installed, and may it create namespaces here?"""
        executable = self.executable
        if executable is None:
            return "bwrap is not installed: install bubblewrap (apt-get install bubblewrap)"
        argv = [
            executable,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",
            "--", "true",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                env={"PATH": "/usr/bin:/bin"},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not run a trial sandbox: {exc}"
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", errors="replace").strip()
            return (
                f"bwrap cannot create namespaces here ({detail or f'exit {done.returncode}'}); "
                "allow unprivileged user namespaces or run with a backend that works here"
            )
        return None

    def command(self, spec: RunSpec) -> list[str]:
        """The bwrap argv for ``spec`` (exposed for tests and the run header's debug output)."""
        executable = self.executable
        if executable is None:
            raise SandboxSetupError(
                "bwrap is not installed: install bubblewrap (apt-get install bubblewrap) "
                "or choose --evolve-sandbox local/docker"
            )
        args = [executable, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        blank = {Path(p) for p in HOME_LIKE_DIRS}
        home = os.environ.get("HOME")
        if home and Path(home).is_absolute() and Path(home) != Path("/"):
            blank.add(Path(home))
        for path in sorted(_existing(blank), key=_depth):
            if path.is_dir():
                args += ["--tmpfs", str(path)]
        binds: list[tuple[int, int, str, Path]] = []
        for path in _existing(spec.readable):
            binds.append((_depth(path), 0, "--ro-bind", path))
        workspace = spec.workspace.absolute()
        binds.append((_depth(workspace), 1, "--ro-bind", workspace))
        for path in _existing([*spec.writable, spec.scratch, *spec.extra_writable]):
            binds.append((_depth(path), 2, "--bind", path))
        for path in sorted(_existing(spec.hidden), key=_depth):
            if path.is_dir() and not path.is_symlink():
                args += ["--tmpfs", str(path)]
                # Read-only unless a later bind needs a mount point created inside it.
                if not any(target.is_relative_to(path) for *_, target in binds):
                    args += ["--remount-ro", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
        for _depth_key, _rank, option, path in sorted(binds):
            args += [option, str(path), str(path)]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if spec.network == "none":
            args.append("--unshare-net")
        args += [
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",
            "--chdir", str(spec.workspace.absolute()),
            "--", *spec.argv,
        ]  # fmt: skip
        return args

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` inside a fresh bwrap sandbox (environment exactly ``spec.env``)."""
        require_workspace(spec)
        for directory in (spec.scratch, *spec.extra_writable):
            Path(directory).mkdir(parents=True, exist_ok=True)
        return run_supervised(
            self.command(spec),
            cwd=spec.workspace,
            env=spec.env,
            timeout=spec.timeout,
            limits=spec.limits,
            wrapper_processes=_WRAPPER_PROCESSES,
            signal_exit_codes=True,
        )

    def __repr__(self) -> str:
        return f"BwrapBackend(executable={self.executable!r})"
