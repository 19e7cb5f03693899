"""The ``bwrap`` backend: Linux namespaces through Debian's ``bubblewrap``.

What the child sees is built from nothing (bwrap's new root is an empty tmpfs,
made read-only once every mount is in place).  Mounts are applied in this
order; a deeper path is mounted after the shallower ones that contain it:

1. the system directories read-only (:data:`~agentdescent_core.sandbox.hostview.SYSTEM_TOP_DIRS`;
   a top-level symlink such as ``/bin -> usr/bin`` is recreated as that symlink)
   and ``/etc`` read-only with its secrets masked
   (:data:`~agentdescent_core.sandbox.hostview.ETC_MASKED`); when
   ``/etc/resolv.conf`` or ``/etc/hosts`` points outside those (Ubuntu's
   ``/run/systemd/resolve/stub-resolv.conf``), that one target file is bound too;
2. a fresh ``/dev`` (read-only, device nodes only) with a private tmpfs
   ``/dev/shm``, a private ``/proc``, and a private tmpfs ``/tmp``; both tmpfs
   are at most ``limits.memory_mb`` and what they hold counts against the
   whole-sandbox memory ceiling (see :mod:`agentdescent_core.sandbox.memwatch`);
3. the ``readable`` paths (interpreter, virtualenv, ``sys.path``) read-only;
4. the workspace read-only at its own path (it lives under the host's temp
   dir: it is bound on top of the private ``/tmp``) — or, when the spec has
   ``workspace_writes``, the whole workspace copy read-write;
5. the ``writable`` paths, the scratch directory and ``extra_writable`` bound
   read-write, then each ``workspace_writes.protected`` file read-only on top
   (a write, unlink or rename of one fails with ``EROFS``/``EBUSY``).
   Scratch and ``extra_writable`` directories are created when missing; a
   ``writable`` path (file or directory) that does not exist yet is not bound,
   so nothing can be created there: create artifact roots first.

A ``hidden`` path that lies inside one of these mounts is covered by an empty
tmpfs (a file by an empty read-only one) unless a ``readable`` path re-exposes
it.  Nothing else of the host exists in the sandbox: no ``/run`` or
``/var/run`` (so no docker socket, no D-Bus, no unix socket of any host
service), no ``/var``, ``/opt``, ``/home``, ``/root``, ``/srv``, ``/mnt``, no
file of the host's ``/tmp`` or ``/dev/shm``, unless a spec path lists it.  A
container daemon's socket is refused even when listed
(:func:`~agentdescent_core.sandbox.hostview.refuse_daemon_sockets`).

The child gets new PID, IPC and UTS namespaces (and a new network namespace,
with only a loopback of its own, for network ``none``), a new session (no
TIOCSTI into the parent's terminal), every capability dropped (bwrap keeps
them for root otherwise, which would allow remounting ``/`` read-write), and
dies with its parent.  Resource limits, the process ceiling, the whole-sandbox
memory ceiling, the timeout and output capture are the ``local`` backend's
(:func:`run_supervised`); killing the tree takes the PID namespace's init
with it, so no process survives.  bwrap's init reports a child killed by
signal N as exit status 128 + N; it is turned back into ``-N`` (so a command
that itself exits with 129..159 is read as a signal: pytest never does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from agentdescent_core.sandbox.hostview import (
    ETC_MASKED,
    SYSTEM_TOP_DIRS,
    refuse_daemon_sockets,
)
from agentdescent_core.sandbox.local import (
    ProbedOnce,
    SandboxSetupError,
    require_workspace,
    run_supervised,
)
from agentdescent_core.sandbox.spec import RunResult, RunSpec

PRIVATE_TMPFS: tuple[str, ...] = ("/tmp", "/dev/shm")
"""The sandbox's own writable tmpfs mounts (their use is memory of the run)."""

_WRAPPER_PROCESSES = 2  # bwrap's monitor and the PID namespace's init
_PROBE_TIMEOUT = 15.0
_MIB = 1024 * 1024
_HIDDEN_TMPFS_BYTES = _MIB  # room for the mount points of binds inside a hidden directory
_NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts")

# Sort ranks of the mounts at one depth: a later rank is mounted on top.
_HIDE, _READ, _WORKSPACE, _WRITE, _PROTECT = range(5)


def _existing(paths: Iterable[Path]) -> list[Path]:
    return [Path(p).absolute() for p in paths if Path(p).exists() or Path(p).is_symlink()]


def _depth(path: Path) -> int:
    return len(path.parts)


def system_view() -> list[str]:
    """bwrap arguments for the read-only system part of the view (dirs, ``/etc``)."""
    args: list[str] = []
    shown: list[Path] = []
    for top in SYSTEM_TOP_DIRS:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
            shown.append(path)
    etc = Path("/etc")
    if etc.is_dir():
        args += ["--ro-bind", "/etc", "/etc"]
        shown.append(etc)
        for masked in ETC_MASKED:
            path = Path(masked)
            if path.is_symlink() or not path.exists():
                continue
            if path.is_dir():
                args += ["--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs", masked,
                         "--remount-ro", masked]  # fmt: skip
            else:
                args += ["--ro-bind", "/dev/null", masked]
        for name in _NETWORK_ETC:
            target = Path(name).resolve()
            if target.is_file() and not any(target.is_relative_to(p) for p in shown):
                args += ["--ro-bind", str(target), str(target)]
    return args


class BwrapBackend(ProbedOnce):
    """Namespaces: a minimal read-only view, writable only the artifact paths and scratch."""

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
        """Is bwrap installed, new enough, and may it create namespaces here?"""
        executable = self.executable
        if executable is None:
            return "bwrap is not installed: install bubblewrap (apt-get install bubblewrap)"
        argv = [
            executable,
            *system_view(),
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--size", str(_MIB), "--tmpfs", "/tmp",
            "--remount-ro", "/",
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
            if "Unknown option" in detail:
                return (
                    f"bwrap is too old ({detail}): the sandbox needs bubblewrap 0.8 or newer "
                    "(--size for its private /tmp)"
                )
            return (
                f"bwrap cannot create namespaces here ({detail or f'exit {done.returncode}'}); "
                "allow unprivileged user namespaces or run with a backend that works here"
            )
        return None

    def command(self, spec: RunSpec) -> list[str]:
        """The bwrap argv for ``spec`` (exposed for tests and the run header's debug output).

        Raises :class:`SandboxSetupError` when a spec path is a container daemon's
        socket or holds one.
        """
        executable = self.executable
        if executable is None:
            raise SandboxSetupError(
                "bwrap is not installed: install bubblewrap (apt-get install bubblewrap) "
                "or choose --evolve-sandbox local/docker"
            )
        refuse_daemon_sockets(
            [spec.workspace, spec.scratch, *spec.readable, *spec.writable, *spec.extra_writable],
            self.name,
        )
        tmpfs_bytes = str(spec.limits.memory_mb * _MIB)
        args = [executable, *system_view()]
        args += [
            "--dev", "/dev",
            "--perms", "1777", "--size", tmpfs_bytes, "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--size", tmpfs_bytes, "--tmpfs", "/tmp",
        ]  # fmt: skip
        mounts: list[tuple[int, int, str, Path]] = []
        for path in _existing(spec.readable):
            mounts.append((_depth(path), _READ, "--ro-bind", path))
        workspace = spec.workspace.absolute()
        writes = spec.workspace_writes
        if writes is not None and workspace.is_relative_to(writes.root.absolute()):
            # Tests may write into the copy; its frozen files stay read-only one by one.
            root = writes.root.absolute()
            mounts.append((_depth(root), _WRITE, "--bind", root))
            for path in _existing(writes.protected):
                mounts.append((_depth(path), _PROTECT, "--ro-bind", path))
        else:
            mounts.append((_depth(workspace), _WORKSPACE, "--ro-bind", workspace))
        for path in _existing([*spec.writable, spec.scratch, *spec.extra_writable]):
            mounts.append((_depth(path), _WRITE, "--bind", path))
        system = [Path(p) for p in (*SYSTEM_TOP_DIRS, "/etc")]
        shown = [p for p in system if p.is_dir() and not p.is_symlink()]
        shown += [path for *_, path in mounts]
        for path in _existing(spec.hidden):
            # Only what some mount would show needs covering; the rest does not exist here.
            if any(path.is_relative_to(p) and path != p for p in shown):
                mounts.append((_depth(path), _HIDE, "hide", path))
        for _depth_key, _rank, option, path in sorted(mounts):
            if option != "hide":
                args += [option, str(path), str(path)]
            elif path.is_dir() and not path.is_symlink():
                args += ["--size", str(_HIDDEN_TMPFS_BYTES), "--tmpfs", str(path)]
                # Read-only unless a later bind needs a mount point created inside it.
                if not any(p.is_relative_to(path) and p != path for *_, p in mounts):
                    args += ["--remount-ro", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
        args += ["--remount-ro", "/"]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if spec.network == "none":
            args.append("--unshare-net")
        args += [
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",
            "--chdir", str(workspace),
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
            private_tmpfs=PRIVATE_TMPFS,
        )

    def __repr__(self) -> str:
        return f"BwrapBackend(executable={self.executable!r})"
