"""Duration estimates, longest-first rounds and ``result.stragglers``, through the public API.

The workload: four train tasks, one of which sleeps 0.3 s while the others
return at once, and one held-out task; ``propose`` never proposes, so every
round is just the workers' rollouts.  ``run`` records which task each worker
rollout started on (evaluations run on the verifier's pool threads, named
``agentdescent-eval-*``, and are left out), and ``on_round`` marks the round
boundaries in the same list, so the tests read the order units started in —
never a wall-clock threshold.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentdescent_core.loop import (
    DurationEstimator,
    EvolutionResult,
    RoundInfo,
    Straggler,
    async_evolve,
    evolve,
)
from agentdescent_core.tasks import Task

pytestmark = pytest.mark.filterwarnings("ignore:only 1 held-out task")

SLOW = "slow"
TRAIN = ("fast-0", "fast-1", SLOW, "fast-2")  # the slow one is not first in worker order


class Recorder:
    """``run`` that sleeps on the slow task and notes the order worker rollouts start in."""

    def __init__(self, slow_seconds: float = 0.3) -> None:
        self.slow_seconds = slow_seconds
        self.lock = threading.Lock()
        self.events: list[str] = []
        self.tasks = [Task(t, f"question {t}") for t in (*TRAIN, "held-0")]

    def run(self, rendered: str, task: Task) -> str:
        if not threading.current_thread().name.startswith("agentdescent-eval"):
            with self.lock:
                self.events.append(task.id)
        if task.id == SLOW:
            time.sleep(self.slow_seconds)
        return "wrong"

    def reward(self, task: Task, output: Any) -> float:
        return 0.0

    def propose(self, rendered: str, task: Task, output: Any, score: float) -> None:
        return None

    def mark(self, info: RoundInfo) -> None:
        with self.lock:
            self.events.append(f"end of round {info.round}")

    def rounds(self) -> list[list[str]]:
        """The worker rollouts of each round, in the order they started."""
        out: list[list[str]] = [[]]
        for event in self.events:
            if event.startswith("end of round"):
                out.append([])
            else:
                out[-1].append(event)
        return out[:-1]


def evolve_recorded(book: Recorder, **kw: Any) -> EvolutionResult:
    kw.setdefault("rounds", 3)
    return evolve(book.tasks, book.reward, run=book.run, propose=book.propose,
                  n_workers=len(TRAIN), held_out_frac=0.2, on_round=book.mark, **kw)


def test_once_its_duration_is_known_the_slow_task_starts_first_and_was_a_straggler() -> None:
    book = Recorder()
    result = evolve_recorded(book, duration_estimator=DurationEstimator())
    assert result.error is None
    rounds = book.rounds()
    assert len(rounds) == 3
    assert rounds[0] == list(TRAIN)  # nothing known yet: worker order
    assert rounds[1][0] == SLOW
    assert rounds[2][0] == SLOW
    assert sorted(rounds[1]) == sorted(TRAIN)  # reordered, not dropped
    # round 1: the slow task ran after two fast ones, so it was predicted their
    # (median) duration and overran it
    first_round = [s for s in result.stragglers if s.round == 1]
    assert SLOW in {s.task_id for s in first_round}
    slow = next(s for s in first_round if s.task_id == SLOW)
    assert slow.worker == "worker-2"
    assert slow.seconds >= 0.3 > slow.predicted
    assert isinstance(slow, Straggler)


def test_threaded_rounds_start_their_units_in_the_planned_order() -> None:
    book = Recorder()
    result = evolve_recorded(book, duration_estimator=DurationEstimator(),
                             max_concurrency=1, round_timeout=60.0)
    assert result.error is None
    rounds = book.rounds()
    assert rounds[0] == list(TRAIN)
    assert [r[0] for r in rounds[1:]] == [SLOW, SLOW]
    assert SLOW in {s.task_id for s in result.stragglers}


def test_without_an_estimator_units_keep_worker_order_and_nothing_is_a_straggler() -> None:
    book = Recorder(slow_seconds=0.05)
    result = evolve_recorded(book, rounds=2)
    assert book.rounds() == [list(TRAIN), list(TRAIN)]
    assert result.stragglers == []


def test_an_estimator_passed_again_starts_the_next_run_with_known_durations() -> None:
    estimator = DurationEstimator(straggler_factor=10.0)  # only a 3 s sleep would overrun
    evolve_recorded(Recorder(), rounds=1, duration_estimator=estimator)
    assert estimator.estimate(SLOW) is not None
    book = Recorder()
    result = evolve_recorded(book, rounds=1, duration_estimator=estimator)
    assert book.rounds()[0][0] == SLOW
    assert SLOW not in {s.task_id for s in result.stragglers}  # it was expected to be slow


def test_async_evolve_records_stragglers() -> None:
    book = Recorder()
    result = async_evolve(book.tasks, book.reward, run=book.run, propose=book.propose,
                          n_workers=1, held_out_frac=0.2, max_iters=1, max_seconds=30.0,
                          duration_estimator=DurationEstimator())
    assert result.error is None
    assert result.asynchronous
    # one worker walks its shard in order: the slow task is judged against the
    # two fast ones before it
    assert book.events[:3] == ["fast-0", "fast-1", SLOW]
    assert SLOW in {s.task_id for s in result.stragglers}


def test_evolve_asynchronous_forwards_the_estimator() -> None:
    book = Recorder()
    with pytest.warns(RuntimeWarning, match="rounds="):
        result = evolve(book.tasks, book.reward, run=book.run, propose=book.propose,
                        n_workers=1, held_out_frac=0.2, asynchronous=True, rounds=1,
                        max_seconds=30.0, duration_estimator=DurationEstimator())
    assert SLOW in {s.task_id for s in result.stragglers}


def test_stragglers_survive_save_and_load(tmp_path: Path) -> None:
    book = Recorder()
    result = evolve_recorded(book, rounds=1, duration_estimator=DurationEstimator())
    assert result.stragglers
    path = tmp_path / "result.json"
    result.save(path)
    loaded = EvolutionResult.load(path)
    assert loaded.stragglers == result.stragglers
    assert loaded == result


def test_the_estimate_is_an_exponentially_weighted_mean_and_unseen_tasks_rank_first() -> None:
    estimator = DurationEstimator(alpha=0.5)
    assert estimator.estimate("a") is None
    assert estimator.predict("a") is None  # nothing seen: no prediction, never a straggler
    assert not estimator.overran(None, 100.0)
    estimator.observe("a", 1.0)
    estimator.observe("a", 3.0)
    assert estimator.estimate("a") == pytest.approx(2.0)
    estimator.observe("b", 4.0)
    estimator.observe("c", 10.0)
    assert estimator.predict("unseen") == pytest.approx(4.0)  # the median of 2, 4, 10
    assert estimator.longest_first(["a", None, "c", "new", "b"]) == [3, 2, 4, 0, 1]
    assert estimator.overran(1.0, 2.5)
    assert not estimator.overran(1.0, 1.9)  # within twice its prediction
    assert not DurationEstimator(min_overrun=1.0).overran(0.01, 0.5)  # too small to matter


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"alpha": 0}, "alpha"),
    ({"alpha": 1.5}, "alpha"),
    ({"straggler_factor": 1.0}, "straggler_factor"),
    ({"min_overrun": -1}, "min_overrun"),
    ({"alpha": True}, "alpha"),
])
def test_bad_estimator_settings_are_refused_by_name(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DurationEstimator(**kwargs)


def test_a_duration_estimator_of_the_wrong_type_is_refused_before_any_rollout() -> None:
    book = Recorder()
    with pytest.raises(TypeError, match=r"duration_estimator= must be a DurationEstimator"):
        evolve_recorded(book, duration_estimator={"slow": 0.3})
    assert book.events == []
