"""``async_evolve()``: the barrier-free driver (also ``evolve(asynchronous=True)``).

Workers never wait for a merge.  Each runs in its own thread, proposing
against a snapshot of dev that it refreshes only when the head has moved more
than ``async_ratio`` versions past it (the lag budget).  Their evidence goes
into a queue that one merger thread drains; every non-empty drain is a sweep
(one ``aggregator.step``, one RoundInfo, one ``on_round``).

Two things keep the pipeline alive.  The merger retries a failing merge with
backoff and never ends the run by itself (a dead backend retires the workers;
a broken reward or aggregator raises ContractError).  And a backpressure
guard: when ``stall_patience`` sweeps in a row brought evidence but committed
nothing, every worker is forced to refresh its snapshot (counted in
``forced_refreshes``) — otherwise a lag budget larger than the staleness
policy's tolerance would livelock, every card discarded and the head never
moving far enough to trigger a refresh.

Arguments whose meaning changes here warn: ``max_concurrency``,
``round_timeout`` and ``refresh_interval`` are ignored, ``rounds`` becomes a
budget of ``rounds * n_workers`` worker iterations, ``patience`` counts
sweeps, and ``max_seconds=None`` means 20 seconds.  ``stop_reason`` always
says which of them ended the run.

A ``duration_estimator`` learns every worker's rollout durations and records
the rollouts that overran their prediction in ``result.stragglers``; there is
no round here to start longest first, and no barrier for a long rollout to
hold up.
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
from agentdescent_core.errors import BackendError, LedgerError
from agentdescent_core.evidence import EvidenceCard, MergeReport
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.loop.driver import DriverBase, describe_error
from agentdescent_core.loop.durations import DurationEstimator
from agentdescent_core.loop.parallel import ParallelMode, PlanStrategy
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
from agentdescent_core.loop.worker import ProposeFn, RunFn, Snapshot, resolve_actor, work_unit
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.staleness import StalenessPolicy
from agentdescent_core.stops import StopReason
from agentdescent_core.tasks import Task, as_tasks

ASYNC_DEFAULT_SECONDS = 20.0
MERGE_RETRIES = 3
IDLE_WAIT = 0.5


def async_evolve(
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
    max_iters: int | None = None,
    eval_concurrency: int = 8,
    artifact_id: str = "artifact",
    guardrails: Guardrails | None = None,
    oracle_budget: int | None = None,
    cheap_eval_tasks: int | None = None,
    verbose: bool = False,
    initial_state: Mapping[str, str] | None = None,
    duration_estimator: DurationEstimator | None = None,
) -> EvolutionResult:
    """Barrier-free evolution; same plug-ins and result as ``evolve()`` (see the module doc).

    A ``plan()`` parallel strategy is asked once, for round 1: there are no
    rounds to re-plan at.  ``verbose`` prints one line per merger sweep.
    """
    changed = {
        "max_concurrency": (max_concurrency, "is ignored: every worker is its own thread"),
        "round_timeout": (round_timeout, "is ignored: there are no rounds to time out"),
        "refresh_interval": (refresh_interval, "is ignored: async_ratio decides when a worker "
                                               "refreshes its snapshot"),
        "rounds": (rounds, "becomes a budget of rounds * n_workers worker iterations "
                           "(stop_reason 'max_iters'), and history counts merger sweeps"),
        "patience": (patience, "counts merger sweeps without improvement, not rounds"),
    }
    for name, (given, meaning) in changed.items():
        if given is not None:
            warnings.warn(f"{name}= under asynchronous evolution {meaning}",
                          RuntimeWarning, stacklevel=2)
    if max_seconds is None:
        warnings.warn(
            f"max_seconds=None under asynchronous evolution means {ASYNC_DEFAULT_SECONDS:g} "
            "seconds, not unbounded; pass max_seconds= (and check result.stop_reason)",
            RuntimeWarning, stacklevel=2,
        )
        max_seconds = ASYNC_DEFAULT_SECONDS
    actor = resolve_actor(agent, run, propose)
    task_list = as_tasks(tasks)
    check_int("n_workers", n_workers, 1)
    check_int("max_worker_errors", max_worker_errors, 1)
    async_ratio = 3 if async_ratio is None else async_ratio
    stall_patience = 3 if stall_patience is None else stall_patience
    check_int("async_ratio", async_ratio, 0)
    check_int("stall_patience", stall_patience, 1)
    if patience is not None:
        check_int("patience", patience, 1)
    if max_iters is None:
        max_iters = (DEFAULT_ROUNDS if rounds is None else rounds) * n_workers
    check_int("max_iters", max_iters, 0)
    on_round = with_progress(on_round, verbose, asynchronous=True)
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
        driver = _AsyncDriver(
            parts, n_workers=n_workers, on_round=on_round, target_reward=target_reward,
            patience=patience, max_worker_errors=max_worker_errors, async_ratio=async_ratio,
            stall_patience=stall_patience, self_verify=True if self_verify is None else self_verify,
            max_iters=max_iters,
        )
        return finish_progress(driver.run(), verbose)
    finally:
        parts.close()


class _AsyncDriver(DriverBase):
    def __init__(
        self,
        parts: RunParts,
        *,
        async_ratio: int,
        stall_patience: int,
        self_verify: bool,
        max_iters: int,
        **books: Any,
    ) -> None:
        super().__init__(parts, **books)
        self.async_ratio = async_ratio
        self.stall_patience = stall_patience
        self.self_verify = self_verify
        self.max_iters = max_iters
        self.stop = parts.ctx.stop  # one flag: the driver's stop also ends units in flight
        self.inbox: queue.Queue[EvidenceCard | MergeReport] = queue.Queue()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.iterations = 0
        self.sweep = 0
        self.epoch = 0  # bumped by the backpressure guard: every worker refreshes
        self.published = Snapshot(0, {})
        self.fatal: BaseException | None = None
        self.retired_errors: list[BaseException] = []
        self.outstanding = 0  # items put in the inbox and not yet merged

    # ------------------------------------------------------------ control

    def request_stop(self, reason: StopReason, exc: BaseException | None = None) -> None:
        with self.lock:
            if self.stop_reason is None:
                self.stop_reason = reason
                if exc is not None and reason == StopReason.ERROR:
                    self.error = describe_error(exc)
        self.stop.set()
        self._wake_workers()

    def run(self) -> EvolutionResult:
        try:
            self.initial_reward = self.measure()
        except LedgerError as exc:
            self.fail(exc)
            return self.finish(asynchronous=True)
        except BudgetExhausted as exc:
            self.end_on_budget(exc)
            return self.finish(asynchronous=True)
        self.note_reward(self.initial_reward)
        self.since_best = 0
        self.published = Snapshot(self.version, dict(self.state))
        reached = self.stop_check(self.initial_reward)
        if reached is not None:
            self.stop_reason = reached
            return self.finish(asynchronous=True)
        merger = threading.Thread(target=self._merger, name="agentdescent-merger", daemon=True)
        workers = [threading.Thread(target=self._worker, args=(i,), daemon=True,
                                    name=f"agentdescent-worker-{i}")
                   for i in range(self.n_workers)]
        merger.start()
        for thread in workers:
            thread.start()
        while not self.stop.wait(0.02):
            if self.parts.budget.expired():
                self.request_stop(StopReason.MAX_SECONDS)
            elif not any(t.is_alive() for t in workers) and self.outstanding == 0:
                if len(self.retired_errors) == self.n_workers:
                    self.retired_workers = self.n_workers
                    self.request_stop(StopReason.ERROR, self.retired_errors[-1])
                else:
                    self.request_stop(StopReason.MAX_ITERS)
        merger.join()
        for thread in workers:
            thread.join(timeout=0.2)
        self.retired_workers = len(self.retired_errors)
        if self.fatal is not None:
            raise self.fatal
        return self.finish(asynchronous=True)

    # ------------------------------------------------------------ workers

    def _claim(self) -> bool:
        with self.lock:
            if self.iterations >= self.max_iters:
                return False
            self.iterations += 1
            return True

    def _wake_workers(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def _idle(self, snapshot: Snapshot, seen_epoch: int) -> None:
        """Wait until the head moves, a refresh is forced or the run stops (or a while passes).

        A worker with nothing new to say against its snapshot would otherwise
        spin, spending rollouts on answers it already has.
        """
        with self.changed:
            self.changed.wait_for(
                lambda: self.stop.is_set() or self.epoch != seen_epoch
                or self.published.version != snapshot.version,
                timeout=IDLE_WAIT,
            )

    def _worker(self, worker: int) -> None:
        snapshot: Snapshot | None = None
        seen_epoch = -1
        consecutive = 0
        idle = False
        sent: set[str] = set()  # diff ids already sent against this snapshot
        shard = self.parts.shards[worker]
        while not self.stop.is_set() and self._claim():
            head = self.published
            if snapshot is None or seen_epoch != self.epoch \
                    or head.version - snapshot.version > self.async_ratio \
                    or (idle and head.version != snapshot.version):
                snapshot, seen_epoch = head, self.epoch
                sent.clear()
            try:
                outcome = work_unit(self.parts.ctx, worker, snapshot, shard, self.sweep + 1,
                                    self_verify=self.self_verify)
            except BudgetExhausted as exc:
                self.request_stop(exc.reason)
                return
            except BaseException as exc:  # ContractError or a bug: the caller must see it
                with self.lock:
                    self.fatal = self.fatal or exc
                self.request_stop(StopReason.ERROR, exc)
                return
            card = outcome.card
            if card is not None and card.diff.diff_id in sent:
                card = None  # the same proposal against the same snapshot: already sent
            items: list[EvidenceCard | MergeReport] = list(outcome.reports)
            if card is not None:
                sent.add(card.diff.diff_id)
                items.append(card)
            with self.lock:
                self.counters["rollouts"] += outcome.rollouts
                self.counters["proposals"] += outcome.proposals
                self.counters["self_verify_rejected"] += int(outcome.self_verify_rejected)
                self.stragglers.extend(outcome.stragglers)
                self.outstanding += len(items)
            for item in items:
                self.inbox.put(item)
            if outcome.error is None:
                consecutive = 0
                idle = card is None
                if idle:
                    self._idle(snapshot, seen_epoch)
                continue
            consecutive += 1
            with self.lock:
                self.counters["worker_errors"] += 1
            if not self.parts.verifier.ever_succeeded:
                if consecutive >= self.max_worker_errors:
                    with self.lock:
                        self.retired_errors.append(outcome.error)
                    return
            else:
                self.warn_once(f"worker-{worker}",
                               f"worker-{worker} failed after its retries "
                               f"({describe_error(outcome.error)}) although the backend has worked "
                               "before; it backs off and keeps trying")
            self.stop.wait(min(1.0, 0.02 * 2 ** min(consecutive, 6)))

    # ------------------------------------------------------------ merger

    def _drain(self) -> list[EvidenceCard | MergeReport]:
        try:
            items = [self.inbox.get(timeout=0.02)]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                return items

    def _merger(self) -> None:
        stalled = 0
        while not self.stop.is_set():
            items = self._drain()
            if not items:
                continue
            try:
                stalled = self._sweep(items, stalled)
            except BudgetExhausted as exc:
                self.request_stop(exc.reason)
            except LedgerError as exc:
                self.request_stop(StopReason.ERROR, exc)
            except BaseException as exc:  # ContractError or a bug in a custom aggregator
                with self.lock:
                    self.fatal = self.fatal or exc
                self.request_stop(StopReason.ERROR, exc)
            finally:
                with self.lock:
                    self.outstanding -= len(items)

    def _step(self, cards: list[EvidenceCard], sweep: int) -> list[MergeReport]:
        """One aggregator step, retried with backoff; never ends the run by itself."""
        for attempt in range(MERGE_RETRIES + 1):
            try:
                return list(self.parts.aggregator.step(cards, sweep))
            except BackendError as exc:
                with self.lock:
                    self.counters["merge_errors"] += 1
                if attempt == MERGE_RETRIES or self.stop.is_set():
                    self.warn_once("merge", f"a merge kept failing ({describe_error(exc)}); its "
                                            f"{len(cards)} card(s) are dropped and merging "
                                            "goes on")
                    return []
                self.stop.wait(0.05 * 2**attempt)
        return []

    def _sweep(self, items: list[EvidenceCard | MergeReport], stalled: int) -> int:
        started = time.monotonic()
        self.sweep += 1
        cards = [i for i in items if isinstance(i, EvidenceCard)]
        reports = [i for i in items if isinstance(i, MergeReport)]
        if cards:
            reports.extend(self._step(cards, self.sweep))
        reward = self.measure()
        if self.version != self.published.version:
            self.published = Snapshot(self.version, dict(self.state))
            self._wake_workers()
        committed = any(r.committed for r in reports)
        if committed or not cards:
            stalled = 0
        else:
            stalled += 1
            if stalled >= self.stall_patience:
                stalled = 0
                with self.lock:
                    self.epoch += 1
                    self.forced_refreshes += 1
                self._wake_workers()
        self.note_reward(reward)
        self.emit(round_info(self.sweep, reward, reports, version=self.version,
                             proposals=len(cards), seconds=time.monotonic() - started,
                             cards=cards))
        reached = self.stop_check(reward)
        if reached is not None:
            self.request_stop(reached)
        return stalled
