"""A ``pytest --evolve`` run as a durable LoopKernel run: one generation per round.

Why: a long or scheduled evolution can die at any moment (SIGKILL, a runner
reclaimed, a laptop closed).  The run store (``.agentdescent/runs.sqlite3``)
records every finished round as a generation event, so the next run with the
same arguments resumes the same run at the next generation instead of starting
over — and a second run on the same repository is refused while the first is
alive (:mod:`.lease`).

How a round stays idempotent for (run, generation): the aggregator commits an
accepted candidate inside the round by compare-and-swap on ``<prefix>dev``, and
:class:`DurableRun` hands the round the trailers ``Agentdescent-Run`` and
``Agentdescent-Generation``, which go into every commit it makes.  When a run
dies after that commit but before the generation event was written, the
replayed generation finds its own commit on dev and reports it instead of
proposing again: no accepted commit is lost and none is made twice.  A run that
dies before the commit simply runs the round again (at-least-once, as the
kernel promises).

Who stops the run: the kernel owns the generation count (``--evolve-rounds``
across resumes), patience, the call budget and the kill switch; the round
driver still stops early on the target reward or an error, which it reports
through ``LoopObservation.stop``.  The kernel's gates, risk limit, rollback and
decision log are not used here: a round commits by compare-and-swap inside the
aggregator, which is where acceptance is decided.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import LedgerError
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.loop.durable import SqliteRunStore
from agentdescent_core.loop.kernel import (
    LoopConfig,
    LoopContext,
    LoopKernel,
    LoopObservation,
    LoopReport,
)
from agentdescent_core.loop.lease import holder_is_dead
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.verified import verified_driver
from agentdescent_core.loop.worker import EngineVerifier, ProposeFn
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.stops import StopReason, kernel_code, run_reason

RUN_TRAILER = "Agentdescent-Run"
GENERATION_TRAILER = "Agentdescent-Generation"


@dataclass(frozen=True)
class DurableOutcome:
    """What :meth:`DurableRun.run` returns: the driver's result and the kernel's record."""

    result: EvolutionResult
    report: LoopReport
    run_id: str
    replayed: int  # generations recorded before this process started


class DurableRun:
    """The rounds of one run as a kernel run in ``store``: new, or the unfinished one of ``key``.

    Construction submits (or finds) the kernel run and builds the round driver
    with what is left of the call budget (it spans the whole run, restarts
    included); :attr:`resuming` says whether an unfinished run is picked up.
    :meth:`run` drives it; :meth:`close` releases the driver.  ``key`` None
    (a dry run) always starts a new run.  ``calls()`` is the proposer-call
    counter: a generation's cost is its calls.  The caller holds the
    repository lease as ``holder`` and owns the verifier and the ledger.
    """

    def __init__(
        self,
        store: SqliteRunStore,
        verifier: EngineVerifier,
        ledger: Ledger,
        strategy: FileTree,
        propose: ProposeFn,
        *,
        holder: str,
        key: str | None,
        workspace: str,
        rounds: int,
        patience: int | None,
        max_calls: int | None,
        seed: int,
        n_workers: int,
        agg_config: AggregatorConfig,
        target_reward: float | None,
        artifact_id: str,
        calls: Callable[[], int],
        on_round: Callable[[RoundInfo], object] | None = None,
        guardrails: Guardrails | None = None,
    ) -> None:
        self.ledger = ledger
        self.holder = holder
        self._calls = calls
        self.kernel = LoopKernel(store, LoopConfig(
            "pytest-agentdescent", workspace, max_generations=rounds, patience=patience,
            max_cost=None if max_calls is None else float(max_calls), seed=seed,
            lease_seconds=120.0))
        self.run_id = self.kernel.submit(key=key)
        recorded = self.kernel.report(self.run_id)
        self.replayed = len(recorded.generations)
        self.resuming = recorded.status == "running"
        spent = int(recorded.total_cost)
        remaining = None if max_calls is None else max(max_calls - spent, 1)
        self._driver = verified_driver(
            verifier, ledger, strategy, propose, n_workers=n_workers, rounds=rounds,
            agg_config=agg_config, target_reward=target_reward, max_calls=remaining,
            seed=seed, on_round=on_round, artifact_id=artifact_id, guardrails=guardrails,
        )

    def close(self) -> None:
        self._driver.parts.close()

    def run(self, *, cancel: Callable[[], str | None] | None = None,
            skip: str | None = None) -> DurableOutcome:
        """Drive the rounds through the kernel and finish the run.

        Generation ``n`` of the kernel (from 0) is round ``n + 1`` of the
        driver.  ``cancel()`` is the kill switch, checked before every
        generation.  ``skip``, a reason, records the run as completed without
        any round (a scheduled session that only measures its baseline).  An
        exception of the driver or of a hook inside a round is recorded as the
        run's failure and then raised here.
        """
        kernel, store, driver = self.kernel, self.kernel.store, self._driver
        run_id, ledger = self.run_id, self.ledger
        # Only the generation in flight when a process died can have committed without
        # being recorded, and it is the first one this process runs: look it up once.
        recovered = self._recovered_commit() if self.resuming else None
        lease = store.lease(run_id)
        if lease is not None and lease.holder != self.holder and holder_is_dead(lease.holder):
            store.break_lease(run_id)  # the killed run's own lease on its kernel run
        driver.begin()
        raised: list[BaseException] = []

        def step(context: LoopContext) -> LoopObservation:
            try:
                return self._generation(context, recovered)
            except BaseException as exc:
                raised.append(exc)
                raise

        def apply(context: LoopContext, observation: LoopObservation) -> None:
            # The commit already happened by compare-and-swap inside the round; applying
            # is checking it is still on dev (idempotent: nothing to do twice).
            sha = observation.artifact_id
            if (sha and sha != ledger.head_or_none("dev")
                    and sha not in {r.sha for r in ledger.history("dev")}):
                raise LedgerError(f"the accepted commit {sha[:12]} is no longer on "
                                  f"{ledger.dev_branch}; someone rewrote the branch")

        no_rounds = kernel.config.max_generations == 0  # --evolve-rounds 0: baseline only
        if skip is not None or no_rounds:
            store.set_status(run_id, "completed", result={
                "stopped_reason": StopReason.SESSION_SKIPPED if skip is not None
                else StopReason.MAX_GENERATIONS,
                "reason": skip or "no round was asked for"})
            report = kernel.report(run_id)
        else:
            report = kernel.run(run_id, self.holder, step, apply=apply, cancel=cancel)
        if raised:  # the kernel recorded it as the run's failure; the caller reports it
            raise raised[-1]
        result = driver.end()
        stop = (StopReason.SESSION_SKIPPED if skip is not None
                else StopReason.ROUNDS if no_rounds else _stop_reason(report, result))
        if stop != result.stop_reason:
            result = dataclasses.replace(result, stop_reason=stop)
        return DurableOutcome(result=result, report=report, run_id=run_id,
                              replayed=self.replayed)

    # ------------------------------------------------------------ one generation

    def _generation(self, context: LoopContext,
                    recovered: tuple[str, float | None] | None) -> LoopObservation:
        driver, ledger, generation = self._driver, self.ledger, context.generation
        if generation == self.replayed and recovered is not None:
            sha, reward = recovered  # the round committed, then the process died
            value = reward if reward is not None else driver.reward
            return LoopObservation(
                reward=_number(value, context.best_reward), cost=0.0, artifact_id=sha,
                evidence={"recovered": True, "round": generation + 1},
            )
        if driver.stop_reason is not None:  # the driver stopped before this round
            return self._stopped(context)
        before = self._calls()
        going = driver.advance(generation + 1, trailers={
            RUN_TRAILER: self.run_id, GENERATION_TRAILER: str(generation)})
        cost = float(self._calls() - before)
        evidence: dict[str, object] = {"round": generation + 1}
        info = driver.history[-1] if driver.history else None
        if info is not None and info.round == generation + 1:
            evidence.update(merged=info.merged, reasons=dict(info.reasons))
        if not going:
            return self._stopped(context, cost=cost, evidence=evidence)
        return LoopObservation(
            reward=_number(driver.reward, context.best_reward), cost=cost,
            artifact_id=ledger.head_or_none("dev"), evidence=evidence,
        )

    def _stopped(self, context: LoopContext, *, cost: float = 0.0,
                 evidence: dict[str, object] | None = None) -> LoopObservation:
        driver = self._driver
        engine = driver.stop_reason or StopReason.ROUNDS
        details = dict(evidence or {"round": context.generation + 1})
        details.update(stopped_reason=kernel_code(engine), engine_stop=str(engine),
                       reason=f"the engine stopped: {engine}")
        return LoopObservation(reward=_number(driver.reward, context.best_reward), cost=cost,
                               artifact_id=self.ledger.head_or_none("dev"), evidence=details,
                               stop=True)

    def _recovered_commit(self) -> tuple[str, float | None] | None:
        """The newest dev commit of (this run, its first unrecorded generation), if any."""
        try:
            history = self.ledger.history("dev")
        except LedgerError:
            return None
        for record in reversed(history):
            if (record.trailer(RUN_TRAILER) == self.run_id
                    and record.trailer(GENERATION_TRAILER) == str(self.replayed)):
                return record.sha, record.reward_after
        return None


def _stop_reason(report: LoopReport, result: EvolutionResult) -> str:
    if result.error is not None:
        return StopReason.ERROR
    if result.stop_reason not in (StopReason.ROUNDS, None):
        return result.stop_reason  # the driver stopped first (target, budget, error)
    return run_reason(report.stopped_reason, default=StopReason(result.stop_reason or "rounds"))


def _number(value: float | None, fallback: float | None) -> float:
    for candidate in (value, fallback):
        if candidate is not None and math.isfinite(candidate):
            return float(candidate)
    return 0.0
