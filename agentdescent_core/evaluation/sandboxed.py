"""The verifier the pytest plugin uses: the marked tests, run in sandboxed workspaces.

:class:`SandboxedVerifier` answers the engine's
:class:`~agentdescent_core.evaluation.protocol.Verifier` questions by writing
a candidate's artifact files into a private :class:`Workspace`, running the
requested tests there in a child pytest through a sandbox backend
(:mod:`.child`), and checking afterwards that the run left every frozen file
alone.  Three things hold for every answer:

* **Never paid twice.**  Records are memoised in memory and, with an
  :class:`EvalCache`, on disk, keyed by (artifact hash, context hash, nodeid,
  repeat).  The context hash covers the commit's frozen tree *and* every
  setting that can change a result (backend, network, limits, timeouts,
  pytest arguments, Python), so a cached record is reused only where it would
  come out the same.  Asking for more repeats runs only the missing ones.
* **A candidate cannot win by cheating.**  A skipped or xfailed task earns 0.0
  (making a test skip is not an improvement); a candidate whose run changed a
  frozen file is disqualified (:meth:`disqualification`, every reward 0.0) and
  the workspace is restored at once; so is one whose code reached into the
  test process (``tamper``: the recorder saw it patch the recorder or pytest,
  take frames, or use ctypes); one whose tests do not collect fails as a
  whole (:meth:`candidate_error`).  Secret values are masked in everything a
  child sends back before it is memoised, cached or shown
  (:mod:`agentdescent_core.redact`).  Under a backend without file-system
  isolation (``local``) the user's repository is also stat-scanned around each
  run, and a change there disqualifies the candidate too — with the honest
  caveat that an edit the user makes during that run is blamed on it.
* **One verifier for the whole engine.**  Besides the aggregator's
  ``evaluate``, it answers the workers' questions (:meth:`rollout`,
  :meth:`task`, :meth:`render`, :attr:`ever_succeeded`), so
  ``evolve_verified`` drives it exactly like ``evolve()`` drives its
  CallableVerifier.  A rollout's output is an :class:`Observation`: the files
  the test ran against and its :class:`TestRecord` (message, captured output).
* **Thread-safe.**  Workspaces form a pool (created lazily, one child per
  workspace at a time); concurrent requests for the same candidate wait for
  each other instead of running the same tests twice; ``eval_concurrency``
  splits one request's tests into chunks that run at once, each in its own
  workspace.
* **Here or on a cluster.**  With an ``executor`` (``--evolve-executor
  dask://...``, :mod:`.executor`) the chunks run on cluster workers instead of
  this pool (:meth:`_run_remote`); what comes back is checked and used exactly
  as a local chunk's result, and only this verifier writes the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agentdescent_core.artifacts.filetree import FileTree, state_hash
from agentdescent_core.artifacts.paths import shown_path
from agentdescent_core.errors import BackendError, RefusalError
from agentdescent_core.evaluation.cache import EvalCache, Verdict
from agentdescent_core.evaluation.callable import Rollout
from agentdescent_core.evaluation.child import (
    ChildConfig,
    ChildOutcome,
    run_tests,
    split_plan,
    sweeps,
)
from agentdescent_core.evaluation.protocol import TaskSplit, requested_tasks
from agentdescent_core.evaluation.records import TestRecord, first_run_stands_apart
from agentdescent_core.evaluation.selection import Selection, SelectionBook
from agentdescent_core.governance import FrozenSet
from agentdescent_core.redact import Redactor
from agentdescent_core.sandbox.env import DEFAULT_ENV_ALLOWLIST
from agentdescent_core.sandbox.exposure import refuse_exposed_secrets
from agentdescent_core.sandbox.frozencheck import FrozenCheck
from agentdescent_core.sandbox.guard import RepoGuard, TamperError
from agentdescent_core.sandbox.local import LocalBackend, check_network
from agentdescent_core.sandbox.snapshot import Sig, is_cache, signature
from agentdescent_core.sandbox.spec import Backend, Limits, Network
from agentdescent_core.sandbox.userrepo import uncommitted_changes
from agentdescent_core.sandbox.workspace import Workspace
from agentdescent_core.stats.samples import TaskSamples
from agentdescent_core.tasks import Task

if TYPE_CHECKING:
    from agentdescent_core.evaluation.executor import Executor
    from agentdescent_core.evaluation.remote import FrozenBundle, JobSetup


class UncommittedChangesWarning(UserWarning):
    """Tests or artifact files differ from the commit that is evaluated."""


class OrderDependentTestWarning(UserWarning):
    """A test's first run and all its later runs disagree: it depends on an earlier run."""

_SHOWN = 5
_RUN_ATTEMPTS = 2

Key = tuple[str, int]


def record_reward(record: TestRecord) -> float:
    """The reward a record contributes: its reward when it is a measurement, else 0.0.

    Skipped and xfailed tests (and any record without a reward) count as 0.0,
    so a candidate gains nothing by making tasks skip.
    """
    if record.counts and record.reward is not None:
        return record.reward
    return 0.0


@dataclass(frozen=True)
class Observation:
    """What a rollout of one test saw: the artifact files it ran against and its record.

    This is the ``output`` a proposer receives: ``record.message`` is pytest's
    assertion message (or why the candidate was ruled out), ``record.output``
    the captured output.
    """

    files: Mapping[str, str]
    record: TestRecord


@dataclass
class _ChunkResult:
    outcome: ChildOutcome
    check: FrozenCheck
    outside: list[str]
    tamper: list[str] = field(default_factory=list)


class SandboxedVerifier:
    """A :class:`~agentdescent_core.evaluation.protocol.Verifier` over sandboxed pytest runs.

    ``repo`` / ``commit``: the user's repository and the ledger commit whose
    tree the workspaces copy (tests, conftest, config; the artifact files come
    from each evaluated state).  ``tree`` / ``frozen``: the artifact roots and
    the frozen-path rules.  ``cache`` is shared with other verifiers and never
    closed here.  ``workspace_parent`` is where workspaces are created (default:
    the system temporary directory).  ``watch_repo`` (default: True exactly
    when the backend is ``local``) stat-scans the user's repository around each
    run.  ``host_env`` (default ``os.environ``) is filtered through
    ``env_allow`` for the child.  ``subdir`` is where the child pytest runs,
    relative to the repository root: the pytest rootdir of a project that
    lives in a subdirectory of its git repository (a monorepo).  Node ids are
    relative to it, as pytest prints them; artifact paths stay repo-relative.
    ``executor`` (default None: this verifier's own pool) runs the child runs
    on a cluster instead (:mod:`.executor`); it is the caller's to close.
    """

    def __init__(
        self,
        repo: str | os.PathLike[str],
        commit: str,
        split: TaskSplit,
        *,
        tree: FileTree,
        frozen: FrozenSet,
        backend: Backend,
        cache: EvalCache | None,
        env_allow: Sequence[str] = DEFAULT_ENV_ALLOWLIST,
        network: Network = "default",
        limits: Limits | None = None,
        test_timeout: float | None = 60.0,
        run_timeout: float = 900.0,
        eval_concurrency: int = 1,
        pytest_args: Sequence[str] = (),
        workspace_parent: str | os.PathLike[str] | None = None,
        host_env: Mapping[str, str] | None = None,
        output_chars: int = 4000,
        watch_repo: bool | None = None,
        subdir: str = "",
        select: str = "all",
        executor: Executor | None = None,
    ) -> None:
        if isinstance(eval_concurrency, bool) or not isinstance(eval_concurrency, int) \
                or eval_concurrency < 1:
            raise ValueError(f"eval_concurrency must be an integer >= 1, got {eval_concurrency!r}")
        if backend.name == LocalBackend.name:
            # Refused now, not at the first evaluation: the run cannot start as asked.
            check_network(network, backend.name)
            refuse_exposed_secrets(backend.name, host_env)
        self.repo = Path(os.path.abspath(os.fspath(repo)))
        self.commit = commit
        self.subdir = _check_subdir(subdir)
        self.backend = backend
        self.cache = cache
        self._split = split
        self._known = frozenset(split.all_tasks)
        self._tree = tree
        # Where the child's read paths start, relative to the repository root: the
        # folder holding the rootdir and the roots ("apps/bot" in a monorepo), else "".
        common = posixpath.commonpath([self.subdir, *tree.roots]) if self.subdir else ""
        self._reads_base = "" if common in ("", ".") else common
        self._frozen = frozen
        self._parent = workspace_parent
        self._eval_concurrency = eval_concurrency
        self._config = ChildConfig(
            backend=backend,
            env_allow=tuple(env_allow),
            host_env=host_env,
            hidden=(self.repo,),
            network=network,
            limits=limits if limits is not None else Limits(),
            test_timeout=test_timeout,
            run_timeout=run_timeout,
            output_chars=output_chars,
            pytest_args=tuple(pytest_args),
            trace_reads=select == "reads",
        )
        self.selection = SelectionBook(select, split.guards)
        self._watch_repo = backend.name == "local" if watch_repo is None else watch_repo
        state_dir = Path(cache.path).parent if cache is not None else self.repo / ".agentdescent"
        self._guard = RepoGuard(self.repo, state_dir) if self._watch_repo else None
        self._tampered: TamperError | None = None
        # Secret values are scrubbed from everything a child sends back (agentdescent_core.redact).
        self._redact = Redactor.from_env(os.environ if host_env is None else host_env)
        self._warn_uncommitted()
        self._order_warned: set[str] = set()
        self._lock = threading.Lock()
        self._idle: list[Workspace] = []
        self._workspaces: list[Workspace] = []
        self._context: str | None = None
        self._state_locks: dict[str, threading.Lock] = {}
        self._records: dict[tuple[str, str, int], TestRecord] = {}
        self._verdicts: dict[str, Verdict] = {}
        self._evaluations = 0
        self._cache_hits = 0
        self._children = 0
        self._closed = False
        self._executor = executor
        self._remote: tuple[JobSetup, FrozenBundle] | None = None

    def _warn_uncommitted(self) -> None:
        """Say once that edits not yet committed are not what gets evaluated.

        Workspaces copy the commit, so a user who edited a test, a conftest
        fixture, the pytest config or a skill file and ran ``pytest --evolve``
        would otherwise wonder why the results ignore the edit (a plain run
        reads the working tree).  Every tracked file counts, frozen or
        artifact; an untracked file counts where plain pytest would pick it up
        (Python files, pytest config) or inside the artifact roots.
        """
        listed = [path for path, tracked in sorted(uncommitted_changes(self.repo).items())
                  if self._matters_uncommitted(path, tracked)]
        if not listed:
            return
        artifact = [p for p in listed if self._tree.contains(p) and not self._frozen.is_frozen(p)]
        frozen = [p for p in listed if p not in artifact]
        parts = []
        if frozen:
            parts.append(f"frozen files {_few(frozen)}")
        if artifact:
            parts.append(f"artifact files {_few(artifact)}")
        warnings.warn(UncommittedChangesWarning(
            f"uncommitted changes to {' and to '.join(parts)} are not evaluated: candidates "
            f"run on commit {self.commit[:12]}, so scores can differ from a plain pytest run; "
            "commit (or stash) them to include them"
        ), stacklevel=3)

    def _matters_uncommitted(self, path: str, tracked: bool) -> bool:
        if path == ".agentdescent" or path.startswith(".agentdescent/"):
            return False
        if tracked or self._tree.contains(path):
            return True
        name = path.rsplit("/", 1)[-1]
        return name.endswith(".py") or name in _PYTEST_CONFIGS

    # ---------------------------------------------------------------- protocol

    @property
    def split(self) -> TaskSplit:
        return self._split

    @property
    def evaluations(self) -> int:
        """Test runs actually executed by children (cache hits not counted)."""
        return self._evaluations

    @property
    def cache_context(self) -> str | None:
        """The context half of the cache key (frozen tree + settings); None before any run."""
        return self._context

    def usage(self) -> dict[str, int]:
        found = {"evaluations": self._evaluations, "cache_hits": self._cache_hits,
                 "children": self._children, "workspaces": len(self._workspaces)}
        if self._executor is not None:
            found.update(self._executor.usage())
        return found

    def evaluate(
        self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
    ) -> TaskSamples:
        ids = requested_tasks(task_ids, repeats, self._known)
        verdict, have = self._obtain(state, [(t, r) for t in ids for r in range(repeats)])
        if verdict is not None:
            return self._split.samples({t: [0.0] * repeats for t in ids})
        self._warn_order_dependent(ids, have, repeats)
        return self._split.samples(
            {t: [record_reward(have[(t, r)]) for r in range(repeats)] for t in ids})

    def prefetch(self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int) -> None:
        """Run now every (test, repeat) that later ``evaluate`` calls of these tasks will ask for.

        Each repeat is a sweep, one child start for all the tests it holds;
        asking for the baseline's tasks and the guards in two calls would pay
        the sweeps twice.  Results land where ``evaluate`` finds them (memory,
        the cache); a verdict is kept for the state as usual.
        """
        ids = requested_tasks(task_ids, repeats, self._known)
        self._obtain(state, [(t, r) for t in ids for r in range(repeats)])

    # ---------------------------------------------------------------- read-based selection

    def select_tests(self, base: Mapping[str, str], candidate: Mapping[str, str],
                     task_ids: Sequence[str]) -> Selection:
        """The tasks whose outcome ``candidate``'s change against ``base`` can reach.

        Under ``select="all"`` every task; under ``reads`` the tasks whose
        recorded reads meet the changed paths, plus those with no recorded
        reads and earlier selection misses (:mod:`.selection`).  Each call is
        logged in :attr:`selection` for the report.
        """
        base_files, cand_files = dict(base), dict(candidate)
        base_hash, cand_hash = state_hash(base_files), state_hash(cand_files)
        self.selection.seen(base_hash, base_files)
        self.selection.seen(cand_hash, cand_files)
        return self.selection.select(base_hash, cand_hash, list(dict.fromkeys(task_ids)))

    def confirm(self, state: Mapping[str, str]) -> list[str]:
        """Run for real every test whose evidence ``state`` kept; the tests that disagree.

        Called before a version is promoted: a kept record whose fresh run
        tells another outcome is a selection miss (the test then always
        runs), and the fresh records replace the kept ones either way.
        """
        files = dict(state)
        artifact = state_hash(files)
        keys = self.selection.kept(artifact)
        if not keys:
            return []
        with self._state_lock(artifact):
            with self._lock:
                kept = {key: self._records.pop((artifact, key[0], key[1])) for key in keys
                        if (artifact, key[0], key[1]) in self._records}
            self.selection.forget_kept(artifact, keys)
            fresh: dict[Key, TestRecord] = {}
            verdict = self._run(files, artifact, self._context_hash(), sorted(kept), fresh)
        self.selection.confirmed(artifact, len(fresh))
        if verdict is not None:
            return []
        return self.selection.confirm(artifact, kept, fresh)

    def _repo_relative_reads(self, record: TestRecord) -> TestRecord:
        """``record`` with its reads relative to the repository root, as states name files.

        The child names them relative to the folder that holds the pytest
        rootdir and the artifact roots (``apps/bot`` in a monorepo whose roots
        are under it); artifact states are keyed repo-relative.
        """
        if not record.reads or not self._reads_base:
            return record
        base = self._reads_base
        return replace(record, reads=tuple(sorted(
            f"{base}/{read}" for read in record.reads)))

    def _keep(self, artifact: str, missing: list[Key], have: dict[Key, TestRecord]
              ) -> list[Key]:
        """Fill ``have`` with evidence kept from other states; the keys still to run."""
        if not self.selection.on:
            return missing
        rest: list[Key] = []
        for key in missing:
            donor = self.selection.donor(artifact, key)
            with self._lock:
                record = None if donor is None else self._records.get((donor, key[0], key[1]))
                if record is not None:
                    self._records[(artifact, key[0], key[1])] = record
            if record is None:
                self.selection.forget_kept(artifact, [key])
                rest.append(key)
            else:
                have[key] = record
                self.selection.holds(artifact, key)
        return rest

    def _warn_order_dependent(self, ids: Sequence[str], have: Mapping[Key, TestRecord],
                              repeats: int) -> None:
        """Warn (once per test) about a test whose first run and later runs disagree.

        Every repeat is its own child process in a freshly reset workspace, so
        what differs between them is what earlier runs left outside it (a file
        outside the workspace under ``local``, a database, a service) or the
        order of the runs; the rewards of such a test measure that, not
        the artifact.  The session shows the warning with the run's others.
        """
        for task in ids:
            runs = [have[(task, r)] for r in range(repeats)]
            if task in self._order_warned or not first_run_stands_apart(runs):
                continue
            with self._lock:
                self._order_warned.add(task)
            warnings.warn(OrderDependentTestWarning(
                f"{task}: its first run {_shown_run(runs[0])} but all {repeats - 1} later runs "
                f"{_shown_run(runs[1])}, each in a fresh process and a freshly reset "
                "workspace; the test depends on state an earlier run left behind (a file "
                "outside the workspace, a database, a service) or on the order of the runs, "
                "so its reward measures that, not the artifact. Make it independent of earlier "
                "runs (tmp_path and fixtures instead of shared files or services), or leave "
                "it out of the evolve set"
            ), stacklevel=3)

    def _obtain(self, state: Mapping[str, str], wanted: Sequence[Key]
                ) -> tuple[Verdict | None, dict[Key, TestRecord]]:
        """Records for ``wanted`` at ``state`` (memory, cache, else a child run), or the verdict."""
        frozen_state = dict(state)
        artifact = state_hash(frozen_state)
        if self._tampered is not None:
            raise self._tampered  # the run stops: nothing more is evaluated
        with self._state_lock(artifact):
            context = self._context_hash()
            verdict = self._verdict(artifact, context)
            have: dict[Key, TestRecord] = {}
            if verdict is None:
                self.selection.seen(artifact, frozen_state)
                have = self._lookup(artifact, context, wanted)
                missing = self._keep(artifact, [key for key in wanted if key not in have], have)
                if missing:
                    verdict = self._run(frozen_state, artifact, context, missing, have)
        return verdict, have

    # ---------------------------------------------------------------- the workers' questions

    @property
    def ever_succeeded(self) -> bool:
        """True once a child pytest has run tests: the backend demonstrably works."""
        with self._lock:
            return self._children > 0

    def task(self, task_id: str) -> Task:
        """The engine's Task for a nodeid (the test itself is the prompt, so it is empty)."""
        if task_id not in self._known:
            raise ValueError(f"unknown task id {task_id!r}; the run has no such task")
        return Task(task_id, "")

    def render(self, state: Mapping[str, str]) -> str:
        """The artifact as the proposer reads it (the FileTree's rendering)."""
        return self._tree.render(state)

    def rollout(self, state: Mapping[str, str], task_id: str, repeat: int = 0) -> Rollout:
        """One (test, repeat) at ``state``: reward and :class:`Observation`, memoised and cached.

        A candidate ruled out as a whole (frozen violation, tamper, collection
        error) earns 0.0, and its observation's record carries the reason as message.
        """
        if task_id not in self._known:
            raise ValueError(f"unknown task id {task_id!r}; the run has no such task")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
            raise ValueError(f"repeat must be an integer >= 0, got {repeat!r}")
        files = dict(state)
        verdict, have = self._obtain(files, [(task_id, repeat)])
        if verdict is not None:
            phase = "collect" if verdict.kind == "collection-error" else "call"
            record = TestRecord(task_id, "error", 0.0, repeat,
                                message=f"{verdict.kind}: {verdict.message}", phase=phase)
        else:
            record = have[(task_id, repeat)]
        reward = 0.0 if verdict is not None else record_reward(record)
        return Rollout(task_id, repeat, Observation(files, record), reward)

    # ---------------------------------------------------------------- what the engine asks next

    def records(self, state: Mapping[str, str], nodeid: str) -> list[TestRecord]:
        """Every known run of ``nodeid`` for ``state``, by repeat (failure context)."""
        artifact = state_hash(dict(state))
        with self._lock:
            found = {r: rec for (a, n, r), rec in self._records.items()
                     if a == artifact and n == nodeid}
        if self.cache is not None and self._context is not None:
            for rec in self.cache.records(artifact, self._context, nodeid):
                found.setdefault(rec.repeat, rec)
        return [found[r] for r in sorted(found)]

    def candidate_error(self, state: Mapping[str, str]) -> str | None:
        """Why the candidate failed as a whole (its tests did not collect), or None."""
        verdict = self._known_verdict(state)
        return verdict.message if verdict and verdict.kind == "collection-error" else None

    def disqualification(self, state: Mapping[str, str]) -> RefusalError | None:
        """Why the candidate is ruled out whatever its tests said, or None.

        ``frozen-violation``: its run changed a frozen file; ``tamper``: its code
        reached into the test process (the recorder, pytest, frames, ctypes).
        The refusal's category is the merge category the engine counts it under.
        """
        verdict = self._known_verdict(state)
        if verdict is None or verdict.kind not in ("frozen-violation", "tamper"):
            return None
        default = "frozen-modified" if verdict.kind == "frozen-violation" else "tamper"
        return RefusalError(verdict.kind, verdict.code or default, verdict.message)

    def close(self) -> None:
        """Remove every workspace (the cache belongs to the caller and stays open)."""
        with self._lock:
            self._closed = True
            workspaces, self._workspaces, self._idle = self._workspaces, [], []
        for workspace in workspaces:
            workspace.close()
        if self._guard is not None:
            self._guard.close()

    # ---------------------------------------------------------------- lookups

    def _state_lock(self, artifact: str) -> threading.Lock:
        with self._lock:
            return self._state_locks.setdefault(artifact, threading.Lock())

    def _context_hash(self) -> str:
        if self._context is None:
            workspace = self._acquire()  # creating the first workspace hashes the frozen tree
            self._release(workspace)
        assert self._context is not None
        return self._context

    def _known_verdict(self, state: Mapping[str, str]) -> Verdict | None:
        if self._context is None:
            return None
        return self._verdict(state_hash(dict(state)), self._context)

    def _verdict(self, artifact: str, context: str) -> Verdict | None:
        with self._lock:
            verdict = self._verdicts.get(artifact)
        if verdict is None and self.cache is not None:
            verdict = self.cache.verdict(artifact, context)
            if verdict is not None:
                with self._lock:
                    self._verdicts[artifact] = verdict
        return verdict

    def _lookup(self, artifact: str, context: str, wanted: Sequence[Key]) -> dict[Key, TestRecord]:
        with self._lock:
            have = {key: self._records[(artifact, key[0], key[1])] for key in wanted
                    if (artifact, key[0], key[1]) in self._records}
        rest = [key for key in wanted if key not in have]
        if rest and self.cache is not None:
            found = self.cache.get_many(artifact, context, rest)
            with self._lock:
                for key, record in found.items():
                    self._records[(artifact, key[0], key[1])] = record
            have.update(found)
            for key, record in found.items():
                self.selection.index.record(record.nodeid, record.reads, traced=False)
                self.selection.holds(artifact, key)
        with self._lock:
            self._cache_hits += len(have)
        return have

    # ---------------------------------------------------------------- running

    def _run(self, state: dict[str, str], artifact: str, context: str, missing: Sequence[Key],
             have: dict[Key, TestRecord]) -> Verdict | None:
        """Run the missing (test, repeat) pairs; fill ``have``; a verdict if the candidate lost.

        Each repeat index is a sweep, and every chunk of a sweep is one child
        in a freshly reset workspace (:func:`_child_plans`): no test runs twice in
        one process.  Up to ``eval_concurrency`` chunks run at once; all of
        them share one deadline, so ``run_timeout`` bounds the evaluation.
        """
        deadline = time.monotonic() + self._config.run_timeout
        if self._executor is not None:
            results = self._run_remote(state, missing, deadline)
        else:
            results = self._run_here(state, missing, deadline)
        tamper = [change for result in results for change in result.tamper]
        if tamper:
            self._stop_on_tamper(artifact, context, tamper)
        produced: dict[Key, TestRecord] = {}
        measured: list[TestRecord] = []
        errors: list[str] = []
        violations: list[RefusalError] = []
        outside: list[str] = []
        reached_in: list[str] = []  # code under the roots that reached into the test process
        for result in results:
            outcome = result.outcome
            reached_in.extend(outcome.tamper)
            if outcome.error is not None:
                errors.append(outcome.error)
            if not result.check.ok:
                violations.append(result.check.violations_error())
            outside.extend(result.outside)
            for record in outcome.records:
                record = self._repo_relative_reads(record)
                produced[(record.nodeid, record.repeat)] = record
                if (record.nodeid, record.repeat) not in outcome.not_run:
                    measured.append(record)
        with self._lock:
            self._evaluations += len(measured)
            self._children += sum(r.outcome.runs for r in results)
            for key, record in produced.items():
                self._records[(artifact, key[0], key[1])] = record
        self.selection.ran(artifact, measured, traced=self._config.trace_reads)
        for key in produced:
            self.selection.holds(artifact, key)
        verdict = _verdict_of(violations, outside, errors, tamper=reached_in)
        if verdict is not None:
            return self._record_verdict(artifact, context, verdict)
        if self.cache is not None and measured:
            self.cache.put_many(artifact, context, measured)
        have.update(produced)
        return None

    def _run_here(self, state: dict[str, str], missing: Sequence[Key], deadline: float
                  ) -> list[_ChunkResult]:
        """The chunks of ``missing`` in this process's pool, ``eval_concurrency`` at a time."""
        chunks = _child_plans(missing, self._eval_concurrency)
        if len(chunks) == 1 or self._eval_concurrency == 1:
            results = []
            for chunk in chunks:
                results.append(self._run_chunk(state, chunk, deadline))
                if _rules_out(results[-1]):
                    break  # the candidate lost as a whole: the other sweeps change nothing
            return results
        with ThreadPoolExecutor(min(len(chunks), self._eval_concurrency),
                                thread_name_prefix="agentdescent-chunk") as pool:
            return list(pool.map(lambda chunk: self._run_chunk(state, chunk, deadline), chunks))

    def _run_remote(self, state: dict[str, str], missing: Sequence[Key], deadline: float
                    ) -> list[_ChunkResult]:
        """The chunks of ``missing`` on the executor's cluster, all submitted at once.

        Each worker builds its own workspace from the shipped frozen tree, runs
        the chunk and does the frozen check there; the replies come back
        MAC-checked (:mod:`.remote`) and are redacted again here.  Chunks are
        cut for ``eval_concurrency`` or the cluster's worker slots, whichever
        is more.  Under ``local`` the user's repository and the state directory
        are still checked around the whole batch: an embedded cluster shares
        this machine's file system.
        """
        from agentdescent_core.evaluation.executor import ChunkRequest

        executor = self._executor
        assert executor is not None
        setup, bundle = self._remote_setup()
        chunks = _child_plans(missing, max(self._eval_concurrency, executor.slots()))
        before = _scan_repo(self.repo) if self._watch_repo else {}
        earlier = self._guard.check() if self._guard is not None else []
        left = max(0.0, deadline - time.monotonic())
        replies = executor.run(setup, bundle, [ChunkRequest(state, chunk, left)
                                               for chunk in chunks])
        results = [_ChunkResult(self._redacted(reply.outcome), reply.check, [])
                   for reply in replies]
        outside = _changes(before, _scan_repo(self.repo)) if self._watch_repo else []
        tamper = _planted_bytecode(self.repo, outside)
        if self._guard is not None:
            tamper += earlier + self._guard.check()
        if results:
            results[0].outside.extend(path for path in outside if not is_cache(path))
            results[0].tamper.extend(tamper)
        return results

    def _remote_setup(self) -> tuple[JobSetup, FrozenBundle]:
        """What every remote chunk of this verifier shares, built once (see :mod:`.remote`)."""
        from agentdescent_core.evaluation.remote import FrozenBundle, JobSetup, allowed_env

        with self._lock:
            if self._remote is not None:
                return self._remote
        workspace = self._acquire()
        try:
            bundle = FrozenBundle.build(self.repo, workspace.commit,
                                        frozen_hash=workspace.frozen_tree_hash,
                                        ignored=workspace.ignored_content())
        finally:
            self._release(workspace)
        config = self._config
        setup = JobSetup(
            frozen_hash=bundle.frozen_hash, roots=self._tree.roots,
            frozen_patterns=self._frozen.patterns, frozen_roots=self._frozen.artifact_roots,
            frozen_files=tuple(sorted(self._frozen.frozen_files)), subdir=self.subdir,
            hidden=tuple(str(path) for path in config.hidden),
            backend=self.backend.name, image=getattr(self.backend, "_image", None),
            env=allowed_env(os.environ if config.host_env is None else config.host_env,
                            config.env_allow),
            env_allow=tuple(config.env_allow), network=config.network, limits=config.limits,
            test_timeout=config.test_timeout, run_timeout=config.run_timeout,
            output_chars=config.output_chars, pytest_args=tuple(config.pytest_args),
            max_restarts=config.max_restarts, trace_reads=config.trace_reads,
        )
        with self._lock:
            if self._remote is None:
                self._remote = (setup, bundle)
            return self._remote

    def _redacted(self, outcome: ChildOutcome) -> ChildOutcome:
        """``outcome`` with every text masked by this controller's redactor too.

        The worker masked what its own environment calls secret; this process
        may know more secrets (variables that never travel), so it masks again.
        """
        clean = self._redact
        records = tuple(replace(r, message=clean(r.message), output=clean(r.output))
                        for r in outcome.records)
        return replace(outcome, records=records,
                       error=None if outcome.error is None else clean(outcome.error),
                       tamper=tuple(clean(t) for t in outcome.tamper))

    def _record_verdict(self, artifact: str, context: str, verdict: Verdict) -> Verdict:
        """Keep ``verdict`` (secrets masked: it may quote what a candidate wrote) and cache it."""
        verdict = Verdict(verdict.kind, self._redact(verdict.message), verdict.code)
        with self._lock:
            self._verdicts[artifact] = verdict
        if self.cache is not None:
            self.cache.put_verdict(artifact, context, verdict)
        return verdict

    def _run_chunk(self, state: Mapping[str, str], plan: Mapping[str, tuple[int, int]],
                   deadline: float) -> _ChunkResult:
        workspace = self._acquire()
        try:
            for attempt in range(_RUN_ATTEMPTS):
                workspace.reset(state)
                scratch = workspace.new_run_scratch()
                before = _scan_repo(self.repo) if self._watch_repo else {}
                # Verified (and copied for a restore) right before the candidate starts.
                earlier = self._guard.check() if self._guard is not None else []
                try:
                    outcome = run_tests(workspace.root / self.subdir, plan, self._config,
                                        scratch=scratch, state_dir=workspace.state_dir,
                                        writable=workspace.writable_paths(),
                                        redact=self._redact, deadline=deadline,
                                        workspace_writes=workspace.writes())
                except BackendError:
                    if attempt + 1 >= _RUN_ATTEMPTS:
                        workspace.check()
                        raise
                    continue
                outside = _changes(before, _scan_repo(self.repo)) if self._watch_repo else []
                tamper = _planted_bytecode(self.repo, outside)
                outside = [path for path in outside if not is_cache(path)]
                if self._guard is not None:
                    tamper += earlier + self._guard.check()
                check = _without_empty_dirs(workspace.check(), workspace.root)
                if not check.ok:
                    workspace.reset(state)  # restore the frozen files now, not at the next run
                return _ChunkResult(outcome, check, outside, tamper)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            self._release(workspace)

    def _stop_on_tamper(self, artifact: str, context: str, changes: Sequence[str]) -> None:
        """Disqualify the candidate as ``tamper`` and stop every further evaluation."""
        message = (
            f"a candidate's run changed the user's repository or the state directory "
            f"under the local backend: {_few(changes, sep='; ', tail='; and')}. Everything "
            "listed was restored; the candidate is disqualified (tamper) and the run stops, "
            "because what else it changed cannot be known. Under --evolve-sandbox local "
            "nothing stops a candidate's script from writing there: use bwrap or docker"
        )
        verdict = self._record_verdict(artifact, context,
                                       Verdict("tamper", message, "repository-tamper"))
        with self._lock:
            self._tampered = TamperError(verdict.message,
                                         [self._redact(change) for change in changes])
        raise self._tampered

    def _acquire(self) -> Workspace:
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedVerifier is closed")
            if self._idle:
                return self._idle.pop()
        workspace = Workspace.create(self.repo, self.commit, tree=self._tree,
                                     frozen=self._frozen, parent=self._parent)
        with self._lock:
            self._workspaces.append(workspace)
            if self._context is None:
                digest = hashlib.sha256()
                digest.update(workspace.frozen_tree_hash.encode())
                digest.update(b"\0")
                digest.update(self._config.fingerprint().encode())
                self._context = digest.hexdigest()
        return workspace

    def _release(self, workspace: Workspace) -> None:
        with self._lock:
            if self._closed:
                close = True
            else:
                close = False
                self._idle.append(workspace)
        if close:
            workspace.close()


_PYTEST_CONFIGS = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml",
                              "pyproject.toml", "tox.ini", "setup.cfg", "conftest.py"})


def _rules_out(result: _ChunkResult) -> bool:
    """Does this child run alone decide the candidate's verdict (see :func:`_verdict_of`)?"""
    return bool(result.tamper or result.outcome.tamper or result.outcome.error is not None
                or not result.check.ok or result.outside)


def _child_plans(keys: Sequence[Key], concurrency: int) -> list[dict[str, tuple[int, int]]]:
    """The child runs that cover ``keys``: each repeat a sweep, cut for ``concurrency``.

    One child per sweep when the sweeps alone fill ``concurrency`` (or it is
    1); else each sweep is split (:func:`split_plan`) so about
    ``concurrency`` children can run at once.  In every plan a test appears
    once, with one repeat.
    """
    runs = sweeps(keys)
    per_sweep = max(1, -(-concurrency // max(1, len(runs))))
    return [chunk for sweep in runs for chunk in split_plan(sweep, per_sweep)]


def _shown_run(record: TestRecord) -> str:
    """One run's result in words: "passed", "failed (reward 0.0)", "was skipped"."""
    if not record.counts:
        return f"was {record.outcome}"
    reward = record.reward if record.reward is not None else 0.0
    if record.outcome == "passed" and reward == 1.0:
        return "passed"
    return f"{record.outcome} (reward {reward:g})"


def _few(items: Sequence[str], *, sep: str = ", ", tail: str = " and") -> str:
    """The first few of ``items`` and how many more: messages name, they do not list."""
    more = f"{tail} {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return sep.join(items[:_SHOWN]) + more


def _check_subdir(subdir: str) -> str:
    """The pytest rootdir relative to the repository root, as a clean posix path."""
    clean = subdir.replace("\\", "/").strip("/")
    if clean in ("", "."):
        return ""
    parts = clean.split("/")
    if any(part in ("", ".", "..") for part in parts) or os.path.isabs(subdir):
        raise ValueError(
            f"subdir {subdir!r} must be a relative path inside the repository, without '..' "
            "(the directory of the pytest rootdir relative to the git root)"
        )
    return clean


def _without_empty_dirs(check: FrozenCheck, root: Path) -> FrozenCheck:
    """``check`` minus the directories the run added that are empty.

    Plugins create their state directory in the rootdir of every run
    (pytest-benchmark's ``.benchmarks``); an empty directory cannot change what
    a test does, and disqualifying every candidate for it — the baseline too —
    would stop the run.  The next reset removes them all the same.  Must be
    called before that reset, while the directories are still there.
    """
    kept = [v for v in check.violations if not (v.kind == "added" and _empty_dir(root / v.path))]
    if len(kept) == len(check.violations):
        return check
    return FrozenCheck(kept, check.drift, check.seconds)


def _empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def _verdict_of(violations: Sequence[RefusalError], outside: Sequence[str],
                errors: Sequence[str], *, tamper: Sequence[str] = ()) -> Verdict | None:
    if tamper:
        return Verdict(
            "tamper",
            f"the candidate's code reached into the test process that judges it: "
            f"{_few(tamper, sep='; ')}; "
            "code under the artifact roots may not patch the recorder or pytest, read frames, "
            "or use ctypes (run skill scripts as subprocesses)",
            "tamper-process",
        )
    if violations:
        first = violations[0]
        return Verdict("frozen-violation", first.message, first.code)
    if outside:
        return Verdict(
            "frozen-violation",
            f"the user's repository changed while the candidate's tests ran: "
            f"{_few([shown_path(p) for p in sorted(outside)])}; "
            "under the local backend nothing stops a candidate's scripts from writing there, "
            "so the candidate is disqualified (use --evolve-sandbox bwrap or docker to block "
            "such writes, and do not edit the repository during a local run)",
            "outside-write",
        )
    if errors:
        return Verdict("collection-error", "\n\n".join(errors), "collection-error")
    return None


# ---------------------------------------------------------------- the user's repository

def _scan_repo(root: Path) -> dict[str, Sig]:
    """lstat signatures of the user's files (its .git and the state dir are RepoGuard's)."""
    found: dict[str, Sig] = {}
    _walk(str(root), "", found, top=True)
    return found


def _walk(folder: str, prefix: str, found: dict[str, Sig], *, top: bool = False) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        rel = prefix + entry.name
        if top and entry.name in (".agentdescent", ".git"):
            continue  # the run's state and the user's .git: RepoGuard compares those bytes
        if is_cache(rel) and "__pycache__" not in rel.split("/"):
            continue  # tool caches hold no code; __pycache__ does (planted .pyc files)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        found[rel] = signature(st)
        if not stat.S_ISDIR(st.st_mode):
            continue
        _walk(entry.path, rel + "/", found)


def _changes(before: Mapping[str, Sig], after: Mapping[str, Sig]) -> list[str]:
    return sorted(path for path in before.keys() | after.keys()
                  if before.get(path) != after.get(path))


def _planted_bytecode(repo: Path, changed: Sequence[str]) -> list[str]:
    """Remove the ``.pyc`` files a run added or changed in the user's repository.

    A planted ``__pycache__/*.pyc`` runs on the user's next plain ``pytest``
    instead of its source.  Each one is removed (Python writes it again from
    the source); one that is not the honest compilation of its source by this
    interpreter is reported, for the candidate to be disqualified as tamper.
    """
    found: list[str] = []
    for rel in changed:
        if not rel.endswith((".pyc", ".pyo")):
            continue
        full = repo / rel
        if not full.is_file() or full.is_symlink():
            continue
        honest = _honest_bytecode(full)
        with contextlib.suppress(OSError):
            full.unlink()
        if not honest:
            found.append(f"{rel}: bytecode that is not its source compiled (removed)")
    for rel in changed:  # a directory listed as changed is new: remove it if now empty
        if rel.rsplit("/", 1)[-1] == "__pycache__":
            with contextlib.suppress(OSError):
                (repo / rel).rmdir()
    return found


def _honest_bytecode(pyc: Path) -> bool:
    """Is ``pyc`` what this interpreter writes for its source (same header, same code)?"""
    import importlib.util
    import marshal

    try:
        source = Path(importlib.util.source_from_cache(str(pyc)))
        data = pyc.read_bytes()
        text = source.read_bytes()
        st = source.stat()
    except (OSError, ValueError):
        return False
    if data[:4] != importlib.util.MAGIC_NUMBER or len(data) < 16:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags & 1:  # hash-based: the source's hash must match
        if data[8:16] != importlib.util.source_hash(text):
            return False
    elif (int.from_bytes(data[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
          or int.from_bytes(data[12:16], "little") != st.st_size & 0xFFFFFFFF):
        return False
    optimize = 0
    parts = pyc.name.split(".")
    if len(parts) > 3 and parts[-2].startswith("opt-"):
        optimize = int(parts[-2][4:] or 0)
    try:
        code = marshal.loads(data[16:])
        return bool(code == compile(text, str(source), "exec", dont_inherit=True,
                                    optimize=optimize))
    except (ValueError, TypeError, EOFError, SyntaxError):
        return False
