"""What the controller itself wrote to the user's repository and state directory.

Under the ``local`` backend a candidate's scripts can write anywhere the user
can, so after each run :mod:`agentdescent_core.sandbox.guard` compares the
user's ``.git`` and the state directory with what they should be.  "Should
be" is not "what they were before the run": while one candidate's child runs,
other threads of the same controller commit to the ledger branches and write
the eval cache and the run store.  This journal is how those legitimate writes
are told apart from a candidate's:

* every ref transaction of the ledger is recorded as ``(ref, old, new)``
  (:func:`refs_moved`), in order, per repository.  The guard replays them over
  its last verified snapshot; a ref whose value breaks the chain (the
  controller found it at a value it never wrote) was moved by someone else;
* every write to a SQLite file of the engine (the eval cache, the run store,
  the decision log) happens inside :func:`writing`, which records the
  signature (size, times, inode) the file and its WAL had *before* the write
  began and *after* it ended.  A file whose signature is not the one the
  controller left behind was written by someone else.

Writers and the guard's check hold the same process-wide lock, so a check
never sees a write half done.  The lock covers a write of this process only;
a candidate writing in the very moment the controller writes the same file is
not told apart (``local`` is not a security boundary: this only detects).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

LOCK = threading.RLock()
"""Held by every recorded write and by the guard while it checks."""

FileSig = tuple[int, int, int, int] | None


@dataclass(frozen=True)
class RefMove:
    """One ref the ledger moved: ``ref`` went from ``old`` (None: created) to ``new``."""

    ref: str
    old: str | None
    new: str


_moves: dict[str, list[RefMove]] = {}
_left: dict[str, tuple[FileSig, FileSig]] = {}
_unexplained: dict[str, str] = {}


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def file_signature(path: str) -> FileSig:
    """(size, mtime, inode, mode) of ``path``, or None when it does not exist.

    Not the ctime: SQLite running as root ``fchown``s the WAL each time any
    connection opens it (a reader too: ``agentdescent report``), which moves
    the ctime without a write.  A writer that puts the mtime back with
    ``utime`` after a same-size write is therefore not seen.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)


def _pair(path: str) -> tuple[FileSig, FileSig]:
    return file_signature(path), file_signature(path + "-wal")


def refs_moved(common_dir: str, moves: Sequence[RefMove]) -> None:
    """Record ref updates the ledger has just applied (call with :data:`LOCK` held)."""
    with LOCK:
        _moves.setdefault(_key(common_dir), []).extend(moves)


def moves_since(common_dir: str, cursor: int) -> tuple[list[RefMove], int]:
    """The ledger's ref moves after the first ``cursor`` ones, and the new cursor."""
    with LOCK:
        moves = _moves.get(_key(common_dir), [])
        return list(moves[cursor:]), len(moves)


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Around one write of the controller to the SQLite file at ``path``.

    On entry, a file whose signature differs from the one the controller last
    left is noted as :func:`unexplained` (someone else wrote it since); on exit
    the new signature is recorded, so the guard expects exactly that.
    """
    key = _key(path)
    with LOCK:
        if key in _left and _pair(key) != _left[key]:
            _unexplained.setdefault(key, "changed between two writes of the controller")
        try:
            yield
        finally:
            _left[key] = _pair(key)


def signature_left(path: str | os.PathLike[str]) -> tuple[FileSig, FileSig] | None:
    """The (file, WAL) signatures the controller's last write left, or None if it never wrote."""
    with LOCK:
        return _left.get(_key(path))


def unexplained(path: str | os.PathLike[str], *, clear: bool = False) -> str | None:
    """Why the file at ``path`` was found changed by someone else, or None."""
    key = _key(path)
    with LOCK:
        return _unexplained.pop(key, None) if clear else _unexplained.get(key)


def forget(path: str | os.PathLike[str]) -> None:
    """Take the file's current signature as the controller's (after a restore)."""
    key = _key(path)
    with LOCK:
        _left[key] = _pair(key)
        _unexplained.pop(key, None)
