"""The whole-sandbox memory ceiling of one run: a cgroup where there is one, else a watcher.

:func:`~agentdescent_core.sandbox.local.run_supervised` (``local`` and
``bwrap``) opens a :class:`MemoryGuard` per run.  ``limits.memory_mb`` then
bounds everything the run holds together, not only each process's address
space (``RLIMIT_AS`` stays as a per-process bound on top):

* with a cgroup (:mod:`agentdescent_core.sandbox.cgroup`: v2, v1 or a systemd
  scope), the kernel counts every page of every process of the run, tmpfs and
  ``/dev/shm`` pages included, and OOM-kills inside the group at the limit;
  the guard sees the kill in the group's event counter and the whole tree is
  killed with ``killed="memory"``.  The group also carries a task ceiling
  (:data:`TASK_BACKSTOP_FACTOR` times ``max_processes``, threads count) that
  makes fork fail where the process watch would be too slow to stop a burst.
* without one, the guard sums, every poll of the supervision loop, the
  proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``: shared pages
  split between their users, so a fork is not counted twice) of every process
  of the tree, plus what the sandbox's private tmpfs mounts hold (read through
  ``/proc/<pid>/root`` of a process inside the sandbox's mount namespace), and
  kills the tree with ``killed="memory"`` once the sum passes the limit.  It is
  a poll: a fast writer can overshoot by what it writes in one interval, and
  the tmpfs sizes (``bwrap`` makes each at most ``memory_mb``) are the hard
  bound.  What it cannot see: anonymous shared memory that is not mapped
  (a ``memfd`` filled with ``write``) and, under ``local``, files in the
  host's own ``/tmp`` or ``/dev/shm``.

``AGENTDESCENT_MEMORY_GUARD=watch`` in the controller's environment forces the
watcher (for tests, or where creating cgroups is not wanted).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence

from agentdescent_core.sandbox.cgroup import RunCgroup, cgroup_mode, open_cgroup
from agentdescent_core.sandbox.spec import Limits

TASK_BACKSTOP_FACTOR = 4
"""The cgroup's task ceiling is this many times ``max_processes`` (plus a margin):
it counts threads, so it sits well above the process watch's ceiling."""

_MIB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TASK_MARGIN = 16


def guard_mechanism() -> str:
    """What bounds a run's total memory here: ``cgroup-v2``, ``cgroup-v1``,
    ``cgroup-systemd`` or ``watch``."""
    mode = cgroup_mode()
    return "watch" if mode == "none" else f"cgroup-{mode}"


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _tmpfs_bytes(pid: int, mounts: Sequence[str]) -> int:
    """Bytes held by the tmpfs ``mounts`` as seen from inside ``pid``'s mount namespace."""
    used = 0
    seen: set[int] = set()
    for mount in mounts:
        path = f"/proc/{pid}/root{mount}"
        try:
            device = os.stat(path).st_dev
            if device in seen:
                continue
            seen.add(device)
            stats = os.statvfs(path)
        except OSError:
            continue
        used += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return used


def _mount_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def tree_memory_bytes(members: Iterable[int], private_tmpfs: Sequence[str] = ()) -> int:
    """Pss of ``members`` plus the use of their private tmpfs mounts (the watcher's sum).

    The tmpfs mounts are read through the first member whose mount namespace
    is not this process's (a sandbox's); a run without one counts no tmpfs.
    """
    pids = sorted(members)
    total = sum(_pss_bytes(pid) for pid in pids)
    if private_tmpfs:
        own = _mount_namespace("self")
        inside = next((pid for pid in pids if _mount_namespace(pid) not in (None, own)), None)
        if inside is not None:
            total += _tmpfs_bytes(inside, private_tmpfs)
    return total


class MemoryGuard:
    """One run's whole-sandbox memory ceiling (see the module docstring).

    Use: ``argv = guard.wrap(argv)`` before starting, ``guard.started(pid)``,
    ``guard.check(members)`` at every poll (a reason to kill, or None), and
    ``guard.finish()`` once the tree is dead (removes the cgroup; returns the
    reason when the ceiling was hit at any time during the run).
    """

    def __init__(self, limits: Limits, *, private_tmpfs: Sequence[str] = ()) -> None:
        self.limit_bytes = limits.memory_mb * _MIB
        self.private_tmpfs = tuple(private_tmpfs)
        tasks = limits.max_processes * TASK_BACKSTOP_FACTOR + _TASK_MARGIN
        self._cgroup: RunCgroup | None = open_cgroup(limits.memory_mb, tasks)
        self.mechanism = "watch" if self._cgroup is None else f"cgroup-{self._cgroup.mode}"
        self._tripped: str | None = None
        self.peak_bytes = 0
        """Highest sum the watcher saw (0 under a cgroup, where the kernel counts)."""

    def wrap(self, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """``argv`` made to start inside the run's cgroup (unchanged without one)."""
        return list(argv) if self._cgroup is None else self._cgroup.wrap(list(argv), env)

    def started(self, pid: int) -> None:
        if self._cgroup is not None:
            self._cgroup.started(pid)

    def check(self, members: Iterable[int]) -> str | None:
        """``memory`` (or ``processes``, the cgroup's task ceiling) when the run must die."""
        if self._tripped is None:
            if self._cgroup is not None:
                self._tripped = self._cgroup.tripped()
            else:
                used = tree_memory_bytes(members, self.private_tmpfs)
                self.peak_bytes = max(self.peak_bytes, used)
                if used > self.limit_bytes:
                    self._tripped = "memory"
        return self._tripped

    def finish(self) -> str | None:
        """Remove the cgroup (killing what is left in it); the reason if a ceiling was hit."""
        if self._cgroup is not None:
            with contextlib.suppress(OSError):
                if self._tripped is None:
                    self._tripped = self._cgroup.tripped()
            self._cgroup.close()
            self._cgroup = None
        return self._tripped
