"""One control group per run: a memory ceiling (and a task backstop) for the whole sandbox.

``RLIMIT_AS`` bounds one process; a candidate that forks twenty processes, or
fills a tmpfs (a tmpfs page belongs to no process), is not bounded by it.  A
memory cgroup is: the kernel charges every page of every process in it,
tmpfs and ``/dev/shm`` pages included (they are charged to the cgroup of the
process that wrote them), and OOM-kills inside the group when the total
passes the limit.

Where a cgroup comes from, first that works on this machine (probed once per
process, :func:`cgroup_mode`):

* ``v2``: a child of this process's own cgroup in the unified hierarchy, when
  the ``memory`` controller is enabled for its children there (or can be:
  root of a container's cgroup namespace, a delegated subtree);
* ``v1``: a child of this process's cgroup in a writable v1 ``memory``
  hierarchy (root on a host or container with cgroup v1 or hybrid mounts),
  plus one in the v1 ``pids`` hierarchy when that is writable too;
* ``systemd``: ``systemd-run --user --scope`` with ``MemoryMax`` (a normal
  user on a systemd machine whose user manager delegates the memory controller);
* otherwise none, and :mod:`agentdescent_core.sandbox.memwatch` falls back to a
  watcher.

The command joins its cgroup itself before it execs the sandbox (a tiny
``/bin/sh`` prefix writes its own pid to ``cgroup.procs``), so nothing of the
run ever executes outside it.  At the limit no test of the run gets to finish
normally: under v1 the OOM killer is disabled for the group, so its processes
wait at the limit until the supervisor sees ``under_oom`` and kills the whole
run; under v2 ``memory.oom.group`` makes one OOM kill take every process of
the group.  (A systemd scope only OOM-kills the largest process; the
supervisor still kills the rest as soon as it sees the event.)  After the run
every process still in the group is killed and the group removed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_MIB = 1024 * 1024
_PREFIX = "agentdescent-"
_counter = itertools.count()
_PROBE_TIMEOUT = 15.0
_CLOSE_ROUNDS = 100  # 10 ms each; a group left busy longer is retried later
_EXIT_ROUNDS = 500
_leftovers: list[Path] = []
_leftovers_lock = threading.Lock()


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of every cgroup mount of this process."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(",")) | set(fields[5].split(",") if len(fields) > 5 else ())
        found.append((fields[4].replace("\\040", " "), tail[0], options))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller (and ``""`` for the v2 hierarchy)."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _writable_child_dir(parent: Path) -> bool:
    """Can we create (and remove) a child cgroup under ``parent``?"""
    probe = parent / f"{_PREFIX}probe-{os.getpid()}-{next(_counter)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _v2_parent() -> Path | None:
    own = _own_paths().get("")
    mount = next((m for m, fs, _ in _mounts() if fs == "cgroup2"), None)
    if own is None or mount is None:
        return None
    parent = Path(mount) / own.lstrip("/")
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return None
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+memory")
    except OSError:
        return None
    with contextlib.suppress(OSError):  # a pids ceiling is a bonus, not a requirement
        (parent / "cgroup.subtree_control").write_text("+pids")
    return parent if _writable_child_dir(parent) else None


def _v1_parent(controller: str) -> Path | None:
    own = _own_paths().get(controller)
    mount = next((m for m, fs, opts in _mounts() if fs == "cgroup" and controller in opts), None)
    if own is None or mount is None:
        return None
    parent = Path(mount) / own.lstrip("/")
    return parent if _writable_child_dir(parent) else None


def _systemd_scope_works() -> bool:
    tool = shutil.which("systemd-run")
    if tool is None:
        return False
    try:
        done = subprocess.run(
            [tool, "--user", "--scope", "--quiet", "-p", "MemoryMax=64M", "--", "true"],
            capture_output=True, timeout=_PROBE_TIMEOUT, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@dataclass(frozen=True)
class _Mode:
    name: str  # "v2", "v1", "systemd" or "none"
    memory_parent: Path | None = None
    pids_parent: Path | None = None


def _mode() -> _Mode:
    """The probed mode, unless ``AGENTDESCENT_MEMORY_GUARD=watch`` turns cgroups off."""
    if os.environ.get("AGENTDESCENT_MEMORY_GUARD", "").strip().lower() == "watch":
        return _Mode("none")
    return _probed_mode()


@functools.lru_cache(maxsize=1)
def _probed_mode() -> _Mode:
    v2 = _v2_parent()
    if v2 is not None:
        return _Mode("v2", v2, v2)
    v1 = _v1_parent("memory")
    if v1 is not None:
        return _Mode("v1", v1, _v1_parent("pids"))
    if _systemd_scope_works():
        return _Mode("systemd")
    return _Mode("none")


def cgroup_mode() -> str:
    """``v2``, ``v1``, ``systemd`` or ``none``: how runs get a cgroup on this machine."""
    return _mode().name


class RunCgroup:
    """The cgroup(s) of one run: join them with :meth:`wrap`, poll :meth:`tripped`.

    ``tripped()`` says ``"memory"`` once the kernel OOM-killed inside the group
    and ``"processes"`` once a fork was refused at the task backstop.
    """

    def __init__(self, mode: _Mode, memory_bytes: int, max_tasks: int) -> None:
        self.mode = mode.name
        self._dirs: list[Path] = []
        self._memory_dir: Path | None = None
        self._pids_dir: Path | None = None
        self._systemd_props = [f"MemoryMax={memory_bytes}", "MemorySwapMax=0",
                               f"TasksMax={max_tasks}"]  # fmt: skip
        self._root_pid: int | None = None
        self._oom_event: int | None = None
        self._oom_seen = False
        name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        try:
            if mode.name in ("v1", "v2") and mode.memory_parent is not None:
                self._memory_dir = self._make(mode.memory_parent / name)
                if mode.name == "v2":
                    self._write(self._memory_dir, "memory.max", memory_bytes)
                    self._write(self._memory_dir, "memory.swap.max", 0, required=False)
                    # One OOM kill takes the whole group: no test gets to record after it.
                    self._write(self._memory_dir, "memory.oom.group", 1, required=False)
                    self._write(self._memory_dir, "pids.max", max_tasks, required=False)
                    self._pids_dir = self._memory_dir
                else:
                    self._write(self._memory_dir, "memory.limit_in_bytes", memory_bytes)
                    self._write(self._memory_dir, "memory.memsw.limit_in_bytes", memory_bytes,
                                required=False)  # fmt: skip
                    # At the limit the group's processes wait instead of being OOM-killed
                    # one by one; the poll sees ``under_oom`` and kills the whole run.
                    self._write(self._memory_dir, "memory.oom_control", 1, required=False)
                    self._oom_event = _oom_eventfd(self._memory_dir)
                    if mode.pids_parent is not None:
                        self._pids_dir = self._make(mode.pids_parent / name)
                        self._write(self._pids_dir, "pids.max", max_tasks)
        except OSError:
            self.close()
            raise

    def _make(self, path: Path) -> Path:
        path.mkdir()
        self._dirs.append(path)
        return path

    @staticmethod
    def _write(folder: Path, name: str, value: int, *, required: bool = True) -> None:
        try:
            (folder / name).write_text(str(value))
        except OSError:
            if required:
                raise

    def wrap(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        """``argv`` prefixed so that the process joins the group before it execs.

        The shell prefix would add ``PWD`` to the environment (or rewrite it), so
        it puts back exactly what ``env`` says.
        """
        if self.mode == "systemd":
            tool = shutil.which("systemd-run") or "systemd-run"
            props = [arg for prop in self._systemd_props for arg in ("-p", prop)]
            return [tool, "--user", "--scope", "--quiet", *props, "--", *argv]
        procs = [str(d / "cgroup.procs") for d in self._dirs]
        if not procs:
            return list(argv)
        shell = shutil.which("sh", path="/usr/bin:/bin") or "/bin/sh"
        restore = 'PWD="$pwd_value"; export PWD' if "PWD" in env else "unset PWD"
        script = (
            'pwd_value="$1"; shift; '
            'while [ "$1" != -- ]; do echo $$ > "$1" || '
            '{ echo "agentdescent: cannot join cgroup $1" >&2; exit 125; }; shift; done; '
            f'shift; {restore}; exec "$@"'
        )
        return [shell, "-c", script, "sh", env.get("PWD", ""), *procs, "--", *argv]

    def started(self, pid: int) -> None:
        """Tell the group the run's root pid (a systemd scope is found through it)."""
        self._root_pid = pid

    def _systemd_dir(self) -> Path | None:
        if self._memory_dir is not None or self._root_pid is None:
            return self._memory_dir
        try:
            lines = Path(f"/proc/{self._root_pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        path = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), "")
        mount = next((m for m, fs, _ in _mounts() if fs == "cgroup2"), None)
        if not path.endswith(".scope") or mount is None:
            return None
        self._memory_dir = self._pids_dir = Path(mount) / path.lstrip("/")
        return self._memory_dir

    def tripped(self) -> str | None:
        """``memory`` / ``processes`` when the group's ceiling was hit, else None."""
        memory = self._systemd_dir() if self.mode == "systemd" else self._memory_dir
        if memory is not None:
            if self.mode == "v1":
                control = memory / "memory.oom_control"
                if self._oom_event is not None and not self._oom_seen:
                    with contextlib.suppress(BlockingIOError, OSError):
                        self._oom_seen = os.eventfd_read(self._oom_event) > 0
                if (
                    self._oom_seen
                    or _counter_in(control, "under_oom") > 0
                    or _counter_in(control, "oom_kill") > 0
                ):
                    return "memory"
            elif _counter_in(memory / "memory.events", "oom_kill") > 0:
                return "memory"
        if self._pids_dir is not None and _counter_in(self._pids_dir / "pids.events", "max") > 0:
            return "processes"
        return None

    def close(self) -> None:
        """Kill what is left in the group(s) and remove them (systemd removes its scope).

        A group whose last processes are still exiting cannot be removed yet (a
        killed run that filled a tmpfs takes seconds to release it); it is retried
        at the next :func:`open_cgroup` and when this process exits, and a
        group of a dead process is removed by the next process that opens one.
        """
        for folder in reversed(self._dirs):
            for _ in range(_CLOSE_ROUNDS):
                pids = _pids_in(folder)
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
            if folder == self._memory_dir and self._oom_event is not None:
                os.close(self._oom_event)
                self._oom_event = None
            if not _remove(folder, _CLOSE_ROUNDS):
                with _leftovers_lock:
                    _leftovers.append(folder)
        self._dirs.clear()


def _remove(folder: Path, rounds: int) -> bool:
    for _ in range(rounds):
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.01)
    return False


@atexit.register
def _remove_leftovers_at_exit() -> None:
    with _leftovers_lock:
        pending, _leftovers[:] = list(_leftovers), []
    for folder in pending:
        _remove(folder, _EXIT_ROUNDS)


def _sweep_leftovers(mode: _Mode) -> None:
    """Remove groups that could not be removed at the end of their run, and empty groups
    of dead processes (a controller that was killed)."""
    with _leftovers_lock:
        pending = [f for f in _leftovers if not _remove(f, 1)]
        _leftovers[:] = pending
    for parent in {p for p in (mode.memory_parent, mode.pids_parent) if p is not None}:
        try:
            entries = list(parent.glob(f"{_PREFIX}*-*"))
        except OSError:
            continue
        for entry in entries:
            owner = entry.name[len(_PREFIX) :].split("-", 1)[0]
            if (
                owner.isdigit()
                and int(owner) != os.getpid()
                and not Path(f"/proc/{owner}").exists()
            ):
                _remove(entry, 1)


def _oom_eventfd(folder: Path) -> int | None:
    """An eventfd the kernel signals at every OOM of a v1 memory group (None if refused).

    Unlike ``under_oom`` it keeps the news: a group that was at the limit when
    the run's root exited is still reported after the tree is killed.
    """
    if not hasattr(os, "eventfd"):
        return None
    event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        control = os.open(folder / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        try:
            (folder / "cgroup.event_control").write_text(f"{event} {control}")
        finally:
            os.close(control)
    except OSError:
        os.close(event)
        return None
    return event


def _counter_in(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _pids_in(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def open_cgroup(memory_mb: int, max_tasks: int) -> RunCgroup | None:
    """A fresh cgroup for one run, or None when this machine gives us none."""
    mode = _mode()
    if mode.name == "none":
        return None
    _sweep_leftovers(mode)
    try:
        return RunCgroup(mode, memory_mb * _MIB, max_tasks)
    except OSError:
        return None
