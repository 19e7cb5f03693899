"""The driver's parts on their own: samplers, parallel modes, the budget, the split, results."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from agentdescent_core.errors import ContractError, RefusalError
from agentdescent_core.loop import (
    Budget,
    BudgetExhausted,
    DataParallel,
    DifficultyWeighted,
    EvolutionResult,
    RoundRobin,
    TensorParallel,
    evolve,
)
from agentdescent_core.loop.setup import split_tasks
from agentdescent_core.tasks import Task

TASKS = [Task(f"t{i}", f"q{i}", {"cat": "ab"[i % 2]}) for i in range(10)]


def test_round_robin_cycles_each_workers_shard_and_skips_excluded() -> None:
    sampler = RoundRobin()
    rng = random.Random(0)
    shard = ["a", "b", "c"]
    assert [sampler.next_task(0, shard, rng) for _ in range(4)] == ["a", "b", "c", "a"]
    assert sampler.next_task(1, shard, rng) == "a"  # its own cursor
    assert sampler.next_task(0, shard, rng, exclude={"b", "c"}) == "a"
    assert sampler.next_task(0, shard, rng, exclude=set(shard)) is None
    assert sampler.next_task(0, [], rng) is None


def test_difficulty_weighted_prefers_tasks_near_a_half_pass_rate() -> None:
    sampler = DifficultyWeighted(c=0.0)
    for _ in range(20):
        sampler.observe("solved", 1.0)
        sampler.observe("hopeless", 0.0)
    for value in (0.0, 1.0) * 10:
        sampler.observe("learnable", value)
    rng = random.Random(1)
    picks = [sampler.next_task(0, ["solved", "hopeless", "learnable"], rng) for _ in range(300)]
    assert picks.count("learnable") > 0.9 * len(picks)
    assert sampler.weight("never-seen") == 1.0
    explorer = DifficultyWeighted(c=1.0)
    explorer.observe("seen", 1.0)
    assert explorer.weight("unseen") > explorer.weight("seen")
    with pytest.raises(ValueError, match="c >= 0"):
        DifficultyWeighted(c=-1)


def test_data_parallel_strides_tasks_and_shares_them_when_workers_outnumber_tasks() -> None:
    shards = DataParallel().assign(TASKS[:5], 2, None)
    assert [s.tasks for s in shards] == [("t0", "t2", "t4"), ("t1", "t3")]
    assert all(s.allowed_keys is None for s in shards)
    many = DataParallel().assign(TASKS[:2], 3, None)
    assert [s.tasks for s in many] == [("t0",), ("t1",), ("t0",)]


def test_tensor_parallel_sections_are_disjoint_and_routing_follows_them() -> None:
    mode = TensorParallel(n_sections=2, route=lambda task: str(task.meta["cat"]))
    assert mode.sections(["a", "b", "c"]) == [("a", "b"), ("c",)]
    shards = mode.assign(TASKS, 2, ["a", "b"])
    assert shards[0].allowed_keys == frozenset({"a"})
    assert shards[1].allowed_keys == frozenset({"b"})
    assert set(shards[0].tasks) == {t.id for t in TASKS if t.meta["cat"] == "a"}
    assert not set(shards[0].tasks) & set(shards[1].tasks)
    with pytest.raises(ValueError, match="n_sections"):
        TensorParallel(0)


def test_budget_counts_calls_and_refuses_past_the_cap() -> None:
    budget = Budget(max_calls=2)
    budget.charge_run()
    budget.charge_propose()
    assert budget.exhausted
    with pytest.raises(BudgetExhausted) as info:
        budget.charge_run()
    assert info.value.reason == "max_calls"
    assert budget.usage()["calls"] == 2
    assert not Budget().expired()
    with pytest.raises(ValueError, match="max_calls"):
        Budget(max_calls=0)


def test_the_held_out_split_is_positional_unless_shuffled() -> None:
    split = split_tasks(TASKS, 0.4, shuffle=False, seed=0)
    assert split.held_out == ("t6", "t7", "t8", "t9")
    assert split.eval_tasks == split.held_out
    shuffled = split_tasks(TASKS, 0.4, shuffle=True, seed=7)
    assert shuffled == split_tasks(TASKS, 0.4, shuffle=True, seed=7)
    assert shuffled.held_out != split.held_out
    assert split_tasks(TASKS, 0.0, shuffle=False, seed=0).eval_tasks == tuple(t.id for t in TASKS)
    with pytest.warns(RuntimeWarning, match="only 1 held-out"):
        split_tasks(TASKS, 0.1, shuffle=False, seed=0)
    with pytest.raises(ValueError, match="held_out_frac"):
        split_tasks(TASKS, 1.0, shuffle=False, seed=0)


class Slow:
    """A workload whose rule is never learned; every run call takes 20 ms."""

    def run(self, rendered: str, task: Task) -> str:
        time.sleep(0.02)
        return "no"

    def reward(self, task: Task, output: Any) -> float:
        return 0.0

    def propose(self, rendered: str, task: Task, output: Any, score: float) -> str:
        return "Try harder."


def test_max_seconds_stops_the_synchronous_loop() -> None:
    slow = Slow()
    result = evolve(TASKS, slow.reward, run=slow.run, propose=slow.propose, rounds=1000,
                    n_workers=1, held_out_frac=0.4, max_seconds=0.5, eval_concurrency=8)
    assert result.stop_reason == "max_seconds"
    assert result.error is None
    # how many rounds fit in 0.5 s depends on the machine (none, under load): only that
    # the budget, not the round count, ended the run
    assert len(result.history) < 1000


def test_an_l1_blast_radius_runs_through_the_audit_gate() -> None:
    tasks = [Task(f"t{i}", "q", {"gold": "yes"}) for i in range(8)]
    result = evolve(
        tasks, lambda task, out: 1.0 if out == "yes" else 0.0,
        run=lambda rendered, task: "yes" if "say yes" in rendered else "no",
        propose=lambda rendered, task, out, score: "Always say yes.",
        blast_radius=0.6, held_out_frac=0.5, rounds=3, n_workers=1, target_reward=1.0,
    )
    assert result.stop_reason == "target_reward"
    assert "committed" in result.outcomes()


def test_a_factory_that_returns_no_aggregator_is_a_contract_error() -> None:
    slow = Slow()
    with pytest.raises(ContractError, match="AggregatorProtocol"):
        evolve(TASKS, slow.reward, run=slow.run, propose=slow.propose, held_out_frac=0.4,
               aggregator_factory=lambda *args: object())


def test_reserved_artifact_ids_are_refused_up_front() -> None:
    slow = Slow()
    with pytest.raises(RefusalError, match="'oracle' is reserved"):
        evolve(TASKS, slow.reward, run=slow.run, propose=slow.propose, held_out_frac=0.4,
               artifact_id="oracle")


def test_a_result_without_history_still_saves(tmp_path: Path) -> None:
    result = EvolutionResult(rendered="x", state={"k": "x"}, final_reward=None,
                             stop_reason="error", error="LedgerError: disk full")
    result.save(tmp_path / "r.json")
    assert EvolutionResult.load(tmp_path / "r.json") == result
