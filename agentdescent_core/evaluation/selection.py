"""Read-based test selection: which tests a change between two artifact states can reach.

A test's outcome can only depend on the artifact files it read.  The child
records them per test run (``TestRecord.reads``: files opened, directories
listed with a trailing ``/``); a candidate that differs from an evaluated
state only in files a test never read cannot change that test's outcome, so
the test keeps its evidence instead of being run again.  This module holds the
pure part of that rule (:func:`touched_paths`, :func:`reaches`) and the
per-run bookkeeping (:class:`ReadIndex`); the sandboxed verifier applies it.

Where the rule could be wrong — a ``stat()`` without an open is seen by
neither tracer, a candidate could hide its reads — the full suite runs before
promotion and on ``agentdescent review``, and a test whose fresh run disagrees
with the evidence it kept is a *selection miss*: counted, reported, and always
run from then on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent_core.evaluation.records import TestRecord

#: The values of ``--evolve-select`` / ``evolve_select``.
SELECT_MODES: tuple[str, ...] = ("reads", "all")


def _listed(files: Mapping[str, str]) -> set[str]:
    """Every entry a listing can show in a state: its files and directories (``dir/``)."""
    entries: set[str] = set(files)
    for path in files:
        parts = path.split("/")[:-1]
        entries.update("/".join(parts[: i + 1]) + "/" for i in range(len(parts)))
    return entries


def touched_paths(before: Mapping[str, str], after: Mapping[str, str]) -> frozenset[str]:
    """What going from ``before`` to ``after`` changes, as a test could observe it.

    Every file whose content differs, appears or disappears; and every
    directory (``dir/``) whose listing changes: the parent of each file or
    directory that appears or disappears.  Editing a file changes no listing,
    and adding a file to an existing folder changes only that folder's listing.
    """
    touched: set[str] = {path for path in before.keys() | after.keys()
                         if before.get(path) != after.get(path)}
    for entry in _listed(before) ^ _listed(after):
        parent = entry.rstrip("/").rpartition("/")[0]
        touched.add(parent + "/" if parent else "./")
    return frozenset(touched)


def reaches(reads: Iterable[str], touched: frozenset[str]) -> str | None:
    """The first read of ``reads`` that ``touched`` changes, or None when none does.

    A listed directory (``dir/``) is reached when it is touched itself (a
    child appeared or disappeared).  A read file is reached when it is
    touched; a read that names a directory without the slash (an ``open`` of a
    directory) counts as its listing.
    """
    for read in sorted(reads):
        if read in touched or (not read.endswith("/") and read + "/" in touched):
            return read
    return None


@dataclass(frozen=True)
class Selection:
    """Which of a candidate's tests run again, and why each one does.

    ``touched`` are the paths the candidate changes against the state it is
    compared with; ``why`` maps each selected test to its reason: the read
    the change reaches, ``"no recorded reads"`` or ``"selection miss"``.
    """

    mode: str
    base: str
    candidate: str
    touched: tuple[str, ...]
    tests: tuple[str, ...]
    why: Mapping[str, str]

    @property
    def selected(self) -> tuple[str, ...]:
        return tuple(t for t in self.tests if t in self.why)


@dataclass
class ReadIndex:
    """What each test read over a run: the union over its traced runs.

    A test is *unknown* until a traced run of it came back (new tests, a
    tracer that failed, records from before tracing); unknown tests always
    run.  A *miss* is a test whose kept evidence turned out wrong; it always
    runs from then on.  Thread-safe: evaluations record from several threads.
    """

    reads: dict[str, set[str]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    misses: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, nodeid: str, reads: Sequence[str] | None, *, traced: bool) -> None:
        """Add one run's reads; ``traced`` says tracing was on, so None means it failed."""
        with self._lock:
            if reads is None:
                if traced:
                    self.failed.add(nodeid)
                return
            self.reads.setdefault(nodeid, set()).update(reads)

    def known(self, nodeid: str) -> frozenset[str] | None:
        """The test's reads, or None when it must always run (unknown, failed, missed)."""
        with self._lock:
            if nodeid in self.failed or nodeid in self.misses or nodeid not in self.reads:
                return None
            return frozenset(self.reads[nodeid])

    def miss(self, nodeid: str) -> None:
        with self._lock:
            self.misses.add(nodeid)

    def why(self, nodeid: str, touched: frozenset[str]) -> str | None:
        """Why ``nodeid`` must run for a change of ``touched``, or None when it need not."""
        with self._lock:
            if nodeid in self.misses:
                return "selection miss"
            if nodeid in self.failed:
                return "tracer failed"
            reads = self.reads.get(nodeid)
        if reads is None:
            return "no recorded reads"
        hit = reaches(reads, touched)
        return None if hit is None else f"reads {hit}"


Key = tuple[str, int]


def same_result(a: TestRecord, b: TestRecord) -> bool:
    """Do two records of one test tell the same thing (outcome and reward)?"""
    return (a.outcome, a.reward) == (b.outcome, b.reward)


class SelectionBook:
    """The verifier's memory for read-based selection: states, donors, what was kept.

    ``mode`` is ``reads`` (select) or ``all`` (every test runs; selections
    are still logged, so a report can compare).  ``guards`` are never
    carried: a guard runs on every candidate.  The verifier calls
    :meth:`seen` for every state it evaluates, :meth:`ran` with what its
    children measured, :meth:`donor` to find evidence a state can keep,
    :meth:`select` for the acceptance test's tasks and :meth:`confirm` when
    the full suite re-runs what was kept.
    """

    def __init__(self, mode: str, guards: Iterable[str] = ()) -> None:
        if mode not in SELECT_MODES:
            raise ValueError(f"select must be one of {'|'.join(SELECT_MODES)}, got {mode!r}")
        self.mode = mode
        self.index = ReadIndex()
        self._guards = frozenset(guards)
        self._lock = threading.Lock()
        self._states: dict[str, Mapping[str, str]] = {}
        self._holders: dict[Key, list[str]] = {}
        self._touched: dict[tuple[str, str], frozenset[str]] = {}
        self._kept: dict[tuple[str, Key], str] = {}
        self._runs: dict[str, int] = {}
        self._judged: dict[str, int] = {}
        self.selections: list[Selection] = []
        self.misses: list[dict[str, str]] = []
        #: Test runs that re-ran kept evidence before a promotion (:meth:`confirmed`).
        self.confirm_runs = 0

    @property
    def on(self) -> bool:
        return self.mode == "reads"

    def seen(self, artifact: str, files: Mapping[str, str]) -> None:
        with self._lock:
            self._states.setdefault(artifact, dict(files))

    def holds(self, artifact: str, key: Key) -> None:
        """The verifier now has a record of ``key`` at ``artifact`` (a possible donor)."""
        with self._lock:
            holders = self._holders.setdefault(key, [])
            if artifact not in holders:
                holders.append(artifact)

    def ran(self, artifact: str, records: Iterable[TestRecord], *, traced: bool) -> None:
        """Runs a child measured at ``artifact``: their reads, and the count per state."""
        count = 0
        for record in records:
            self.index.record(record.nodeid, record.reads, traced=traced)
            count += 1
        with self._lock:
            self._runs[artifact] = self._runs.get(artifact, 0) + count

    def touched(self, before: str, after: str) -> frozenset[str]:
        with self._lock:
            found = self._touched.get((before, after))
            if found is None:
                found = touched_paths(self._states[before], self._states[after])
                self._touched[(before, after)] = found
        return found

    def donor(self, artifact: str, key: Key) -> str | None:
        """A state whose record of ``key`` ``artifact`` may keep, or None: run it."""
        if not self.on or key[0] in self._guards or self.index.known(key[0]) is None:
            return None
        with self._lock:
            holders = [h for h in self._holders.get(key, ()) if h != artifact]
        for holder in reversed(holders):  # the newest state first: the likeliest base
            if self.index.why(key[0], self.touched(holder, artifact)) is None:
                with self._lock:
                    self._kept[(artifact, key)] = holder
                return holder
        return None

    def kept(self, artifact: str) -> list[Key]:
        """The keys whose records at ``artifact`` were kept from another state, not run."""
        with self._lock:
            return sorted(key for (a, key) in self._kept if a == artifact)

    def forget_kept(self, artifact: str, keys: Iterable[Key]) -> None:
        with self._lock:
            for key in keys:
                self._kept.pop((artifact, key), None)

    def select(self, base: str, candidate: str, tasks: Sequence[str]) -> Selection:
        """The tasks the acceptance test pairs for ``candidate`` against ``base``, logged."""
        touched = self.touched(base, candidate)
        why: dict[str, str] = {}
        for task in tasks:
            reason = "all" if not self.on else self.index.why(task, touched)
            if reason is not None:
                why[task] = reason
        selection = Selection(self.mode, base, candidate, tuple(sorted(touched)),
                              tuple(tasks), why)
        with self._lock:
            self.selections.append(selection)
        return selection

    def confirm(self, artifact: str, kept: Mapping[Key, TestRecord],
                fresh: Mapping[Key, TestRecord]) -> list[str]:
        """Compare kept evidence with fresh runs of it; each test that disagrees is a miss."""
        missed: list[str] = []
        for key, old in sorted(kept.items()):
            new = fresh.get(key)
            if new is None or same_result(old, new):
                continue
            self.index.miss(key[0])
            if key[0] not in missed:
                missed.append(key[0])
                self.misses.append({
                    "test": key[0], "state": artifact,
                    "kept": old.outcome, "fresh": new.outcome,
                })
        return missed

    def confirmed(self, artifact: str, runs: int) -> None:
        """``runs`` of those counted at ``artifact`` re-ran kept evidence (not selection's)."""
        with self._lock:
            self._runs[artifact] = self._runs.get(artifact, 0) - runs
            self.confirm_runs += runs

    def runs_at(self, artifact: str) -> int:
        """Test runs measured at ``artifact`` (kept results and confirmations not counted)."""
        with self._lock:
            return self._runs.get(artifact, 0)

    def freeze(self, artifact: str) -> int:
        """The runs ``artifact`` took to be judged, counted once its round is over.

        After its round a state is only a base (its runs then are the pool later
        candidates pair against) or the head the workers roll out on: neither is
        what judging it cost.
        """
        with self._lock:
            return self._judged.setdefault(artifact, self._runs.get(artifact, 0))
