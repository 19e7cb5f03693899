"""Under ``local``: the user's ``.git`` and the state directory, checked and restored around runs.

A candidate's script under ``local`` can write the user's repository by
absolute path: move ``refs/heads/main``, plant a smudge filter and
``core.fsmonitor`` in ``.git/config``, a hook, ``* filter=x`` in
``.git/info/attributes``, or rows in the eval cache.  :class:`RepoGuard`
keeps a verified picture of what matters and, after each run, compares:

* in ``.git``: ``HEAD``, ``config`` (and ``config.worktree``), ``packed-refs``,
  every loose ref, ``hooks/``, ``info/``, ``objects/info/alternates`` and
  ``shallow`` — byte for byte, read only when the ``lstat`` signature moved;
* in the state directory: every SQLite file the engine writes through
  :class:`~agentdescent_core.sqlite_file.SqliteFile` (the eval cache, the run
  store, the decision log) and its WAL, by signature.

What the controller itself wrote in the meantime is not a change: the ledger's
ref moves and the engine's SQLite writes are recorded in
:mod:`agentdescent_core.sandbox.journal`, and the check holds the journal's lock, so
no such write is half done while it looks.  Ref moves are *replayed* over the
verified picture: a ledger ref the controller found at a value it never wrote
was moved by someone else, even if the controller then committed on top.

Anything else that changed is restored — files rewritten with their old bytes
and mode, added files removed, refs set back to the last value the controller
vouched for, SQLite files rewritten table by table from a copy taken at the
last clean check (through SQLite itself, so the engine's open connections stay
valid) — and :meth:`RepoGuard.check` returns what changed, for the caller to
disqualify the candidate as ``tamper`` and stop the run (:class:`TamperError`).

One picture is shared by every workspace of a verifier, so with several
candidates running at once the first check after a change catches and
restores it; which of the overlapping candidates did it cannot be told apart.
Processes other than the controller that legitimately write there during a
run (the user committing, ``git gc``) are reported the same way: the message
names the old and new values so nothing is lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import tempfile
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import agentdescent_core.sandbox.journal as journal
from agentdescent_core.errors import TamperError as TamperError

#: Entries of the common git directory that change what git (or the user's next
#: command) does; the object database and reflogs are not among them.
_GIT_WATCHED = ("HEAD", "config", "config.worktree", "packed-refs", "shallow", "hooks", "info",
                "refs", "objects/info/alternates", "objects/info/http-alternates")
#: Entries of a linked worktree's own git directory.
_WORKTREE_WATCHED = ("HEAD", "config.worktree")
#: SQLite files in the state directory that are not written through the journal.
_UNJOURNALED = ("llm-cache",)
_SHOWN = 8


@dataclass(frozen=True)
class _Entry:
    kind: str  # "file", "dir", "link"
    mode: int
    sig: tuple[int, int, int, int]
    data: bytes | None  # file bytes or link target; None for a directory


def find_git_dirs(repo: Path) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the repository whose top is ``repo``, or None."""
    dot = repo / ".git"
    if dot.is_dir():
        return dot, dot
    if not dot.is_file():
        return None
    text = dot.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return None
    git_dir = (repo / text[len("gitdir:"):].strip()).resolve()
    common = git_dir
    with contextlib.suppress(OSError):
        pointer = (git_dir / "commondir").read_text(encoding="utf-8").strip()
        common = (git_dir / pointer).resolve()
    return git_dir, common


def _sig(st: os.stat_result) -> tuple[int, int, int, int]:
    if stat.S_ISDIR(st.st_mode):
        return (st.st_mode, 0, 0, st.st_ino)
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)


def _read(full: str, st: os.stat_result) -> _Entry:
    if stat.S_ISDIR(st.st_mode):
        return _Entry("dir", stat.S_IMODE(st.st_mode), _sig(st), None)
    if stat.S_ISLNK(st.st_mode):
        return _Entry("link", 0, _sig(st), os.readlink(full).encode("utf-8", "surrogateescape"))
    with open(full, "rb") as handle:
        data = handle.read()
    return _Entry("file", stat.S_IMODE(st.st_mode), _sig(st), data)


class RepoGuard:
    """The verified picture of the user's ``.git`` and state directory (see module doc).

    ``repo``: the repository top; ``state_dir``: the run's state directory
    (None: no state directory is watched).  Thread-safe; :meth:`close` removes
    the private copies of the SQLite files.
    """

    def __init__(self, repo: Path, state_dir: Path | None) -> None:
        self.repo = Path(os.path.abspath(repo))
        found = find_git_dirs(self.repo)
        self._git_dir: Path | None = found[0] if found else None
        self._common: Path | None = found[1] if found else None
        self._state_dir = state_dir
        self._tmp = tempfile.mkdtemp(prefix="agentdescent-guard-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        self._copies: dict[str, tuple[str, object]] = {}
        with journal.LOCK:
            self._cursor = journal.moves_since(str(self._common), 0)[1] if self._common else 0
            self._picture = {label: _read(full, os.lstat(full))
                             for label, full in self._walk()}
            self._sqlite = {path: self._expected_pair(path, None) for path in self._databases()}
            for path in self._sqlite:
                self._copy(path)

    def close(self) -> None:
        self._cleanup()

    # ------------------------------------------------------------ what is watched

    def _roots(self) -> Iterator[tuple[str, Path]]:
        if self._common is not None:
            for name in _GIT_WATCHED:
                yield name, self._common / name
            if self._git_dir is not None and self._git_dir != self._common:
                for name in _WORKTREE_WATCHED:
                    yield f"worktree/{name}", self._git_dir / name

    def _walk(self) -> Iterator[tuple[str, str]]:
        """(label, full path) of every watched entry, directories included."""
        for label, path in self._roots():
            full = str(path)
            if not os.path.lexists(full):
                continue
            yield label, full
            if not os.path.isdir(full) or os.path.islink(full):
                continue
            for current, dirs, files in os.walk(full):
                rel = os.path.relpath(current, full)
                base = label if rel == "." else f"{label}/{rel}"
                for name in sorted(dirs) + sorted(files):
                    if name.endswith(".lock"):
                        continue  # a git command of the user in flight
                    yield f"{base}/{name}", os.path.join(current, name)

    def _full(self, label: str) -> str:
        if label.startswith("worktree/"):
            assert self._git_dir is not None
            return str(self._git_dir / label[len("worktree/"):])
        assert self._common is not None
        return str(self._common / label)

    def _show(self, label: str) -> str:
        try:
            return os.path.relpath(self._full(label), self.repo)
        except ValueError:
            return self._full(label)

    def _databases(self) -> list[str]:
        if self._state_dir is None or not self._state_dir.is_dir():
            return []
        return sorted(str(p) for p in self._state_dir.glob("*.sqlite3")
                      if p.is_file() and not p.name.startswith(_UNJOURNALED))

    @staticmethod
    def _expected_pair(path: str, fallback: object) -> object:
        left = journal.signature_left(path)
        if left is not None:
            return left
        return fallback if fallback is not None else (
            journal.file_signature(path), journal.file_signature(path + "-wal"))

    # ------------------------------------------------------------ the check

    def check(self) -> list[str]:
        """Compare with the verified picture, restore what changed; return what changed."""
        with journal.LOCK:
            changes = self._check_git() + self._check_databases()
            return changes

    def _check_git(self) -> list[str]:
        if self._common is None:
            return []
        now = dict(self._walk())
        changed: dict[str, _Entry | None] = {}
        for label in self._picture.keys() | now.keys():
            old = self._picture.get(label)
            full = now.get(label)
            if full is None:
                changed[label] = None
                continue
            try:
                st = os.lstat(full)
            except OSError:
                changed[label] = None
                continue
            if old is not None and old.sig == _sig(st):
                continue
            entry = _read(full, st)
            if old is not None and (old.kind, old.mode, old.data) == (entry.kind, entry.mode,
                                                                        entry.data):
                self._picture[label] = entry  # touched, not changed
                continue
            changed[label] = entry
        moves, self._cursor = journal.moves_since(str(self._common), self._cursor)
        expected, broken = self._replay(moves)
        changes: list[str] = list(broken)
        for ref, sha in expected.items():
            label = ref
            current = changed[label] if label in changed else self._picture.get(label)
            value = _ref_value(current, ref, changed, self._picture)
            if value == sha:
                accepted = changed.pop(label, None)
                if accepted is not None:
                    self._picture[label] = accepted
                continue
            if not any(c.startswith(f"{self._show(label)}:") for c in changes):
                changes.append(f"{self._show(label)}: at {value or 'nothing'}, the ledger "
                               f"last wrote {sha or 'nothing'}")
            changed.pop(label, None)
            self._set_ref(label, sha)
        for label in sorted(changed, key=lambda item: (-item.count("/"), item)):
            old = self._picture.get(label)
            new = changed[label]
            changes.append(f"{self._show(label)}: {_what(label, old, new)}")
            self._restore(label, old)
        if changes:
            self._picture = {label: _read(full, os.lstat(full)) for label, full in self._walk()}
        return changes

    def _replay(self, moves: list[journal.RefMove]) -> tuple[dict[str, str | None], list[str]]:
        """Values the ledger's refs must have now, and where its chain broke."""
        expected: dict[str, str | None] = {}
        broken: list[str] = []
        stopped: set[str] = set()
        for move in moves:
            if move.ref in stopped:
                continue
            if move.ref not in expected:
                expected[move.ref] = _ref_value(self._picture.get(move.ref), move.ref, {},
                                                self._picture)
            if expected[move.ref] != move.old:
                stopped.add(move.ref)
                broken.append(
                    f"{self._show(move.ref)}: moved to {move.old or 'nothing'} by someone "
                    f"other than the ledger (last verified at "
                    f"{expected[move.ref] or 'nothing'}), and the ledger then built on it")
                continue
            expected[move.ref] = move.new
        return expected, broken

    def _set_ref(self, label: str, sha: str | None) -> None:
        full = self._full(label)
        if sha is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
            return
        os.makedirs(os.path.dirname(full), exist_ok=True)
        _atomic_write(full, f"{sha}\n".encode(), 0o644)

    def _restore(self, label: str, old: _Entry | None) -> None:
        full = self._full(label)
        if old is None:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(full)
            return
        if os.path.lexists(full) and (old.kind != "dir" or not os.path.isdir(full)
                                      or os.path.islink(full)):
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        parent = os.path.dirname(full)
        os.makedirs(parent, exist_ok=True)
        if old.kind == "dir":
            os.makedirs(full, exist_ok=True)
            os.chmod(full, old.mode)
        elif old.kind == "link":
            assert old.data is not None
            os.symlink(old.data.decode("utf-8", "surrogateescape"), full)
        else:
            assert old.data is not None
            _atomic_write(full, old.data, old.mode)

    # ------------------------------------------------------------ SQLite files

    def _copy(self, path: str) -> None:
        """A private copy of the database as it is now (taken right after a clean check)."""
        target = os.path.join(self._tmp, f"{uuid.uuid4().hex}-{os.path.basename(path)}")
        try:
            source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
            try:
                copy = sqlite3.connect(target)
                try:
                    copy.execute("PRAGMA synchronous=OFF")  # a private copy: no fsync
                    copy.execute("PRAGMA journal_mode=OFF")
                    source.backup(copy)
                finally:
                    copy.close()
            finally:
                source.close()
        except sqlite3.Error:
            return
        old = self._copies.get(path)
        if old is not None:
            with contextlib.suppress(OSError):
                os.unlink(old[0])
        journal.forget(path)  # reading it is not a write, whatever SQLite touched
        self._sqlite[path] = journal.signature_left(path)
        self._copies[path] = (target, self._sqlite[path])

    def _check_databases(self) -> list[str]:
        changes: list[str] = []
        for path in self._databases():
            if path not in self._sqlite:
                self._sqlite[path] = self._expected_pair(path, None)
                self._copy(path)
                continue
            expected = self._expected_pair(path, self._sqlite[path])
            now = (journal.file_signature(path), journal.file_signature(path + "-wal"))
            why = journal.unexplained(path, clear=True)
            if now == expected and why is None:
                self._sqlite[path] = expected
                if self._copies.get(path, (None, None))[1] != expected:
                    self._copy(path)
                continue
            shown = os.path.relpath(path, self.repo) if path.startswith(str(self.repo)) \
                else path
            restored = self._restore_database(path)
            changes.append(f"{shown}: written by someone other than the controller"
                           f"{' (' + why + ')' if why else ''}; {restored}")
        return changes

    def _restore_database(self, path: str) -> str:
        copy = self._copies.get(path)
        if copy is None:
            return "no verified copy to restore it from: move the file away before the next run"
        if not os.path.isfile(copy[0]):
            return "its verified copy is gone: move the file away before the next run"
        try:
            _restore_tables(path, copy[0])
        except sqlite3.Error as exc:
            return f"could not be restored ({exc}): move the file away before the next run"
        journal.forget(path)
        self._sqlite[path] = journal.signature_left(path)
        self._copies[path] = (copy[0], self._sqlite[path])
        return "its tables were restored from the copy taken at the last clean check"


def _ref_value(entry: _Entry | None, ref: str, changed: Mapping[str, _Entry | None],
               picture: Mapping[str, _Entry]) -> str | None:
    """The sha ``ref`` resolves to: its loose file, else ``packed-refs`` (changed view first)."""
    if entry is not None and entry.kind == "file" and entry.data is not None:
        text = entry.data.decode("utf-8", "replace").strip()
        if not text.startswith("ref:"):
            return text or None
    packed = changed["packed-refs"] if "packed-refs" in changed else picture.get("packed-refs")
    if packed is None or packed.data is None:
        return None
    for line in packed.data.decode("utf-8", "replace").splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and parts[1].strip() == ref and not line.startswith(("#", "^")):
            return parts[0]
    return None


def _what(label: str, old: _Entry | None, new: _Entry | None) -> str:
    if old is None:
        return "added (removed again)"
    if new is None:
        return "removed (restored)"
    if label == "HEAD" or label.startswith("refs/"):  # name both values: nothing is lost
        was = (old.data or b"").decode("utf-8", "replace").strip()
        found = (new.data or b"").decode("utf-8", "replace").strip()
        return f"was {was}, found {found[:100]} (restored to {was})"
    return "changed (restored)"


def _atomic_write(full: str, data: bytes, mode: int) -> None:
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(full), prefix=".agentdescent-restore-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, mode)
        os.replace(temp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _restore_tables(path: str, copy: str) -> None:
    """Make the database at ``path`` hold exactly what ``copy`` holds, through SQLite."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        db.execute("ATTACH DATABASE ? AS snap", (copy,))
        db.execute("BEGIN IMMEDIATE")
        try:
            query = ("SELECT type, name, sql FROM {}.sqlite_master "
                     "WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL")
            live = {(t, n): s for t, n, s in db.execute(query.format("main"))}
            kept = {(t, n): s for t, n, s in db.execute(query.format("snap"))}
            for (kind, name), sql in live.items():
                if kind != "table" and kept.get((kind, name)) != sql:
                    db.execute(f'DROP {kind.upper()} IF EXISTS main."{name}"')
            for (kind, name), sql in live.items():
                if kind == "table" and kept.get((kind, name)) != sql:
                    db.execute(f'DROP TABLE IF EXISTS main."{name}"')
            for (kind, name), sql in kept.items():
                if kind == "table":
                    if live.get((kind, name)) != sql:
                        db.execute(sql)
                    db.execute(f'DELETE FROM main."{name}"')
                    db.execute(f'INSERT INTO main."{name}" SELECT * FROM snap."{name}"')
            for (kind, name), sql in kept.items():
                if kind != "table" and live.get((kind, name)) != sql:
                    db.execute(sql)
            version = db.execute("PRAGMA snap.user_version").fetchone()[0]
            db.execute(f"PRAGMA main.user_version={int(version)}")
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("DETACH DATABASE snap")
    finally:
        db.close()
