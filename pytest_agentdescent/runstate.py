"""What ``pytest --evolve`` keeps between runs: run store, lease, kill switch, session history.

The controller (:mod:`.session`) calls these around the engine so that it
stays about pytest: which run this is (resume after a crash), whether another
run already holds the repository, whether the operator asked to stop, — for
scheduled sessions — whether this session should evolve at all, and the memory
of what earlier runs tried (:func:`load_memory`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agentdescent_core.stops import StopReason
from pytest_agentdescent.settings import EvolveSettings

if TYPE_CHECKING:
    from agentdescent_core.aggregator import AggregatorConfig
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.decisions import KillSwitch
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.ledger.ledger import Ledger
    from agentdescent_core.loop.durable import SqliteRunStore
    from agentdescent_core.loop.lease import RepositoryLease
    from agentdescent_core.loop.result import EvolutionResult, RoundInfo
    from agentdescent_core.loop.schedule import SessionDecision
    from agentdescent_core.memory import AttemptMemory
    from agentdescent_core.proposers.guardrails import Guardrails
    from pytest_agentdescent.collect import EvolvePlan
    from pytest_agentdescent.proposer import HookProposer
    from pytest_agentdescent.terminal import Out


RUN_STORE = "runs.sqlite3"
STOP_FILE = "STOP"
STOP_VARIABLE = "AGENTDESCENT_STOP"

# Settings that make two runs "the same run": a run killed with these resumes.
_KEY_FIELDS = ("rounds", "workers", "repeats", "model", "sandbox", "network", "frozen",
               "target", "patience", "max_calls", "max_usd", "max_tokens", "seed",
               "branch_prefix", "promote_after", "holdout")


def run_key(settings: EvolveSettings, roots: Sequence[str], subdir: str) -> str:
    """A fingerprint of the arguments: the same ``pytest --evolve`` resumes the same run."""
    values: dict[str, Any] = {name: getattr(settings, name) for name in _KEY_FIELDS}
    values.update(roots=list(roots), subdir=subdir)
    text = json.dumps(values, sort_keys=True, default=str)
    return "evolve:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def memory_path(state_dir: Path) -> Path:
    """``<state dir>/attempts.json``: the attempts of earlier runs in this checkout."""
    from agentdescent_core.memory import ATTEMPTS_FILE

    return state_dir / ATTEMPTS_FILE


def load_memory(state_dir: Path, repo_root: Path, settings: EvolveSettings) -> AttemptMemory:
    """What earlier runs tried: the state dir's memory, joined for scheduled sessions
    (``evolve_session_patience``) with the one on ``refs/<prefix>sessions``, which is
    what a CI runner that starts with an empty disk has.

    Raises UsageError naming the file or ref when one is not readable.
    """
    from agentdescent_core.errors import LedgerError
    from agentdescent_core.loop.schedule import SessionHistory
    from agentdescent_core.memory import AttemptMemory

    try:
        memory = AttemptMemory.load(memory_path(state_dir))
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise pytest.UsageError(f"pytest --evolve cannot read its memory of attempts: {exc}"
                                ) from None
    if settings.session_patience is not None and not settings.dry_run:
        try:
            with SessionHistory(repo_root, prefix=settings.branch_prefix) as history:
                memory.merge(history.memory())
        except LedgerError as exc:
            raise pytest.UsageError(f"pytest --evolve cannot read the memory of attempts: "
                                    f"{exc}") from None
    return memory


def kill_switch(state_dir: Path) -> KillSwitch:
    """``<state dir>/STOP`` or ``AGENTDESCENT_STOP``: either stops a run at the next round."""
    from agentdescent_core.decisions import AnyKillSwitch, EnvKillSwitch, FileKillSwitch

    return AnyKillSwitch(FileKillSwitch(state_dir / STOP_FILE), EnvKillSwitch(STOP_VARIABLE))


@dataclass(frozen=True)
class RoundsOutcome:
    """The engine's result, the run's record for the report, and notes for the user."""

    result: EvolutionResult
    info: dict[str, Any]
    notes: list[str]


class RunState:
    """The run store and the repository lease of one run (open them with :meth:`open`)."""

    def __init__(self, store: SqliteRunStore, lease: RepositoryLease, state_dir: Path) -> None:
        self.store = store
        self.lease = lease
        self.state_dir = state_dir
        self.store_path = state_dir / RUN_STORE
        self.notes: list[str] = []

    @classmethod
    def open(cls, state_dir: Path, *, repo_root: Path, prefix: str, dry_run: bool) -> RunState:
        """Open the store and take the repository lease, or raise UsageError saying who holds it."""
        from agentdescent_core.errors import AgentDescentError
        from agentdescent_core.ledger.base import clear_stale_ref_locks
        from agentdescent_core.loop.durable import SqliteRunStore
        from agentdescent_core.loop.lease import RepositoryLease, RunRefused

        try:
            store = SqliteRunStore(state_dir / RUN_STORE)
        except (AgentDescentError, OSError) as exc:
            raise pytest.UsageError(
                f"pytest --evolve cannot open its run store {state_dir / RUN_STORE}: {exc}; "
                "delete the file to start with an empty history"
            ) from None
        lease = RepositoryLease(store)
        try:
            lease.acquire()
        except RunRefused as exc:
            store.close()
            raise pytest.UsageError(f"pytest --evolve refused: {exc}") from None
        state = cls(store, lease, state_dir)
        if lease.took_over is not None:
            state.notes.append(f"the previous run ({lease.took_over}) died without finishing; "
                               "its lease was taken over")
            if not dry_run:
                for lock in clear_stale_ref_locks(repo_root, prefix):
                    state.notes.append(f"removed the stale git lock {lock} it left behind")
        return state

    def close(self) -> None:
        self.lease.release()
        self.store.close()

    # ------------------------------------------------------------ the rounds

    def run_rounds(self, settings: EvolveSettings, plan: EvolvePlan, tree: FileTree,
                   ledger: Ledger, verifier: SandboxedVerifier, proposer: HookProposer, *,
                   agg_config: AggregatorConfig, on_round: Callable[[RoundInfo], object],
                   skip: str | None, out: Out, guardrails: Guardrails | None = None
                   ) -> RoundsOutcome:
        """The rounds as a durable run: a new run, or the unfinished one with the same key."""
        from agentdescent_core.loop.durable_run import DurableRun

        rounds = 0 if skip is not None else settings.rounds
        run = DurableRun(
            self.store, verifier, ledger, tree, proposer, holder=self.lease.holder,
            key=None if settings.dry_run else run_key(settings, plan.roots, plan.layout.subdir),
            workspace=str(plan.layout.root), rounds=rounds, patience=settings.patience,
            max_calls=settings.max_calls, seed=settings.seed, n_workers=settings.workers,
            agg_config=agg_config,
            # nothing can beat a perfect reward: without a target, stop there
            target_reward=1.0 if settings.target is None else settings.target,
            artifact_id="+".join(plan.roots), calls=lambda: proposer.calls,
            on_round=on_round, guardrails=guardrails,
        )
        if run.resuming:  # same arguments as a run that never finished
            out.line(f"run       resuming {run.run_id} after round {run.replayed} of "
                     f"{rounds} (it was killed before it finished)", yellow=True)
        switch = kill_switch(self.state_dir)
        try:
            outcome = run.run(cancel=lambda: switch.reason() if switch.engaged() else None,
                              skip=skip)
        finally:
            run.close()
        loop = outcome.report
        info = {"id": outcome.run_id, "status": loop.status,
                "generations": len(loop.generations), "replayed": outcome.replayed,
                "stopped_reason": loop.stopped_reason, "store": str(self.store_path)}
        notes = []
        if outcome.result.stop_reason == StopReason.KILL_SWITCH:
            notes.append(f"stopped by the kill switch ({switch.reason()}); remove "
                         f"{self.state_dir / STOP_FILE} (or unset {STOP_VARIABLE}) to run again")
        return RoundsOutcome(outcome.result, info, notes)

    # ------------------------------------------------------------ scheduled sessions

    @staticmethod
    def decide(repo_root: Path, settings: EvolveSettings, *, baseline: float | None,
               tasks: Sequence[str]) -> SessionDecision:
        """Whether this session evolves, from the history on ``refs/<prefix>sessions``."""
        from agentdescent_core.errors import LedgerError
        from agentdescent_core.loop.schedule import SessionHistory, decide_session

        try:
            with SessionHistory(repo_root, prefix=settings.branch_prefix) as history:
                entries = history.entries()
        except LedgerError as exc:
            raise pytest.UsageError(f"pytest --evolve cannot read the session history: {exc}"
                                    ) from None
        return decide_session(entries, baseline=baseline, tasks=tasks,
                              patience=settings.session_patience,
                              degradation=settings.degradation,
                              min_sessions=settings.degradation_min_sessions)
