"""``evolve()``: the synchronous, round-based driver (and the entry point to the async one).

One round: every worker takes a snapshot of the dev head (kept for
``refresh_interval`` rounds, staggered by worker id, which is what creates
staleness on this path), does one unit of work on its shard — roll out until a
failure, propose, turn the proposal into an evidence card — and the single
aggregator step that follows is the barrier.  ``max_concurrency`` workers run
at once on daemon threads; ``round_timeout`` stops waiting for stragglers,
whose late cards join a later round and are judged stale like any other.
With a ``duration_estimator`` the units start longest first (:mod:`.dispatch`)
and rollouts that overran their prediction come back as ``result.stragglers``.

Failure handling (the three categories): a caller-contract error raises
ContractError before or during the run; a backend failure costs the failing
worker its evidence and nothing more — the run ends on it only when every
worker failed in ``max_worker_errors`` consecutive rounds while nothing had
ever succeeded, with ``error`` naming the cause; a ledger failure ends the run
and the artifact evolved so far is returned.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.strategies import AppendRules, Strategy
from agentdescent_core.errors import BackendError, ContractError, LedgerError
from agentdescent_core.evidence import EvidenceCard, MergeReport
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.loop.dispatch import OrderedSlots, plan_units
from agentdescent_core.loop.driver import DriverBase, describe_error
from agentdescent_core.loop.durations import DurationEstimator
from agentdescent_core.loop.parallel import ParallelMode, PlanStrategy, Shard
from agentdescent_core.loop.progress import finish_progress, with_progress
from agentdescent_core.loop.result import EvolutionResult, RoundInfo, round_info
from agentdescent_core.loop.sampling import RoundRobin, TaskSampler
from agentdescent_core.loop.setup import (
    DEFAULT_ROUNDS,
    RunParts,
    build_run,
    check_int,
    config_with,
)
from agentdescent_core.loop.worker import (
    ProposeFn,
    RunFn,
    Snapshot,
    UnitResult,
    resolve_actor,
    work_unit,
)
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.staleness import StalenessPolicy
from agentdescent_core.stops import StopReason
from agentdescent_core.tasks import Task, as_tasks


def evolve(
    tasks: Sequence[Task | str],
    reward: Callable[[Task, Any], Any],
    *,
    agent: object | None = None,
    run: RunFn | None = None,
    propose: ProposeFn | None = None,
    strategy: Strategy | None = None,
    parallel: ParallelMode | PlanStrategy | None = None,
    task_sampler: TaskSampler | None = None,
    blast_radius: float = 0.2,
    agg_config: AggregatorConfig | None = None,
    aggregator_factory: Callable[..., Any] | None = None,
    staleness_policy: StalenessPolicy | str | None = None,
    refresh_interval: int | None = None,
    rounds: int | None = None,
    n_workers: int = 4,
    max_concurrency: int | None = None,
    round_timeout: float | None = None,
    asynchronous: bool = False,
    async_ratio: int | None = None,
    self_verify: bool | None = None,
    stall_patience: int | None = None,
    on_round: Callable[[RoundInfo], object] | None = None,
    target_reward: float | None = None,
    patience: int | None = None,
    max_worker_errors: int = 3,
    repo_path: str | os.PathLike[str] | None = None,
    held_out_frac: float = 0.25,
    shuffle: bool = False,
    seed: int = 0,
    max_calls: int | None = None,
    max_seconds: float | None = None,
    eval_concurrency: int = 8,
    artifact_id: str = "artifact",
    guardrails: Guardrails | None = None,
    oracle_budget: int | None = None,
    cheap_eval_tasks: int | None = None,
    verbose: bool = False,
    initial_state: Mapping[str, str] | None = None,
    duration_estimator: DurationEstimator | None = None,
) -> EvolutionResult:
    """Evolve an artifact so that ``run`` earns more ``reward`` on ``tasks``.

    See ``docs/engine.md`` for every knob.  Returns an EvolutionResult whose
    ``error`` is None only on a clean run and whose ``stop_reason`` says why it
    stopped.  Raises ContractError for a caller bug (a malformed reward, an
    actor that cannot take the engine's arguments, an impossible
    strategy/parallel pairing) — before the first rollout where it can.

    ``guardrails`` checks every proposal before it is evaluated (default
    ``Guardrails()``: secrets refused, risky scripts warned about, destructive
    commands refused); a refused proposal is a ``secret`` / ``invalid-proposal``
    merge outcome, and the ``violation_limit``-th critical one raises
    GuardrailsTripped.  There is no way to turn secret checks off.

    ``oracle_budget`` / ``cheap_eval_tasks`` set the AggregatorConfig fields of
    the same name (a ValueError if ``agg_config`` sets them otherwise).
    ``verbose=True`` prints a line per round and one at the end on stderr.
    ``initial_state`` is the artifact to start from instead of
    ``strategy.initial()``; it is ignored, with a RuntimeWarning, when
    ``repo_path`` already holds the run's artifact (a resume).
    ``duration_estimator`` (a DurationEstimator) starts each round's units
    longest first and records the rollouts that overran their prediction in
    ``result.stragglers``; without one, units start in worker order.
    """
    if asynchronous:
        from agentdescent_core.loop.async_evolve import async_evolve

        return async_evolve(
            tasks, reward, agent=agent, run=run, propose=propose, strategy=strategy,
            parallel=parallel, task_sampler=task_sampler, blast_radius=blast_radius,
            agg_config=agg_config, aggregator_factory=aggregator_factory,
            staleness_policy=staleness_policy, refresh_interval=refresh_interval,
            rounds=rounds, n_workers=n_workers, max_concurrency=max_concurrency,
            round_timeout=round_timeout, async_ratio=async_ratio, self_verify=self_verify,
            stall_patience=stall_patience, on_round=on_round, target_reward=target_reward,
            patience=patience, max_worker_errors=max_worker_errors, repo_path=repo_path,
            held_out_frac=held_out_frac, shuffle=shuffle, seed=seed, max_calls=max_calls,
            max_seconds=max_seconds, eval_concurrency=eval_concurrency, artifact_id=artifact_id,
            guardrails=guardrails, oracle_budget=oracle_budget,
            cheap_eval_tasks=cheap_eval_tasks, verbose=verbose, initial_state=initial_state,
            duration_estimator=duration_estimator,
        )
    for name, given in (("async_ratio", async_ratio), ("self_verify", self_verify),
                        ("stall_patience", stall_patience)):
        if given is not None:
            warnings.warn(f"{name}= only applies with asynchronous=True; it is ignored here",
                          RuntimeWarning, stacklevel=2)
    actor = resolve_actor(agent, run, propose)
    task_list = as_tasks(tasks)
    rounds = DEFAULT_ROUNDS if rounds is None else rounds
    max_concurrency = 1 if max_concurrency is None else max_concurrency
    refresh_interval = 1 if refresh_interval is None else refresh_interval
    check_int("rounds", rounds, 0)
    check_int("n_workers", n_workers, 1)
    check_int("max_concurrency", max_concurrency, 1)
    check_int("refresh_interval", refresh_interval, 1)
    check_int("max_worker_errors", max_worker_errors, 1)
    if patience is not None:
        check_int("patience", patience, 1)
    if round_timeout is not None and not round_timeout > 0:
        raise ValueError(
            f"round_timeout must be a positive number of seconds, got {round_timeout!r}"
        )
    on_round = with_progress(on_round, verbose, asynchronous=False)
    agg_config = config_with(agg_config, oracle_budget=oracle_budget,
                             cheap_eval_tasks=cheap_eval_tasks)
    budget = Budget(max_calls=max_calls, max_seconds=max_seconds)
    parts = build_run(
        task_list, reward, actor, strategy=strategy if strategy is not None else AppendRules(),
        parallel=parallel, task_sampler=task_sampler if task_sampler is not None else RoundRobin(),
        blast_radius=blast_radius, agg_config=agg_config, aggregator_factory=aggregator_factory,
        staleness_policy=staleness_policy, n_workers=n_workers, repo_path=repo_path,
        held_out_frac=held_out_frac, shuffle=shuffle, seed=seed, budget=budget,
        eval_concurrency=eval_concurrency, artifact_id=artifact_id,
        guardrails=guardrails, initial_state=initial_state,
        duration_estimator=duration_estimator,
    )
    try:
        driver = _SyncDriver(
            parts, n_workers=n_workers, on_round=on_round, target_reward=target_reward,
            patience=patience, max_worker_errors=max_worker_errors,
            max_concurrency=max_concurrency, round_timeout=round_timeout,
            refresh_interval=refresh_interval,
        )
        return finish_progress(driver.run(rounds), verbose)
    finally:
        parts.close()


class _SyncDriver(DriverBase):
    def __init__(
        self,
        parts: RunParts,
        *,
        max_concurrency: int,
        round_timeout: float | None,
        refresh_interval: int,
        **books: Any,
    ) -> None:
        super().__init__(parts, **books)
        self.max_concurrency = max_concurrency
        self.round_timeout = round_timeout
        self.refresh_interval = refresh_interval
        self._slots = OrderedSlots(max_concurrency)  # units start in the planned order
        self._results: queue.Queue[tuple[int, UnitResult | BaseException]] = queue.Queue()
        self._busy: set[int] = set()
        self._threaded = max_concurrency > 1 or round_timeout is not None
        self._all_failed_rounds = 0
        self._backoff_rounds = 0
        self._snapshots: list[Snapshot] = []  # what each worker last read, set by begin()

    # ------------------------------------------------------------ the loop

    def run(self, rounds: int) -> EvolutionResult:
        if self.begin():
            for round_index in range(1, rounds + 1):
                if not self.advance(round_index):
                    break
        return self.end()

    # A caller that owns the loop (the durable LoopKernel) calls these three
    # itself: begin() once, advance() once per round, end() once.

    def begin(self) -> bool:
        """Measure the starting head; False when the run must not start a round."""
        try:
            self.initial_reward = self.measure()
            self.note_reward(self.initial_reward)
            self.since_best = 0
            self.stop_reason = self.stop_check(self.initial_reward)
            self._snapshots = [Snapshot(self.version, dict(self.state))] * self.n_workers
        except BudgetExhausted as exc:
            self.end_on_budget(exc)
        except LedgerError as exc:
            self.fail(exc)
        return self.stop_reason is None

    def advance(self, round_index: int, *, trailers: Mapping[str, str] | None = None) -> bool:
        """Run round ``round_index``; False when the run must stop (``stop_reason`` says why).

        ``trailers`` are written into every commit the round makes (the durable
        run's run id and generation, which make a replayed round find its commit).
        """
        if self.stop_reason is not None:
            return False
        try:
            if self.parts.budget.expired():
                self.stop_reason = StopReason.MAX_SECONDS
                return False
            self._snapshots = self._refresh(self._snapshots, round_index)
            return self._round(round_index, self._snapshots, trailers or {})
        except BudgetExhausted as exc:
            self.end_on_budget(exc)
        except LedgerError as exc:
            self.fail(exc)
        return False

    def end(self) -> EvolutionResult:
        """Promote on a clean finish and build the result."""
        if self.stop_reason is None:
            self.stop_reason = StopReason.ROUNDS
        return self.finish(asynchronous=False)

    def _refresh(self, snapshots: list[Snapshot], round_index: int) -> list[Snapshot]:
        """Workers whose turn it is re-read the head; the rest keep their snapshot."""
        current = Snapshot(self.version, dict(self.state))
        return [
            current if (round_index - 1 + worker) % self.refresh_interval == 0 else old
            for worker, old in enumerate(snapshots)
        ]

    def _round(self, round_index: int, snapshots: list[Snapshot],
               trailers: Mapping[str, str]) -> bool:
        """One round; False when the run must stop."""
        started = time.monotonic()
        results = self._run_units(round_index, snapshots)
        cards: list[EvidenceCard] = []
        reports: list[MergeReport] = []
        failures: list[tuple[int, BaseException]] = []
        budget_hit: BudgetExhausted | None = None
        for worker, outcome in results:
            if isinstance(outcome, BudgetExhausted):
                budget_hit = outcome
                continue
            if isinstance(outcome, BaseException):
                raise outcome  # ContractError or a bug: the caller must see it
            self.counters["rollouts"] += outcome.rollouts
            self.counters["proposals"] += outcome.proposals
            self.stragglers.extend(outcome.stragglers)
            reports.extend(outcome.reports)
            if outcome.card is not None:
                cards.append(outcome.card)
            if outcome.error is not None:
                failures.append((worker, outcome.error))
        self.counters["worker_errors"] += len(failures)
        stop = self._tolerate(failures, launched=len(results))
        if budget_hit is None and stop is None:
            try:
                reports.extend(self._step(cards, round_index, trailers))
            except BackendError as exc:
                self.counters["merge_errors"] += 1
                self.warn_once("merge", f"a merge in round {round_index} failed "
                                        f"({describe_error(exc)}); its evidence is dropped")
            except BudgetExhausted as exc:
                budget_hit = exc
        reward = self.reward if budget_hit is not None else self.measure()
        self.note_reward(reward)
        self.emit(round_info(
            round_index, reward, reports, version=self.version, proposals=len(cards),
            worker_errors=len(failures), seconds=time.monotonic() - started, cards=cards,
        ))
        if budget_hit is not None:
            self.end_on_budget(budget_hit)
            return False
        if stop is not None:
            self.fail(stop)
            self.retired_workers = self.n_workers
            return False
        self.stop_reason = self.stop_check(reward)
        return self.stop_reason is None

    def _step(self, cards: list[EvidenceCard], round_index: int,
              trailers: Mapping[str, str]) -> list[MergeReport]:
        # a caller's own aggregator need not know the keyword unless trailers are asked for
        if trailers:
            return self.parts.aggregator.step(cards, round_index, trailers=trailers)
        return self.parts.aggregator.step(cards, round_index)

    def _tolerate(self, failures: list[tuple[int, BaseException]], launched: int
                  ) -> BaseException | None:
        """The global rule: give up only when nothing has ever worked (returns the cause)."""
        if not failures:
            self._all_failed_rounds = self._backoff_rounds = 0
            return None
        if self.parts.verifier.ever_succeeded:
            if len(failures) == launched:
                # a throttled backend: shedding workers cannot help, waiting can
                self._backoff_rounds += 1
                time.sleep(min(2.0, 0.05 * 2 ** min(self._backoff_rounds, 6)))
            else:
                self._backoff_rounds = 0
            self._all_failed_rounds = 0
            for worker, exc in failures:
                self.warn_once(
                    f"worker-{worker}",
                    f"worker-{worker} failed after its retries ({describe_error(exc)}) although "
                    "the backend has worked before; it keeps trying until the run's budget ends it",
                )
            return None
        if len(failures) < launched:
            self._all_failed_rounds = 0
            return None
        self._all_failed_rounds += 1
        if self._all_failed_rounds >= self.max_worker_errors:
            return failures[-1][1]
        return None

    # ------------------------------------------------------------ workers

    def _run_units(self, round_index: int, snapshots: list[Snapshot]
                   ) -> list[tuple[int, UnitResult | BaseException]]:
        shards = self.parts.shards_for(round_index)
        if not self._threaded:
            out: list[tuple[int, UnitResult | BaseException]] = []
            for worker, first in plan_units(self.parts.ctx, range(self.n_workers), shards):
                try:
                    out.append((worker, work_unit(self.parts.ctx, worker, snapshots[worker],
                                                  shards[worker], round_index, first=first)))
                except (BudgetExhausted, ContractError) as exc:
                    out.append((worker, exc))
                    break
            return sorted(out, key=lambda item: item[0])  # the merge sees worker order
        idle = [worker for worker in range(self.n_workers)
                if worker not in self._busy]  # the rest are on abandoned units
        launched: set[int] = set()
        for worker, first in plan_units(self.parts.ctx, idle, shards):
            self._busy.add(worker)
            launched.add(worker)
            threading.Thread(
                target=self._unit_thread, name=f"agentdescent-worker-{worker}", daemon=True,
                args=(worker, snapshots[worker], shards[worker], round_index,
                      self._slots.ticket(), first),
            ).start()
        return self._collect(launched)

    def _unit_thread(self, worker: int, snapshot: Snapshot, shard: Shard, round_index: int,
                     ticket: int, first: str | None) -> None:
        with self._slots.turn(ticket):
            try:
                outcome: UnitResult | BaseException = work_unit(
                    self.parts.ctx, worker, snapshot, shard, round_index, first=first)
            except BaseException as exc:
                outcome = exc
        self._results.put((worker, outcome))

    def _collect(self, launched: set[int]) -> list[tuple[int, UnitResult | BaseException]]:
        """Wait for this round's units (up to round_timeout); take any late ones too."""
        timeout = self.round_timeout
        remaining = self.parts.budget.remaining_seconds()
        if remaining is not None:
            timeout = remaining if timeout is None else min(timeout, remaining)
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = set(launched)
        got: list[tuple[int, UnitResult | BaseException]] = []
        while pending:
            wait_for = None if deadline is None else deadline - time.monotonic()
            if wait_for is not None and wait_for <= 0:
                break
            try:
                worker, outcome = self._results.get(timeout=wait_for)
            except queue.Empty:
                break
            self._busy.discard(worker)
            pending.discard(worker)
            got.append((worker, outcome))
        while True:
            try:
                worker, outcome = self._results.get_nowait()
            except queue.Empty:
                break
            self._busy.discard(worker)
            got.append((worker, outcome))
        if pending:
            self.warn_once("straggler", f"round_timeout: {len(pending)} worker(s) still running "
                                        "were left behind; their late evidence joins a later "
                                        "round and is judged as stale")
        return got
