"""The frozen check: which paths of a workspace a run may change, and the verdict after it.

Used by :class:`~agentdescent_core.sandbox.workspace.Workspace` (this module's
:class:`_CheckedCopy` is its base) before a run, to tell a sandbox which frozen
files to bind read-only (:meth:`~_CheckedCopy.writes`), and after it, to judge
what the run changed (:meth:`~_CheckedCopy.check`); and by the evaluation,
which reads the :class:`FrozenCheck` and :class:`ResetStats` it returns.

**Frozen paths are checked, not trusted.**  Every path the ``FrozenSet``
freezes (everything outside the artifact roots, plus conftest.py, test modules
and config inside them) that a run modified, added, removed or replaced is a
violation; the next reset restores it from the commit.  Under the ``local``
backend nothing stops the write, so this check is the defence.

The check costs what changed, not what exists: the workspace remembers what
every path holds and the ``lstat`` signature it had then (:mod:`.snapshot`);
:meth:`~_CheckedCopy.check` scans the signatures after a run and reads only
files whose signature moved.  The scan is kept for the following reset
(:mod:`.reset`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentdescent_core.artifacts.paths import is_executable_config, is_inside, shown_path
from agentdescent_core.errors import RefusalError, WorkspaceError
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.snapshot import (
    Content,
    Known,
    Sig,
    content_of,
    is_cache,
    kind_of,
    scan,
)
from agentdescent_core.sandbox.spec import WorkspaceWrites

VIOLATION_KINDS: tuple[str, ...] = ("modified", "added", "removed", "type-changed")

_SHOWN_PATHS = 5

MAX_PROTECTED_FILES = 64
"""Frozen files a sandbox binds read-only one by one; the rest are verified after the run.

Small on purpose: bwrap re-reads the mount table for every bind, so the setup
cost grows with the square of the count (about 6 s for 1,000 files, 25 ms for 64).
"""

# Files a new entry may not be (outside the artifact roots): Python or pytest would load
# them by themselves, so one a run creates could change how later tests are judged.
_LOADABLE_SUFFIXES = (".py", ".pyw", ".pyi", ".so", ".pyd", ".pth", ".pyc", ".pyo")
_PYTEST_CONFIG_NAMES = frozenset({".pytest.ini", "pytest.toml", ".pytest.toml"})


@dataclass(frozen=True)
class ResetStats:
    """What one :meth:`Workspace.reset` did.

    ``written``: artifact files written from the state; ``restored``: paths put
    back as the commit has them (files, links, directories, permissions);
    ``removed``: paths deleted (stale artifact files, files a run added, caches).
    """

    written: int
    restored: int
    removed: int
    seconds: float


@dataclass(frozen=True)
class Violation:
    """A frozen path a run changed; ``kind`` is one of :data:`VIOLATION_KINDS`.

    ``path`` is the name as the disk has it (a candidate's script may have
    created one that is not UTF-8: it then holds surrogate escapes, and is what
    ``os`` calls need); ``shown`` is the escaped form for every message.
    """

    path: str
    kind: str

    @property
    def shown(self) -> str:
        return shown_path(self.path)


@dataclass(frozen=True)
class FrozenCheck:
    """The result of :meth:`Workspace.check` after a run.

    ``violations``: frozen paths the run changed (sorted by path); ``drift``:
    non-frozen paths it changed, i.e. artifact files the candidate's own code
    wrote (informational; the next reset undoes them too); ``written``: new
    files and directories the run created outside the artifact roots that
    neither Python nor pytest would load (what tests legitimately leave, such
    as an ``out.txt``; allowed, and removed by the next reset).
    """

    violations: list[Violation]
    drift: list[str]
    seconds: float
    written: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def violations_error(self) -> RefusalError:
        """The ``frozen-violation`` refusal that disqualifies the candidate.

        Raises ValueError when there is nothing to report (check ``ok`` first).
        """
        if not self.violations:
            raise ValueError("the run changed no frozen path; there is no violation to report")
        shown = ", ".join(f"{v.shown} ({v.kind})" for v in self.violations[:_SHOWN_PATHS])
        more = len(self.violations) - _SHOWN_PATHS
        if more > 0:
            shown += f" and {more} more"
        count = len(self.violations)
        return RefusalError(
            "frozen-violation",
            "frozen-modified",
            f"the run changed {count} frozen path{'s' if count != 1 else ''}: "
            f"{shown}; tests, conftest.py, config and every committed file outside the "
            f"artifact paths must stay as committed, and no new Python module, conftest.py "
            f"or pytest config may appear, so the candidate is disqualified (the workspace "
            f"is restored before the next run). If this happens with the unchanged artifact, "
            f"the tests themselves do it: let them write new data files or into pytest's "
            f"tmp_path instead of changing committed files; otherwise keep the candidate's "
            f"scripts from writing outside the artifact folder",
            path=self.violations[0].shown,
        )


class _CheckedCopy:
    """The frozen side of a workspace: what a run may write, and what it changed.

    A base of :class:`~agentdescent_core.sandbox.workspace.Workspace`, which
    sets every attribute below when it creates the copy; not used on its own.
    """

    root: Path
    frozen: FrozenSet
    _root: str
    _roots: tuple[str, ...]
    _lock: threading.RLock
    _base: dict[str, Content]
    _known: dict[str, Known]
    _cache_in_base: set[str]
    _changed: set[str] | None
    _last_scan_kinds: dict[str, str]

    def _is_frozen(self, path: str) -> bool:
        return (
            not is_inside(path, self._roots)
            or is_executable_config(path)
            or self.frozen.is_frozen(path)
        )

    def writes(self) -> WorkspaceWrites:
        """What a sandbox lets tests write: the whole copy, minus its frozen files.

        Plain ``pytest`` lets a test write into the repository (an ``out.txt``, a
        ``tmp/`` folder), so ``bwrap`` and ``docker`` bind :attr:`root`
        read-write and then bind each frozen file of the base (committed files
        outside the artifact roots and the tests, conftest.py and config inside
        them, plus the copied ignored files) read-only on top, so rewriting,
        deleting or replacing one fails as it would on a read-only tree.  At most
        :data:`MAX_PROTECTED_FILES` are bound — ``conftest.py`` and config
        first, then test modules, then other Python files, then the rest — and
        every other frozen file is verified by :meth:`check` after the run
        (detected and restored, as under ``local``).  What a run creates is
        judged by :meth:`check` and removed by the next :meth:`reset`.
        """
        with self._lock:
            frozen = [p for p, c in self._base.items()
                      if c.kind == "file" and self._is_frozen(p) and not is_cache(p)]
            frozen.sort(key=lambda p: (_protect_rank(p), p.count("/"), p))
            return WorkspaceWrites(
                root=self.root,
                protected=tuple(self.root / p for p in frozen[:MAX_PROTECTED_FILES]),
            )

    def _diff_disk(self) -> set[str]:
        """Paths whose disk entry differs from what is known (a full signature scan)."""
        found = scan(self._root, self._cache_in_base)
        changed: set[str] = set()
        known = self._known
        added = 0
        for path, sig in found.items():
            entry = known.get(path)
            if entry is None:
                changed.add(path)
                added += 1
            elif entry.sig != sig:
                if self._same_content(path, entry, sig):
                    entry.sig = sig  # touched, not changed
                else:
                    changed.add(path)
        if len(found) - added != len(known):  # some known path is gone
            changed.update(p for p in known if p not in found)
        self._last_scan_kinds = {p: kind_of(found[p]) for p in changed if p in found}
        return changed

    def _same_content(self, path: str, entry: Known, sig: Sig) -> bool:
        old = entry.content
        if kind_of(sig) != old.kind:
            return False
        if old.kind == "file" and sig[1] != entry.sig[1]:
            return False  # size differs: no need to read it
        try:
            return content_of(os.path.join(self._root, path), sig) == old
        except OSError:
            return False

    def check(self) -> FrozenCheck:
        """Compare the workspace with what the last reset left, after a run.

        Frozen paths that changed are violations; changed non-frozen paths are
        drift; caches are neither (the next reset removes them).  The scan is
        kept, so the following :meth:`reset` does not repeat it.
        """
        started = time.perf_counter()
        with self._lock:
            self._check_open()
            changed = self._diff_disk()
            self._changed = changed
            kinds = self._last_scan_kinds
            violations: list[Violation] = []
            drift: list[str] = []
            written: list[str] = []
            for path in sorted(changed):
                if is_cache(path):
                    continue
                known = self._known.get(path)
                now = kinds.get(path)
                if known is None:
                    kind = "added"
                elif now is None:
                    kind = "removed"
                elif now != known.content.kind:
                    kind = "type-changed"
                else:
                    kind = "modified"
                if not self._is_frozen(path):
                    drift.append(path)
                elif kind == "added" and self._harmless_new(path, now):
                    written.append(path)
                else:
                    violations.append(Violation(path, kind))
            return FrozenCheck(violations, drift, time.perf_counter() - started, written)

    def _harmless_new(self, path: str, kind: str | None) -> bool:
        """May a run leave the new frozen-side ``path`` (of disk kind ``kind``)?

        Yes for a file, directory or socket outside the artifact roots that
        neither Python nor pytest would load by itself: tests write such files
        into the repository under plain ``pytest`` too, and the next reset
        removes them.  No for a symbolic link (it could give a candidate's code
        a module name), a Python module, extension, ``.pth``, ``conftest.py`` or
        pytest config, and for anything the ``FrozenSet`` freezes inside the
        roots: one of those could change how a later test is judged.
        """
        if kind is None or kind == "link" or _loadable(path):
            return False
        return not is_inside(path, self._roots)

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def _check_open(self) -> None:
        if self.closed:
            raise WorkspaceError(
                f"the workspace {str(self.root)!r} was closed; create a new one with "
                f"Workspace.create"
            )


def _loadable(path: str) -> bool:
    """Would Python or pytest load ``path`` by itself (a module, extension, config)?"""
    name = path.rsplit("/", 1)[-1].casefold()
    return (is_executable_config(path) or name in _PYTEST_CONFIG_NAMES
            or name.endswith(_LOADABLE_SUFFIXES))


def _protect_rank(path: str) -> int:
    """Which frozen files a sandbox binds read-only first: the judge's own files."""
    name = path.rsplit("/", 1)[-1].casefold()
    if is_executable_config(path) or name in _PYTEST_CONFIG_NAMES:
        return 0
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return 1
    return 2 if _loadable(path) else 3
