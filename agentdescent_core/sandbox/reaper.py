"""After a ``local`` run: find and kill every process the run left behind, wherever it went.

Killing the run's process group and session and the descendants of its root
(:func:`tree_members`) misses a process that
called ``setsid()`` and was re-parented to init — a double fork, or
``subprocess.Popen(..., start_new_session=True)`` from a candidate's script.
Such a process could outlive the run and rewrite the next candidate's files.
So after each run :func:`sweep` looks at every process that started since the
run began (``/proc/<pid>/stat`` start time, so older processes cost one read)
and kills the ones that show they belong to it:

* its working directory or root is inside the run's workspace or scratch
  directory (``/proc/<pid>/cwd``, ``/proc/<pid>/root``);
* one of its open file descriptors points there (``/proc/<pid>/fd``);
* its initial environment names the run's scratch directory (``HOME`` and
  ``TMPDIR`` point there; ``/proc/<pid>/environ``), which survives ``chdir``
  and closing every descriptor.

Only processes of this user are considered (every process when running as
root), never this process or its ancestors.  A process that drops all of that
— re-executes itself with a clean environment, outside the workspace, with no
descriptor open there — is not found: ``local`` is not a security boundary.
Signals go through a pidfd where the system has them, so a pid reused in
between is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

_ROUNDS = 20


def read_proc(path: str, size: int = 4096) -> bytes | None:
    """The first ``size`` bytes of a ``/proc`` file, or None (gone, not allowed).

    Plain ``os.open``/``os.read``: about five times faster than ``open()`` here,
    which matters when every process of the machine is looked at after each run.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


class ProcStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` the supervision reads."""

    ppid: int
    session: int
    start: int
    """When the process started, in clock ticks since boot (field 22)."""
    state: str
    """``R``, ``S``, ... ``Z`` (zombie), ``X`` (dead)."""


def proc_stat(pid: int | str) -> ProcStat | None:
    """(parent pid, session, start ticks, state) of ``pid``, or None (gone, unreadable)."""
    raw = read_proc(f"/proc/{pid}/stat")
    if raw is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    if len(fields) < 20:
        return None
    return ProcStat(int(fields[1]), int(fields[3]), int(fields[19]), fields[0].decode())


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    stat = proc_stat(pid)
    return None if stat is None else stat.start


def ancestors(pid: int | None = None) -> list[int]:
    """``pid`` (default: this process) and every process above it, up to pid 1."""
    chain: list[int] = []
    current = os.getpid() if pid is None else pid
    while current > 0 and current not in chain:
        chain.append(current)
        found = proc_stat(current)
        if found is None:
            break
        current = found.ppid
    return chain


def _inside(target: str, prefixes: Sequence[str]) -> bool:
    return any(target == p or target.startswith(p + os.sep) for p in prefixes)


def _belongs(pid: str, prefixes: Sequence[str], needles: Sequence[bytes]) -> bool:
    base = f"/proc/{pid}"
    for link in ("cwd", "root"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"{base}/{link}")
            if link == "cwd" and _inside(target, prefixes):
                return True
            if link == "root" and target != "/" and _inside(target, prefixes):
                return True
    environ = read_proc(f"{base}/environ", 1 << 20)
    if environ is not None and any(needle in environ for needle in needles):
        return True
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if _inside(os.readlink(f"{base}/fd/{fd}"), prefixes):
                return True
    return False


def _kill(pid: int) -> bool:
    """SIGKILL ``pid`` (through a pidfd when possible); True when the signal was sent."""
    opener = getattr(os, "pidfd_open", None)
    sender = getattr(signal, "pidfd_send_signal", None)
    if opener is not None and sender is not None:
        try:
            fd = opener(pid)
        except OSError:
            return False
        try:
            sender(fd, signal.SIGKILL)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except OSError:
        return False


def live_pids() -> frozenset[str]:
    """The pids in ``/proc`` now (one directory listing), for :func:`sweep`'s ``older``."""
    try:
        return frozenset(name for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return frozenset()


def tree_members(root: int) -> set[int]:
    """Live processes of the run: the root's session plus every descendant of the root.

    The session catches processes that left the process group with
    ``setpgid``; the descendant walk catches ones inside a PID namespace
    (``bwrap`` starts the command in a new session there).
    """
    children: dict[int, list[int]] = {}
    members: set[int] = set()
    for name in live_pids():
        stat = proc_stat(name)
        if stat is None or stat.state in ("Z", "X"):
            continue
        pid = int(name)
        children.setdefault(stat.ppid, []).append(pid)
        if stat.session == root:
            members.add(pid)
    stack = [root]
    seen = {root}
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                members.add(child)
                stack.append(child)
    return members


def sweep(paths: Iterable[Path], *, since: int | None,
          spare: Callable[[], set[int]] | None = None,
          older: frozenset[str] = frozenset()) -> int:
    """Kill every process that belongs to the run in ``paths``; return how many were killed.

    ``paths`` are the run's workspace and scratch directory; ``since`` the run
    root's start time (:func:`start_ticks`; None: look at every process).
    ``spare`` gives pids never to touch besides this process and its ancestors
    (the processes of other runs still going on in the same directories); it is
    asked once, and only when something would be killed;
    ``older`` the pids alive before the run started (:func:`live_pids`), skipped
    without a read — a pid is reused only after the kernel wraps around
    ``pid_max``, which no run gets near.
    Repeats until a look finds nobody, so a process forked during the sweep
    is found in the next round.
    """
    prefixes = [os.path.realpath(p) for p in paths]
    needles = [f"={p}{end}".encode() for p in prefixes for end in ("/", "\0")]
    keep = set(ancestors())
    spared: set[int] | None = None
    uid = os.getuid()
    root = os.geteuid() == 0
    killed: set[int] = set()
    for _ in range(_ROUNDS):
        found = 0
        try:
            entries = list(os.scandir("/proc"))
        except OSError:
            return len(killed)
        for entry in entries:
            if not entry.name.isdigit() or entry.name in older:
                continue
            pid = int(entry.name)
            if pid in keep:
                continue
            info = proc_stat(entry.name)
            if info is None or info.state in ("Z", "X"):
                continue
            if since is not None and info.start < since:
                continue
            if not root:
                try:
                    if entry.stat().st_uid != uid:
                        continue
                except OSError:
                    continue
            if not _belongs(entry.name, prefixes, needles):
                continue
            if spared is None:
                spared = spare() if spare is not None else set()
            if pid not in spared and _kill(pid) and pid not in killed:
                killed.add(pid)
                found += 1
        if not found:
            break
        time.sleep(0.005)
    return len(killed)
