"""The run + reward verifier: the one memoised, retried, concurrent evaluation choke point."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import Any

import pytest

from agentdescent_core.errors import BackendError, ContractError
from agentdescent_core.evaluation.callable import CallableVerifier, call_with_retries
from agentdescent_core.evaluation.protocol import TaskSplit, Verifier
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.tasks import Task, as_tasks

TASKS = [Task(f"t{i}", f"say {i}", {"gold": str(i)}) for i in range(6)]
SPLIT = TaskSplit(train=tuple(t.id for t in TASKS[:4]), held_out=tuple(t.id for t in TASKS[4:]))


class Backend:
    """run() answers the gold value when the rendered artifact says 'answer'; counts calls."""

    def __init__(self, *, fail: dict[str, int] | None = None, delay: float = 0.0) -> None:
        self.calls: Counter[str] = Counter()
        self.fail = dict(fail or {})
        self.delay = delay
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def run(self, rendered: str, task: Task) -> str:
        with self.lock:
            self.calls[task.id] += 1
            self.active += 1
            self.peak = max(self.peak, self.active)
            failing = self.fail.get(task.id, 0) > 0
            if failing:
                self.fail[task.id] -= 1
        try:
            if self.delay:
                time.sleep(self.delay)
            if failing:
                raise ConnectionError(f"backend hiccup on {task.id}")
            return str(task.meta["gold"]) if "answer" in rendered else "?"
        finally:
            with self.lock:
                self.active -= 1


def exact(task: Task, output: Any) -> float:
    return 1.0 if output == task.meta["gold"] else 0.0


def render(state: dict[str, str] | Any) -> str:
    return "\n".join(state[k] for k in sorted(state))


def make(backend: Backend, reward: Any = exact, **kw: Any) -> CallableVerifier:
    kw.setdefault("backoff", 0.0)
    return CallableVerifier(TASKS, backend.run, reward, render, SPLIT, **kw)


def test_it_is_a_verifier_and_scores_states() -> None:
    verifier = make(Backend())
    assert isinstance(verifier, Verifier)
    assert verifier.split is SPLIT
    empty = verifier.evaluate({}, ["t0", "t1"], 1)
    assert empty.reward() == 0.0
    good = verifier.evaluate({"r": "always answer"}, ["t0", "t1"], 2)
    assert good.reward() == 1.0
    assert good.repeats("t0") == 2
    assert verifier.ever_succeeded


def test_memoised_by_state_content_task_and_repeat() -> None:
    backend = Backend()
    verifier = make(backend)
    verifier.evaluate({"a": "x", "b": "answer"}, ["t0", "t1"], 2)
    assert backend.calls == Counter({"t0": 2, "t1": 2})
    # same content, another dict order: all cached
    verifier.evaluate({"b": "answer", "a": "x"}, ["t0", "t1"], 2)
    assert backend.calls == Counter({"t0": 2, "t1": 2})
    # more repeats run only the missing ones
    samples = verifier.evaluate({"a": "x", "b": "answer"}, ["t0"], 5)
    assert backend.calls["t0"] == 5
    assert samples.repeats("t0") == 5
    # another state is another key
    verifier.evaluate({"a": "y", "b": "answer"}, ["t0"], 1)
    assert backend.calls["t0"] == 6
    assert verifier.evaluations == 8
    assert verifier.usage()["cache_hits"] >= 6


def test_rollout_returns_the_output_and_shares_the_cache() -> None:
    backend = Backend()
    verifier = make(backend)
    rollout = verifier.rollout({"r": "answer"}, "t3", 0)
    assert (rollout.output, rollout.reward, rollout.repeat) == ("3", 1.0, 0)
    verifier.evaluate({"r": "answer"}, ["t3"], 1)
    assert backend.calls["t3"] == 1


def test_a_rollout_that_ran_is_timed_and_one_from_the_memo_is_not() -> None:
    backend = Backend(delay=0.05)
    verifier = make(backend)
    ran = verifier.rollout({"r": "answer"}, "t2", 0)
    assert ran.seconds is not None
    assert ran.seconds >= 0.05
    again = verifier.rollout({"r": "answer"}, "t2", 0)
    assert backend.calls["t2"] == 1
    assert again.seconds is None  # answered from the memo: no duration to learn from
    assert (again.output, again.reward) == (ran.output, ran.reward)


def test_requests_run_concurrently_up_to_eval_concurrency() -> None:
    backend = Backend(delay=0.03)
    verifier = make(backend, eval_concurrency=3)
    verifier.evaluate({"r": "answer"}, [t.id for t in TASKS], 2)
    assert 1 < backend.peak <= 3
    assert sum(backend.calls.values()) == 12


def test_two_threads_asking_for_the_same_key_share_one_call() -> None:
    backend = Backend(delay=0.05)
    verifier = make(backend, eval_concurrency=4)
    threads = [threading.Thread(target=verifier.evaluate, args=({"r": "answer"}, ["t0", "t1"], 2))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backend.calls == Counter({"t0": 2, "t1": 2})


def test_a_transient_failure_is_retried_and_only_that_task_reruns() -> None:
    backend = Backend(fail={"t2": 2})
    verifier = make(backend, retries=2)
    samples = verifier.evaluate({"r": "answer"}, ["t1", "t2"], 1)
    assert samples.reward() == 1.0
    assert backend.calls == Counter({"t1": 1, "t2": 3})
    assert verifier.usage()["retries"] == 2


def test_a_backend_that_keeps_failing_becomes_backend_error() -> None:
    backend = Backend(fail={"t2": 99})
    verifier = make(backend, retries=2)
    with pytest.raises(BackendError, match=r"task .t2.*3 times.*ConnectionError") as info:
        verifier.evaluate({"r": "answer"}, ["t1", "t2"], 1)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert backend.calls["t2"] == 3
    assert not isinstance(info.value, ContractError)
    # a failure is not memoised: once the backend recovers, the task runs again
    backend.fail["t2"] = 0
    assert verifier.evaluate({"r": "answer"}, ["t2"], 1).reward() == 1.0


@pytest.mark.parametrize("bad", [47, -0.1, 1.5, math.nan, math.inf, "1.0", None, [1.0]])
def test_a_malformed_reward_is_a_contract_error_and_never_retried(bad: object) -> None:
    seen: list[str] = []

    def broken_reward(task: Task, output: Any) -> object:
        seen.append(task.id)
        return bad

    verifier = make(Backend(), reward=broken_reward)
    with pytest.raises(ContractError, match=r"broken_reward.*finite number in \[0, 1\]"):
        verifier.evaluate({}, ["t0"], 1)
    assert seen == ["t0"]


def test_bools_and_integers_are_rewards() -> None:
    verifier = make(Backend(), reward=lambda task, out: out == task.meta["gold"])
    assert verifier.evaluate({"r": "answer"}, ["t0"], 1).reward() == 1.0
    verifier = make(Backend(), reward=lambda task, out: 0)
    assert verifier.evaluate({"r": "answer"}, ["t0"], 1).reward() == 0.0


def test_the_call_budget_is_charged_per_attempt_and_stops_without_retry() -> None:
    budget = Budget(max_calls=3)
    backend = Backend(fail={"t0": 1})
    verifier = make(backend, on_call=budget.charge_run)
    verifier.evaluate({"r": "answer"}, ["t0"], 1)  # 2 attempts
    assert budget.counts["run"] == 2
    with pytest.raises(BudgetExhausted, match="max_calls=3"):
        verifier.evaluate({"r": "answer"}, ["t1", "t2"], 1)
    assert budget.calls == 3


def test_unknown_tasks_and_bad_arguments_are_refused() -> None:
    verifier = make(Backend())
    with pytest.raises(ValueError, match="unknown task id 'nope'"):
        verifier.evaluate({}, ["nope"], 1)
    with pytest.raises(ValueError, match="repeats"):
        verifier.evaluate({}, ["t0"], 0)
    with pytest.raises(ValueError, match="eval_concurrency"):
        make(Backend(), eval_concurrency=0)


def test_call_with_retries_passes_contract_errors_through() -> None:
    calls = []

    def contract() -> None:
        calls.append(1)
        raise ContractError("caller bug")

    with pytest.raises(ContractError):
        call_with_retries(contract, what="x", retries=5, backoff=0.0)
    assert calls == [1]


def test_tasks_are_validated() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        as_tasks([Task("a", "x"), Task("a", "y")])
    with pytest.raises(ValueError, match="non-empty"):
        Task("", "x")
    with pytest.raises(TypeError, match="prompt must be a str"):
        Task("a", 3)  # type: ignore[arg-type]
    assert [t.id for t in as_tasks(["p", "q"])] == ["task-0", "task-1"]
    task = Task("a", "x", {"gold": 1})
    assert hash(task) == hash(Task("a", "x", {"gold": 1}))
    with pytest.raises(TypeError):
        task.meta["gold"] = 2  # type: ignore[index]
