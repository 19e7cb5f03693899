"""Resetting a workspace between candidates: the commit tree with one candidate's files.

Used by :class:`~agentdescent_core.sandbox.workspace.Workspace` (this module's
:class:`_ResettableCopy` is its base): the evaluation calls
:meth:`~_ResettableCopy.reset` before every candidate run.

**A reset costs what changed, not what exists.**  It rewrites the paths the
frozen check's scan (:mod:`.frozencheck`) found changed plus the artifact files
whose wanted content differs from what it last wrote.  Without a check since
the last run the reset scans by itself, so it never trusts a stale picture.
Files and links of the commit are put back with ``git checkout-index`` through
the workspace's private index; the user's repository is only read.

Caches never leak: ``__pycache__``/``.pytest_cache``/``*.pyc`` found anywhere in
the workspace are removed at the next reset (they are not violations), and the
state directory's ``pycache/`` and ``pytest-cache/`` are emptied at every reset.
Those two are writable to the child, so whatever one candidate's run left there
is untrusted: a ``.pyc`` planted under a ``PYTHONPYCACHEPREFIX`` with the source's
mtime and size is loaded instead of the frozen test it claims to be.  Emptying
them also settles stale bytecode (a rewrite of the same size in the same
second).  A child therefore gains nothing from ``PYTHONPYCACHEPREFIX``, and the
evaluation runs it with ``PYTHONDONTWRITEBYTECODE=1`` and no prefix instead
(:mod:`agentdescent_core.evaluation.child`): it reads the interpreter's own
read-only bytecode and compiles only the workspace's code.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import git
from git.exc import GitCommandError

from agentdescent_core.artifacts.paths import is_inside, normalise_path
from agentdescent_core.errors import RefusalError, WorkspaceError
from agentdescent_core.sandbox.frozencheck import ResetStats, _CheckedCopy
from agentdescent_core.sandbox.snapshot import (
    Content,
    Known,
    digest_bytes,
    ensure_dirs,
    is_cache,
    make_dir,
    real_parents,
    remove_path,
    signature,
    write_file,
)
from agentdescent_core.sandbox.userrepo import _DIR_MODE, _FILE_MODE


class _ResettableCopy(_CheckedCopy):
    """The reset of a workspace copy to the commit plus a candidate's artifact state.

    A base of :class:`~agentdescent_core.sandbox.workspace.Workspace`, which
    sets every attribute below when it creates the copy; not used on its own.
    """

    state_dir: Path
    repo: str
    _git_env: dict[str, str]
    _ignored: dict[str, bytes]
    _managed: frozenset[str]
    _overrides: dict[str, Content | None]
    _digests: dict[str, tuple[str, Content]]

    def _git(self, *args: str, what: str) -> str:
        runner = git.Git(self._root)
        runner.update_environment(**self._git_env)
        try:
            out = runner.execute(["git", *args], strip_newline_in_stdout=False)
        except GitCommandError as exc:
            stderr = str(exc.stderr or "").strip() or str(exc)
            raise WorkspaceError(
                f"could not {what} for the workspace of {self.repo!r}: git {args[0]} failed: "
                f"{stderr}; check that the commit exists in that repository"
            ) from None
        return out if isinstance(out, str) else str(out)

    @property
    def pycache_prefix(self) -> Path:
        """A bytecode directory for the child; emptied at every reset (see the module doc)."""
        return self.state_dir / "pycache"

    @property
    def pytest_cache_dir(self) -> Path:
        """Where the child's pytest cache belongs (``-o cache_dir=...``); emptied at every reset."""
        return self.state_dir / "pytest-cache"

    def reset(self, state: Mapping[str, str]) -> ResetStats:
        """Make :attr:`root` the commit tree with the artifact files replaced by ``state``.

        ``state`` is a FileTree state (``{repo-relative posix path: text}``) and
        is exact: artifact files of the commit it lacks are removed.  Its keys
        must be evolvable paths inside the artifact roots; a frozen key is
        refused (``frozen-violation``) before anything is written.
        """
        started = time.perf_counter()
        with self._lock:
            self._check_open()
            wanted = self._overrides_for(state)
            if self._changed is None:
                self._changed = self._diff_disk()
            changed = self._changed
            candidates = set(self._overrides) | set(wanted) | changed
            removals: list[str] = []
            dirs: list[str] = []
            writes: list[str] = []
            restores: list[str] = []
            for path in candidates:
                want = wanted[path] if path in wanted else self._base.get(path)
                if path not in changed:
                    have = self._known.get(path)
                    if (have.content if have is not None else None) == want:
                        continue
                if want is None:
                    removals.append(path)
                elif want.kind == "dir":
                    dirs.append(path)
                elif path in state:
                    writes.append(path)  # from the state's text, even when it equals the commit's
                else:
                    restores.append(path)
            try:
                removed = self._apply_removals(removals)
                restored = self._apply_dirs(dirs, wanted)
                written = self._apply_writes(writes, state, wanted)
                restored += self._apply_restores(restores)
            except BaseException:
                # Half done: keep every path either state touched a candidate of
                # the next reset, and make that reset scan the disk again.
                self._overrides = {**self._overrides, **wanted}
                self._changed = None
                raise
            self._overrides = wanted
            self._changed = None  # whatever happens next (a run) must be scanned
            removed += self._empty_state_caches()
            return ResetStats(written, restored, removed, time.perf_counter() - started)

    def _overrides_for(self, state: Mapping[str, str]) -> dict[str, Content | None]:
        """Where ``state`` makes the wanted tree differ from the commit's."""
        wanted: dict[str, Content | None] = {}
        digests: dict[str, tuple[str, Content]] = {}
        for path, text in state.items():
            self._check_state_key(path, text)
            base = self._base.get(path)
            cached = self._digests.get(path)
            if cached is not None and (cached[0] is text or cached[0] == text):
                content = cached[1]  # comparing text is cheaper than hashing it again
            else:
                mode = base.mode if base is not None and base.kind == "file" else _FILE_MODE
                content = Content("file", mode, digest_bytes(text.encode("utf-8")))
            digests[path] = (text, content)
            if content != base:
                wanted[path] = content
            if base is not None and base.kind != "file":
                raise _path_conflict(path, f"is a {base.kind} in the commit")
            parent = path.rpartition("/")[0]
            while parent and parent not in wanted:
                base_parent = self._base.get(parent)
                if base_parent is not None and base_parent.kind == "dir":
                    break
                if base_parent is not None and not (
                    parent in self._managed and parent not in state
                ):
                    raise _path_conflict(path, f"needs {parent!r} to be a directory")
                wanted[parent] = Content("dir", _DIR_MODE)
                parent = parent.rpartition("/")[0]
        for path in self._managed:
            if path not in state:
                wanted[path] = None
        self._digests = digests
        return wanted

    def _check_state_key(self, path: str, text: object) -> None:
        if not isinstance(path, str) or not isinstance(text, str):
            raise TypeError(
                f"a workspace state maps repo-relative paths to text, got "
                f"{path!r}: {type(text).__name__}"
            )
        try:
            normal = normalise_path(path)
        except RefusalError:
            normal = None
        if normal != path or not is_inside(path, self._roots):
            raise ValueError(
                f"state path {path!r} is not a normalised path inside the artifact roots "
                f"{list(self._roots)!r}; pass the FileTree state of this workspace's tree"
            )
        if self._is_frozen(path) or is_cache(path):
            raise RefusalError(
                "frozen-violation",
                "frozen-path",
                f"state path {path!r} is frozen (a test, conftest.py, config or cache file) "
                f"and cannot be written by a candidate; drop it from the state",
                path=path,
            )

    def _apply_removals(self, paths: list[str]) -> int:
        count = 0
        for path in sorted(paths, key=_depth, reverse=True):
            if real_parents(self._root, path) and remove_path(os.path.join(self._root, path)):
                count += 1
            self._forget(path)
        return count

    def _forget(self, path: str) -> None:
        known = self._known.pop(path, None)
        if known is not None and known.content.kind == "dir":
            prefix = path + "/"
            for child in [p for p in self._known if p.startswith(prefix)]:
                del self._known[child]

    def _apply_dirs(self, paths: list[str], wanted: Mapping[str, Content | None]) -> int:
        """Make directories; returns how many were the commit's (restored)."""
        restored = 0
        for path in sorted(paths, key=_depth):
            restored += path not in wanted
            want = wanted[path] if path in wanted else self._base.get(path)
            assert want is not None
            parent = path.rpartition("/")[0]
            self._record_created(ensure_dirs(self._root, parent, _DIR_MODE))
            if make_dir(os.path.join(self._root, path), want.mode):
                self._forget(path)  # it was a file or link
            self._record(path, want)
        return restored

    def _apply_writes(
        self, paths: list[str], state: Mapping[str, str], wanted: Mapping[str, Content | None]
    ) -> int:
        for path in sorted(paths):
            want = wanted[path] if path in wanted else self._base.get(path)
            assert want is not None
            self._record_created(ensure_dirs(self._root, path.rpartition("/")[0], _DIR_MODE))
            full = os.path.join(self._root, path)
            self._forget(path)  # it may have been a directory
            write_file(full, state[path].encode("utf-8"), want.mode)
            self._record(path, want)
        return len(paths)

    def _apply_restores(self, paths: list[str]) -> int:
        """Put files and links back from the commit, through the private index."""
        if not paths:
            return 0
        for path in paths:
            self._record_created(ensure_dirs(self._root, path.rpartition("/")[0], _DIR_MODE))
            self._forget(path)
            remove_path(os.path.join(self._root, path))
        ignored = sorted(p for p in paths if p in self._ignored)
        for path in ignored:  # not in the index: from the bytes read at creation
            write_file(os.path.join(self._root, path), self._ignored[path], self._base[path].mode)
            self._record(path, self._base[path])
        ordered = sorted(p for p in paths if p not in self._ignored)
        for start in range(0, len(ordered), 500):
            self._git("checkout-index", "--force", "--", *ordered[start:start + 500],
                      what="restore files from the commit")
        for path in ordered:
            want = self._base[path]
            full = os.path.join(self._root, path)
            if want.kind == "file":
                os.chmod(full, want.mode)  # independent of the umask git used
            self._record(path, want)
        return len(paths)

    def _record(self, path: str, content: Content) -> None:
        self._known[path] = Known(content, signature(os.lstat(os.path.join(self._root, path))))

    def _record_created(self, created: Iterable[str]) -> None:
        for path in created:
            base = self._base.get(path)
            content = base if base is not None and base.kind == "dir" else Content("dir", _DIR_MODE)
            if content.mode != _DIR_MODE:
                os.chmod(os.path.join(self._root, path), content.mode)
            self._record(path, content)

    def _empty_state_caches(self) -> int:
        """Empty ``pycache/`` and ``pytest-cache/``: the last run could write both."""
        count = 0
        for folder in (self.pycache_prefix, self.pytest_cache_dir):
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                folder.mkdir(mode=0o700)
                continue
            for name in names:
                count += remove_path(os.path.join(folder, name))  # links: unlinked only
        return count


def _path_conflict(path: str, problem: str) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "path-conflict",
        f"state path {path!r} {problem}, which the commit keeps; choose another path",
        path=path,
    )


def _depth(path: str) -> int:
    return path.count("/")
