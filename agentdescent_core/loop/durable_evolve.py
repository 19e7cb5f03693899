"""A ``pytest --evolve`` run as a durable LoopKernel run: one generation per round.

Why: a long or scheduled evolution can die at any moment (SIGKILL, a runner
reclaimed, a laptop closed).  The run store (``.agentdescent/runs.sqlite3``)
records every finished round as a generation event, so the next run with the
same arguments resumes the same run at the next generation instead of starting
over — and a second run on the same repository is refused while the first is
alive.

How a round stays idempotent for (run, generation): the aggregator commits an
accepted candidate inside the round by compare-and-swap on ``<prefix>dev``, and
every such commit carries the trailers ``Agentdescent-Run`` and
``Agentdescent-Generation``.  When a run dies after that commit but before the
generation event was written, the replayed generation finds its own commit on
dev and reports it instead of proposing again: no accepted commit is lost and
none is made twice.  A run that dies before the commit simply runs the round
again (at-least-once, as the kernel promises).

Who stops the run: the kernel owns the generation count (``--evolve-rounds``
across resumes), patience, the call budget and the kill switch; the engine
still stops early on the target reward or an error, which it reports through
``LoopObservation.stop``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentdescent_core.errors import AgentDescentError, LedgerError
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.loop.durable import LeaseHeld, SqliteRunStore, holder_alive, worker_id
from agentdescent_core.loop.kernel import (
    LoopConfig,
    LoopContext,
    LoopKernel,
    LoopObservation,
    LoopReport,
)
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.verified import VerifiedRun

__all__ = [
    "GENERATION_TRAILER",
    "REPOSITORY_LEASE",
    "RUN_TRAILER",
    "DurableOutcome",
    "RepositoryLease",
    "RunRefused",
    "clear_stale_ref_locks",
    "evolve_durably",
    "holder_name",
    "loop_config",
]

RUN_TRAILER = "Agentdescent-Run"
GENERATION_TRAILER = "Agentdescent-Generation"
REPOSITORY_LEASE = "repository"

# kernel stop codes -> the report's stop_reason vocabulary (the engine's)
_STOP_NAMES = {
    "max_generations": "rounds",
    "target": "target_reward",
    "budget": "max_calls",
    "patience": "patience",
    "kill-switch": "kill-switch",
    "cancelled": "kill-switch",
}


class RunRefused(AgentDescentError):
    """Another live run holds the repository; the message names it and its lease expiry."""


def holder_name() -> str:
    """``agentdescent-<token>:<pid>@<host>``: unique per run, and a dead holder is recognisable."""
    return worker_id(f"agentdescent-{uuid.uuid4().hex[:8]}")


def _holder_is_dead(holder: str) -> bool:
    """True only when the holder ran on this host and its process is gone."""
    return holder_alive(holder) is False


class RepositoryLease:
    """One evolution per repository at a time, with a heartbeat while it runs.

    The lease lives in the run store.  A holder that died on this host (its
    process is gone) is taken over at once; one on another host, or alive,
    makes :meth:`acquire` raise :class:`RunRefused` naming it and when its lease
    expires.  The heartbeat renews the lease every quarter of ``ttl``, so a
    killed run frees the repository ``ttl`` seconds later at the latest.
    """

    def __init__(self, store: SqliteRunStore, *, holder: str | None = None,
                 ttl: float = 60.0) -> None:
        self.store = store
        self.holder = holder or holder_name()
        self.ttl = ttl
        self.took_over: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        try:
            self.store.acquire_lease(REPOSITORY_LEASE, self.holder, self.ttl)
        except LeaseHeld as held:
            if not _holder_is_dead(held.holder):
                raise RunRefused(
                    f"another agentdescent run holds this repository: {held.holder} "
                    f"(name:pid@host), its lease expires at "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(held.expires_at))} "
                    f"(in {max(0, math.ceil(held.expires_at - time.time()))} s); wait for it "
                    "to finish, or stop it by creating .agentdescent/STOP"
                ) from None
            self.store.break_lease(REPOSITORY_LEASE)
            self.store.acquire_lease(REPOSITORY_LEASE, self.holder, self.ttl)
            self.took_over = held.holder
        self._thread = threading.Thread(target=self._beat, name="agentdescent-lease",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.store.renew_lease(REPOSITORY_LEASE, self.holder, self.ttl)
            except AgentDescentError:
                return  # lost or store closed: the kernel's own lease check will tell

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(AgentDescentError):
            self.store.release_lease(REPOSITORY_LEASE, self.holder)


@dataclass(frozen=True)
class DurableOutcome:
    """What :func:`evolve_durably` returns: the engine's result and the kernel's record."""

    result: EvolutionResult
    report: LoopReport
    run_id: str
    replayed: int  # generations recorded before this process started


def clear_stale_ref_locks(repo_path: str | os.PathLike[str], prefix: str) -> list[str]:
    """Remove ``*.lock`` files of our own refs left by a killed run; return their paths.

    Only called after the repository lease was taken over from a holder known
    dead, so no live process of ours can own them; locks of other refs are
    never touched.
    """
    import git

    with git.Repo(str(repo_path)) as repo:
        common = Path(repo.common_dir)
    removed = []
    roots = [common / "refs" / "heads" / prefix.rstrip("/"), common / "refs" / prefix.rstrip("/")]
    for root in roots:
        if not root.is_dir():
            continue
        for lock in root.rglob("*.lock"):
            lock.unlink(missing_ok=True)
            removed.append(str(lock))
    return removed


def _stamped_commit(ledger: Ledger, run_id: str, generation: int
                    ) -> tuple[str, float | None] | None:
    """The newest dev commit made by (run_id, generation), with its reward_after."""
    try:
        history = ledger.history("dev")
    except LedgerError:
        return None
    for record in reversed(history):
        if (record.trailer(RUN_TRAILER) == run_id
                and record.trailer(GENERATION_TRAILER) == str(generation)):
            return record.sha, record.reward_after
    return None


def evolve_durably(
    run: VerifiedRun,
    ledger: Ledger,
    kernel: LoopKernel,
    run_id: str,
    *,
    holder: str,
    calls: Callable[[], int],
    last_round: Callable[[], RoundInfo | None],
    cancel: Callable[[], str | None] | None = None,
    skip: str | None = None,
) -> DurableOutcome:
    """Drive ``run`` through ``kernel`` for ``run_id`` and finish it.

    Generation ``n`` of the kernel (from 0) is round ``n + 1`` of the engine.
    ``calls()`` is the proposer-call counter (a generation's cost is its
    calls); ``last_round()`` the RoundInfo the engine reported last (through
    its ``on_round``); ``cancel()`` the kill switch, checked before every
    generation.  ``skip``, a reason, records the run as completed without any
    round (a scheduled session that only measures its baseline).  An exception
    of the engine or of a hook inside a round is recorded as the run's failure
    and then raised here, as :func:`evolve_verified` would.  The caller holds
    the repository lease, owns ``run`` and closes it.
    """
    store = kernel.store
    replayed = len(kernel.report(run_id).generations)
    # Only the generation in flight when a process died can have committed without
    # being recorded, and it is the first one this process runs: look it up once.
    resumed = store.get_run(run_id).status == "running"
    recovered = _stamped_commit(ledger, run_id, replayed) if resumed else None
    lease = store.lease(run_id)
    if lease is not None and lease.holder != holder and _holder_is_dead(lease.holder):
        store.break_lease(run_id)  # the killed run's own lease on its kernel run
    run.begin()
    raised: list[BaseException] = []

    def step(context: LoopContext) -> LoopObservation:
        generation = context.generation
        try:
            return _round(context, generation)
        except BaseException as exc:
            raised.append(exc)
            raise

    def _round(context: LoopContext, generation: int) -> LoopObservation:
        if generation == replayed and recovered is not None:
            sha, reward = recovered  # the round committed, then the process died
            value = reward if reward is not None else run.reward
            return LoopObservation(
                reward=_number(value, context.best_reward), cost=0.0, artifact_id=sha,
                evidence={"recovered": True, "round": generation + 1},
            )
        if run.stop_reason is not None:  # the engine stopped before this round
            return _stopped(context, run, ledger, generation)
        ledger.stamp = {RUN_TRAILER: run_id, GENERATION_TRAILER: str(generation)}
        before = calls()
        try:
            going = run.advance(generation + 1)
        finally:
            ledger.stamp = {}
        info = last_round()
        evidence: dict[str, object] = {"round": generation + 1}
        if info is not None and info.round == generation + 1:
            evidence.update(merged=info.merged, reasons=dict(info.reasons))
        if not going:
            return _stopped(context, run, ledger, generation, cost=float(calls() - before),
                            evidence=evidence)
        return LoopObservation(
            reward=_number(run.reward, context.best_reward), cost=float(calls() - before),
            artifact_id=_dev_head(ledger), evidence=evidence,
        )

    def apply(context: LoopContext, observation: LoopObservation) -> None:
        # The commit already happened by compare-and-swap inside the round; applying
        # is checking it is still on dev (idempotent: nothing to do twice).
        sha = observation.artifact_id
        if sha and sha != _dev_head(ledger):
            history = {r.sha for r in ledger.history("dev")}
            if sha not in history:
                raise LedgerError(f"the accepted commit {sha[:12]} is no longer on "
                                  f"{ledger.dev_branch}; someone rewrote the branch")

    no_rounds = kernel.config.max_generations == 0  # --evolve-rounds 0: baseline only
    if skip is not None or no_rounds:
        store.set_status(run_id, "completed", result={
            "stopped_reason": "session-skipped" if skip is not None else "max_generations",
            "reason": skip or "no round was asked for"})
        report = kernel.report(run_id)
    else:
        report = kernel.run(run_id, holder, step, apply=apply, cancel=cancel)
    if raised:  # the kernel recorded it as the run's failure; the caller reports it
        raise raised[-1]
    result = run.end()
    stop = ("session-skipped" if skip is not None else "rounds" if no_rounds
            else _stop_reason(report, result))
    if stop != result.stop_reason:
        result = dataclasses.replace(result, stop_reason=stop)
    return DurableOutcome(result=result, report=report, run_id=run_id, replayed=replayed)


# the engine's stop reasons -> the kernel's codes
_KERNEL_CODES = {"target_reward": "target", "patience": "patience", "max_calls": "budget",
                 "max_seconds": "budget", "error": "error", "rounds": "max_generations"}


def _stopped(context: LoopContext, run: VerifiedRun, ledger: Ledger, generation: int, *,
             cost: float = 0.0, evidence: dict[str, object] | None = None) -> LoopObservation:
    engine = run.stop_reason or "rounds"
    details = dict(evidence or {"round": generation + 1})
    details.update(stopped_reason=_KERNEL_CODES.get(engine, "error"), engine_stop=engine,
                   reason=f"the engine stopped: {engine}")
    return LoopObservation(reward=_number(run.reward, context.best_reward), cost=cost,
                           artifact_id=_dev_head(ledger), evidence=details, stop=True)


def _stop_reason(report: LoopReport, result: EvolutionResult) -> str:
    if result.error is not None:
        return "error"
    if result.stop_reason not in ("rounds", None):
        return result.stop_reason  # the engine stopped first (target, budget, error)
    code = report.stopped_reason or ""
    return _STOP_NAMES.get(code, result.stop_reason or "rounds")


def _number(value: float | None, fallback: float | None) -> float:
    for candidate in (value, fallback):
        if candidate is not None and math.isfinite(candidate):
            return float(candidate)
    return 0.0


def _dev_head(ledger: Ledger) -> str | None:
    try:
        return ledger.head("dev")
    except LedgerError:
        return None


def loop_config(*, rounds: int, patience: int | None, max_calls: int | None, seed: int,
                workspace: str) -> LoopConfig:
    """The kernel's settings for one ``pytest --evolve`` run."""
    return LoopConfig("pytest-agentdescent", workspace, max_generations=rounds,
                      patience=patience, max_cost=None if max_calls is None else float(max_calls),
                      seed=seed, lease_seconds=120.0)
