"""What each test reads under the artifact roots, inside the child pytest.

With ``ChildPlan.trace_reads`` the recorder (:mod:`pytest_agentdescent.recorder`)
starts a :class:`ReadTracer` at import, before any conftest or test module, and
puts what it saw into each record's ``reads``: the paths under the artifact
roots a test opened, and the directories it listed (with a trailing ``/``),
relative to the workspace, posix, sorted.  A test whose reads are known need
not run again when a candidate changes only files it never read.

Two sources, their union is what a test read:

* an audit hook (:func:`sys.addaudithook`) for the test process itself:
  ``open`` (also failed opens: a file a test looked for and did not find is a
  read of its absence), ``os.listdir``, ``os.scandir``, ``os.walk``,
  ``os.fwalk``, ``glob.glob/2`` and ``pathlib.Path.glob`` / ``rglob``; a path
  through a symlink into the roots counts;
* Linux inotify on every directory under the roots (``IN_OPEN``; with
  ``IN_ISDIR`` a directory opened to be listed), for the processes a test
  starts.  inotify queues an event at the system call, so draining the
  (non-blocking) descriptor at a test boundary attributes everything up to it.

Attribution: reads during a test's setup, call and teardown are the test's;
reads while a fixture broader than ``function`` is set up belong to every
test under that fixture's node (:meth:`ReadTracer.enter`); reads outside any
test (collection, conftest, test module imports) belong to every test.  A
queue overflow or a failed inotify set-up (not Linux, no watches left, a root
that does not exist) makes the tracer *failed*: every ``reads`` is then None,
and the parent re-runs such tests, the safe direction.

Standard library only, and imported only by the recorder: ``ctypes`` is loaded
when a tracer starts, not at import.  The recorder pins this module's class
like its own and checks it for replaced attributes (see
:mod:`pytest_agentdescent.tamper`).
"""

from __future__ import annotations

import os
import struct
import sys
import threading
from collections.abc import Iterable
from typing import Any

_IN_OPEN = 0x20
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ISDIR = 0x40000000
_MASK = _IN_OPEN | _IN_CREATE | _IN_MOVED_TO
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)

#: Audit event -> what its first argument is: a file, a directory listed, a glob pattern.
_EVENTS: dict[str, str] = {
    "open": "file", "os.listdir": "dir", "os.scandir": "dir", "os.walk": "dir",
    "os.fwalk": "dir", "pathlib.Path.glob": "dir", "pathlib.Path.rglob": "dir",
    "glob.glob/2": "glob",  # "glob.glob" comes with it, without root_dir
}
_MAGIC = frozenset("*?[")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _glob_dir(pattern: str, root_dir: object) -> str:
    """The directory a glob pattern starts listing in: its components before the first magic."""
    parts = pattern.split(os.sep)
    keep = []
    for part in parts[:-1]:
        if _MAGIC & set(part):
            break
        keep.append(part)
    head = os.sep.join(keep) if keep else ("/" if pattern.startswith(os.sep) else ".")
    base = os.fsdecode(os.fspath(root_dir)) if isinstance(root_dir, (str, bytes, os.PathLike)) \
        else ""
    return os.path.join(base, head) if base else head


class ReadTracer:
    """Per-test reads under ``roots`` (absolute paths as the child sees them).

    ``enabled`` False makes a tracer that records nothing and reports None.
    :meth:`start` sets it up; :meth:`begin` / :meth:`end` bracket one run of
    a test, :meth:`enter` / :meth:`leave` the set-up of a broader fixture.
    """

    def __init__(self, roots: Iterable[str], workspace: str, *, enabled: bool = True) -> None:
        space = os.path.abspath(workspace)
        self._bases: list[tuple[str, str]] = []  # (a form of a root, the workspace in that form)
        for root in roots:
            for form, base in ((os.path.abspath(root), space),
                               (os.path.realpath(root), os.path.realpath(space))):
                if (form, base) not in self._bases:
                    self._bases.append((form, base))
        self._roots = [os.path.abspath(root) for root in roots]
        self.enabled = enabled
        self.failed = not enabled
        self._fd = -1
        self._libc: Any = None
        self._errno: Any = None
        self._wds: dict[int, str] = {}
        self._real: dict[str, str] = {}  # directory -> its realpath (symlinks into the roots)
        self._busy: set[int] = set()
        self._ident = threading.get_ident
        self._shared: dict[str, set[str]] = {"": set()}  # node id -> reads ("": every test)
        self._own: set[str] = set()
        self._stack: list[set[str]] = []
        self._into: set[str] = self._shared[""]

    # ------------------------------------------------------------ set-up

    def start(self) -> None:
        """Open inotify, watch every directory under the roots, add the audit hook."""
        if self.failed:
            return
        self._busy.add(self._ident())
        try:
            self._open()
        except (OSError, AttributeError, ImportError):
            self._fail()
        finally:
            self._busy.discard(self._ident())
        if not self.failed:
            sys.addaudithook(self._hook)

    def _open(self) -> None:
        import ctypes  # here, not at the top: only a tracing child pays for ctypes

        self._libc = libc = ctypes.CDLL(None, use_errno=True)
        self._errno = ctypes.get_errno
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(self._errno(), "inotify_init1 failed")
        for root in self._roots:
            if not os.path.lexists(root):
                raise FileNotFoundError(root)  # nothing to watch: a test could still create it
            self._watch(root, None)
        self._into = set()  # the tracer's own scans: nobody's reads
        self._drain()
        self._into = self._shared[""]

    def _watch(self, path: str, skip: dict[str, int] | None) -> None:
        """Watch ``path`` and every directory below it; ``skip`` counts our own listings."""
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            error = self._errno()
            if error in (2, 20):  # ENOENT, ENOTDIR: gone again before we got to it
                return
            raise OSError(error, f"inotify_add_watch {path} failed")
        self._wds[wd] = path
        if not os.path.isdir(path):
            return
        if skip is not None:  # this listing shows on its own watch and on its parent's
            skip[path] = skip.get(path, 0) + (1 if path in self._roots else 2)
        try:
            with os.scandir(path) as entries:
                below = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for child in below:
            self._watch(child, skip)

    def _fail(self) -> None:
        self.failed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------ boundaries

    def begin(self) -> None:
        """A test run starts: what came before is nobody's own (it is every test's)."""
        self._drain()
        self._own = set()
        self._stack = []
        self._into = self._own

    def end(self, chain: Iterable[str]) -> list[str] | None:
        """The run ended: its reads, with the shared ones of ``chain`` (its nodes' ids)."""
        self._drain()
        self._into = self._shared[""]
        self._stack = []
        if self.failed:
            return None
        found = set(self._own)
        for nodeid in {"", *chain}:
            found |= self._shared.get(nodeid, set())
        return sorted(found)

    def enter(self, nodeid: str) -> None:
        """A fixture whose value every test under ``nodeid`` shares is being set up."""
        if self.failed:
            return
        self._drain()
        self._stack.append(self._into)
        self._into = self._shared.setdefault(nodeid, set())

    def leave(self) -> None:
        if self.failed or not self._stack:
            return
        self._drain()
        self._into = self._stack.pop()

    # ------------------------------------------------------------ the sources

    def _drain(self) -> None:
        if self.failed:
            return
        self._busy.add(self._ident())
        skip: dict[str, int] = {}
        try:
            while not self.failed:
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    break
                offset = 0
                while offset + _EVENT.size <= len(data):
                    wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                    start = offset + _EVENT.size
                    name = data[start:start + length].split(b"\0", 1)[0]
                    offset = start + length
                    self._event(wd, mask, os.fsdecode(name), skip)
        except OSError:
            self._fail()
        finally:
            self._busy.discard(self._ident())

    def _event(self, wd: int, mask: int, name: str, skip: dict[str, int]) -> None:
        if mask & _IN_Q_OVERFLOW:
            self._fail()
            return
        base = self._wds.pop(wd, None) if mask & _IN_IGNORED else self._wds.get(wd)
        if base is None or mask & _IN_IGNORED:
            return
        path = os.path.join(base, name) if name else base
        listed = bool(mask & _IN_ISDIR)
        if listed and mask & (_IN_CREATE | _IN_MOVED_TO):
            # Watched from now on; what another process read inside it before
            # this drain went unseen, so the new directory counts as listed.
            self._watch(path, skip)
            self._add(path, True)
        elif mask & _IN_OPEN:
            if listed and skip.get(path):
                skip[path] -= 1
                return
            self._add(path, listed)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        kind = _EVENTS.get(event)
        if kind is None or not args:
            return
        ident = self._ident()
        if ident in self._busy:
            return
        self._busy.add(ident)
        try:
            self._audit(kind, args)
        except Exception:  # a tracer must never break the code it watches
            pass
        finally:
            self._busy.discard(ident)

    def _audit(self, kind: str, args: tuple[Any, ...]) -> None:
        target = args[0]
        if kind == "glob":
            target = _glob_dir(os.fsdecode(os.fspath(target)), args[2] if len(args) > 2 else None)
            kind = "dir"
        if target is None:
            target = "."
        if isinstance(target, int):
            if kind == "file":
                return  # an open file descriptor: its path was seen when it was opened
            target = os.readlink(f"/proc/self/fd/{target}")
        self._add(os.path.abspath(os.fsdecode(os.fspath(target))), kind == "dir", kind == "file")

    def _add(self, path: str, listed: bool, opened: bool = False) -> None:
        """Record ``path`` (absolute) when it lies under a root, directly or through a symlink.

        ``opened`` asks whether the path is a directory (an ``open`` of one is a listing).
        """
        relative = self._relative(path)
        if relative is None:
            head, tail = os.path.split(path)
            real = self._real.get(head)
            if real is None:
                real = self._real[head] = os.path.realpath(head)
            real = os.path.join(real, tail)
            if os.path.islink(real):
                real = os.path.realpath(real)
            relative = self._relative(real)
            if relative is None:
                return
        if opened and os.path.isdir(path):
            listed = True
        self._into.add(relative + "/" if listed else relative)

    def _relative(self, path: str) -> str | None:
        for root, base in self._bases:
            if _under(path, root):
                return os.path.relpath(path, base).replace(os.sep, "/")
        return None
