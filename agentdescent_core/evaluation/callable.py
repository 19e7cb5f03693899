"""The verifier ``evolve()`` builds from the caller's ``run`` and ``reward``.

Every place the engine needs a score — a worker's rollout, a worker's
self-check, the aggregator's base / candidate / rebase / oracle evaluations,
the per-round held-out reward — goes through :class:`CallableVerifier`, so the
three things that must hold everywhere are done once:

* memoised by (state content, task id, repeat index): an unchanged artifact is
  never paid for twice, and asking for more repeats only runs the missing ones;
  two threads asking for the same key share one call;
* retried with exponential backoff: a transient backend failure re-runs only
  the task that failed; after the last retry it becomes :class:`BackendError`;
  a malformed reward is a caller bug (:class:`ContractError`) and is never
  retried;
* concurrent: the missing (task, repeat) pairs of one request run on a pool
  of ``eval_concurrency`` threads, so a held-out gate over many tasks is not a
  serial ceiling for I/O-bound actors.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from agentdescent_core.artifacts.filetree import state_hash
from agentdescent_core.errors import BackendError, ContractError
from agentdescent_core.evaluation.protocol import TaskSplit, requested_tasks
from agentdescent_core.stats.samples import TaskSamples, as_reward
from agentdescent_core.tasks import Task

_T = TypeVar("_T")

RunFn = Callable[[str, Task], Any]
RewardFn = Callable[[Task, Any], Any]


def callable_name(fn: object) -> str:
    """A readable name for a caller-supplied callable, for error messages."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


def check_reward(value: object, *, task_id: str, reward_fn: object) -> float:
    """The reward as a float, or ContractError saying what was wrong with it."""
    score = as_reward(value)
    if score is not None:
        return score
    raise ContractError(
        f"reward {callable_name(reward_fn)} returned {value!r:.80} for task {task_id!r}; "
        "a reward must be a finite number in [0, 1] (pass 1.0, fail 0.0) — clip or rescale "
        "graded scores"
    )


def call_with_retries(
    fn: Callable[[], _T],
    *,
    what: str,
    retries: int,
    backoff: float,
    max_backoff: float = 2.0,
    on_attempt: Callable[[], None] | None = None,
    on_retry: Callable[[BaseException], None] | None = None,
    rng: random.Random | None = None,
) -> _T:
    """``fn()`` with up to ``retries`` retries on transient exceptions.

    ContractError (and anything that is not an ``Exception``) propagates at
    once.  ``on_attempt`` runs before every attempt, outside the retry: the
    call budget charges there, and what it raises stops the call.  After the
    last failure the result is a BackendError naming ``what`` and the last
    exception, chained to it.
    """
    last: Exception | None = None
    for attempt in range(retries + 1):
        if on_attempt is not None:
            on_attempt()
        try:
            return fn()
        except ContractError:
            raise
        except Exception as exc:  # a backend failure: retried below
            last = exc
            if attempt < retries:
                if on_retry is not None:
                    on_retry(exc)
                delay = min(max_backoff, backoff * 2**attempt)
                if rng is not None:
                    delay *= 0.5 + rng.random() / 2
                if delay > 0:
                    time.sleep(delay)
    assert last is not None
    raise BackendError(
        f"{what} failed {retries + 1} times; last error {type(last).__name__}: {last}"
    ) from last


@dataclass(frozen=True)
class Rollout:
    """One run of the actor on a task at a state: its output and the reward it earned.

    ``seconds`` is how long this call spent running the actor and the reward
    (retries included); None when the answer came from the memo or from a
    verifier that does not time its runs, so a duration estimate only ever
    sees rollouts that really ran.
    """

    task_id: str
    repeat: int
    output: Any
    reward: float
    seconds: float | None = None


class CallableVerifier:
    """A :class:`~agentdescent_core.evaluation.protocol.Verifier` over ``run`` + ``reward``.

    ``render`` turns a state into the text ``run`` receives (the strategy's
    ``render``).  ``on_call`` is invoked before every attempt at ``run``; it is
    where the call budget is charged, and whatever it raises stops that
    evaluation without a retry.  ``retries`` / ``backoff`` are per task call.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        run: RunFn,
        reward: RewardFn,
        render: Callable[[Mapping[str, str]], str],
        split: TaskSplit,
        *,
        eval_concurrency: int = 8,
        retries: int = 3,
        backoff: float = 0.01,
        on_call: Callable[[], None] | None = None,
        seed: int = 0,
    ) -> None:
        if isinstance(eval_concurrency, bool) or not isinstance(eval_concurrency, int) \
                or eval_concurrency < 1:
            raise ValueError(f"eval_concurrency must be an integer >= 1, got {eval_concurrency!r}")
        self._tasks = {task.id: task for task in tasks}
        unknown = [t for t in split.all_tasks if t not in self._tasks]
        if unknown:
            raise ValueError(f"the split names tasks that were not given: {unknown[:5]}")
        self._run = run
        self._reward = reward
        self._render = render
        self._split = split
        self.retries = retries
        self.backoff = backoff
        self._on_call = on_call
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._done: dict[tuple[str, str, int], Rollout] = {}
        self._inflight: dict[tuple[str, str, int], Future[Rollout]] = {}
        self._rendered: dict[str, str] = {}
        self._pool = ThreadPoolExecutor(eval_concurrency, thread_name_prefix="agentdescent-eval")
        self._evaluations = 0
        self._cache_hits = 0
        self._retried = 0
        self._failures = 0
        self.last_failure: BaseException | None = None

    # ---------------------------------------------------------------- protocol

    @property
    def split(self) -> TaskSplit:
        return self._split

    @property
    def evaluations(self) -> int:
        return self._evaluations

    @property
    def ever_succeeded(self) -> bool:
        """True once any run + reward completed: the backend demonstrably works."""
        return self._evaluations > 0

    def usage(self) -> dict[str, int]:
        return {
            "evaluations": self._evaluations,
            "cache_hits": self._cache_hits,
            "retries": self._retried,
            "failures": self._failures,
        }

    def task(self, task_id: str) -> Task:
        return self._tasks[task_id]

    def render(self, state: Mapping[str, str]) -> str:
        key = state_hash(state)
        with self._lock:
            text = self._rendered.get(key)
        if text is None:
            text = self._render(state)
            with self._lock:
                self._rendered[key] = text
        return text

    def evaluate(
        self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
    ) -> TaskSamples:
        ids = requested_tasks(task_ids, repeats, self._tasks)
        done = self._gather(state, [(t, r) for t in ids for r in range(repeats)])
        return self._split.samples(
            {task_id: [done[(task_id, r)].reward for r in range(repeats)] for task_id in ids})

    def rollout(self, state: Mapping[str, str], task_id: str, repeat: int = 0) -> Rollout:
        """Run one (task, repeat) at ``state`` on the calling thread — memoised and retried.

        A worker's rollouts run on the worker's own thread rather than on the
        evaluation pool, so workers never queue in front of the aggregator's
        evaluations (which would make the merge the bottleneck).
        """
        frozen = dict(state)
        full = (state_hash(frozen), task_id, repeat)
        if task_id not in self._tasks:
            raise ValueError(f"unknown task id {task_id!r}; the run has no such task")
        with self._lock:
            done = self._done.get(full)
            running = self._inflight.get(full)
            if done is not None:
                self._cache_hits += 1
                return dataclasses.replace(done, seconds=None)
            if running is None or running.cancelled():
                mine: Future[Rollout] = Future()
                mine.set_running_or_notify_cancel()
                self._inflight[full] = mine
                running = None
        if running is not None:
            with self._lock:
                self._cache_hits += 1
            shared = self._gather(frozen, [(task_id, repeat)])[(task_id, repeat)]
            return dataclasses.replace(shared, seconds=None)  # another call ran it
        try:
            result = self._compute(full, frozen)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        mine.set_result(result)
        return result

    def close(self) -> None:
        """Stop the evaluation threads (calls in flight finish in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- internals

    def _gather(
        self, state: Mapping[str, str], wanted: list[tuple[str, int]]
    ) -> dict[tuple[str, int], Rollout]:
        """Results for every (task, repeat) of ``wanted`` at ``state``.

        Fails fast: at the first failure the request's calls that have not
        started are cancelled, so a dead backend costs one batch of retries,
        not one per task.  A call another request cancelled is resubmitted.
        """
        frozen = dict(state)
        key = state_hash(frozen)
        futures = {item: self._submit(key, frozen, *item) for item in wanted}
        while True:
            wait(list(futures.values()), return_when=FIRST_EXCEPTION)
            failed = [f.exception() for f in futures.values()
                      if f.done() and not f.cancelled() and f.exception() is not None]
            if failed:
                for future in futures.values():
                    future.cancel()
                contract = [e for e in failed if isinstance(e, ContractError)]
                error = contract[0] if contract else failed[0]
                assert error is not None
                raise error
            cancelled = [item for item, f in futures.items() if f.cancelled()]
            if not cancelled and all(f.done() for f in futures.values()):
                return {item: f.result() for item, f in futures.items()}
            for item in cancelled:
                futures[item] = self._submit(key, frozen, *item)

    def _submit(
        self, key: str, state: dict[str, str], task_id: str, repeat: int
    ) -> Future[Rollout]:
        full = (key, task_id, repeat)
        with self._lock:
            done = self._done.get(full)
            if done is not None:
                self._cache_hits += 1
                ready: Future[Rollout] = Future()
                ready.set_result(done)
                return ready
            running = self._inflight.get(full)
            if running is not None and not running.cancelled():
                self._cache_hits += 1
                return running
            future = self._pool.submit(self._compute, full, state)
            self._inflight[full] = future
        future.add_done_callback(lambda f: self._forget_cancelled(full, f))
        return future

    def _forget_cancelled(self, key: tuple[str, str, int], future: Future[Rollout]) -> None:
        if future.cancelled():
            with self._lock:
                if self._inflight.get(key) is future:
                    del self._inflight[key]

    def _compute(self, key: tuple[str, str, int], state: dict[str, str]) -> Rollout:
        _, task_id, repeat = key
        task = self._tasks[task_id]
        try:
            rendered = self.render(state)
            started = time.monotonic()

            def once() -> tuple[Any, Any]:
                output = self._run(rendered, task)
                return output, self._reward(task, output)

            output, raw = call_with_retries(
                once,
                what=f"evaluating task {task_id!r} (run {callable_name(self._run)}, "
                     f"reward {callable_name(self._reward)})",
                retries=self.retries,
                backoff=self.backoff,
                on_attempt=self._on_call,
                on_retry=self._count_retry,
                rng=self._rng,
            )
            score = check_reward(raw, task_id=task_id, reward_fn=self._reward)
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
                if isinstance(exc, BackendError):
                    self._failures += 1
                    self.last_failure = exc
            raise
        result = Rollout(task_id, repeat, output, score, time.monotonic() - started)
        with self._lock:
            self._done[key] = result
            self._inflight.pop(key, None)
            self._evaluations += 1
        return result

    def _count_retry(self, exc: BaseException) -> None:
        with self._lock:
            self._retried += 1
