"""evolve(): the synchronous driver end to end, on real ledgers (scratch or tmp_path repos).

The workload is tests/rulebook.py: 12 tasks in 4 categories whose gold answers
need a category rule the initial artifact lacks.
"""

from __future__ import annotations

import glob
import itertools
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rulebook import CATS, HELD_OUT, Rulebook, rule

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.strategies import AppendRules, KeyedRules
from agentdescent_core.errors import ContractError
from agentdescent_core.evidence import MERGE_CATEGORIES
from agentdescent_core.loop import (
    DRIVER_REASONS,
    DifficultyWeighted,
    EvolutionResult,
    PipelineParallel,
    RoundInfo,
    TensorParallel,
    evolve,
)
from agentdescent_core.tasks import Task


def evolve_rules(book: Rulebook, **kw: Any) -> EvolutionResult:
    kw.setdefault("held_out_frac", HELD_OUT)
    return evolve(book.tasks, book.reward, run=book.run, propose=book.propose, **kw)


def test_end_to_end_append_rules_learns_every_rule_and_stops_at_the_target() -> None:
    book = Rulebook()
    seen: list[RoundInfo] = []
    result = evolve_rules(book, strategy=AppendRules(), rounds=12, n_workers=2,
                          target_reward=1.0, on_round=seen.append)
    assert result.error is None
    assert result.stop_reason == "target_reward"
    assert result.initial_reward == 0.0
    assert result.final_reward == 1.0
    assert all(info.reward is not None for info in result.history)
    rewards = [info.reward for info in result.history if info.reward is not None]
    assert rewards == sorted(rewards)
    assert rewards[-1] == 1.0
    assert len(rewards) > 1  # two workers need more than one round for four rules
    assert seen == result.history
    for category in CATS:
        assert rule(category) in result.rendered
    assert result.outcomes()["committed"] == result.version >= 2
    assert set(result.outcomes()) <= set(MERGE_CATEGORIES)
    assert result.ledger_log[0].startswith("v0 ")
    assert result.ledger_log[-1].startswith(f"v{result.version} ")
    # proposers only ever see train tasks
    assert book.proposed_on
    assert not set(book.proposed_on) & book.held_out_ids
    assert result.usage["calls"] == result.usage["run_calls"] + result.usage["propose_calls"]
    assert result.repo_path is None


def test_the_scratch_ledger_is_removed_on_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[str] = []
    evolve_rules(Rulebook(), rounds=1, n_workers=1,
                 on_round=lambda info: seen.extend(glob.glob(str(tmp_path / "agentdescent-*"))))
    assert any("agentdescent-scratch-" in path for path in seen)
    assert not glob.glob(str(tmp_path / "agentdescent-scratch-*"))


def test_concurrent_workers_and_difficulty_weighted_sampling_also_learn() -> None:
    book = Rulebook()
    result = evolve_rules(book, rounds=10, n_workers=4, max_concurrency=4,
                          task_sampler=DifficultyWeighted(), target_reward=1.0, seed=3)
    assert result.error is None
    assert result.stop_reason == "target_reward"
    assert result.final_reward == 1.0


def test_tensor_parallel_with_route_gives_each_worker_its_own_section() -> None:
    book = Rulebook()

    def keyed(rendered: str, task: Task, output: Any, score: float) -> dict[str, str]:
        category = str(task.meta["category"])
        return {category: rule(category)}

    result = evolve(
        book.tasks, book.reward, run=book.run, propose=keyed, held_out_frac=HELD_OUT,
        strategy=KeyedRules(categories=list(CATS)), n_workers=4, rounds=6, target_reward=1.0,
        parallel=TensorParallel(n_sections=4, route=lambda task: str(task.meta["category"])),
    )
    assert result.error is None
    assert result.final_reward == 1.0
    assert "section-violation" not in result.outcomes()
    assert result.state == {c: rule(c) for c in CATS}
    # one round: the four sections are disjoint, so the four edits fuse
    assert len(result.history) == 1
    assert result.history[0].fused == 1


def test_tensor_parallel_without_route_reports_section_violations() -> None:
    book = Rulebook()

    def keyed(rendered: str, task: Task, output: Any, score: float) -> dict[str, str]:
        category = str(task.meta["category"])
        return {category: rule(category)}

    with pytest.warns(RuntimeWarning, match="without route="):
        result = evolve(
            book.tasks, book.reward, run=book.run, propose=keyed, held_out_frac=HELD_OUT,
            strategy=KeyedRules(categories=list(CATS)), n_workers=2, rounds=3,
            parallel=TensorParallel(n_sections=2),
        )
    assert result.outcomes().get("section-violation", 0) >= 1
    assert all(rule(c) in result.rendered for c in result.state)


def test_tensor_parallel_refuses_strategies_without_a_fixed_key_space() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match="fixed key space"):
        evolve_rules(book, strategy=AppendRules(), parallel=TensorParallel(2))
    with pytest.raises(ContractError, match=r"route .* not a key"):
        evolve_rules(book, strategy=KeyedRules(categories=list(CATS)),
                     parallel=TensorParallel(2, route=lambda task: "nope"))
    assert book.run_calls == 0


def test_pipeline_parallel_is_refused_with_the_reason() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match="one artifact per stage"):
        evolve_rules(book, parallel=PipelineParallel(["plan", "act"]))
    assert book.run_calls == 0


def test_resume_through_repo_path_continues_from_the_committed_artifact(tmp_path: Path) -> None:
    repo = tmp_path / "runs" / "rules"
    first = evolve_rules(Rulebook(), rounds=1, n_workers=1, repo_path=repo)
    assert first.error is None
    assert first.version == 1
    assert first.final_reward == 0.25
    assert first.repo_path == str(repo)
    assert (repo / "HEAD").is_file()

    again = evolve_rules(Rulebook(), rounds=0, repo_path=repo)
    assert again.state == first.state
    assert again.initial_reward == 0.25

    book = Rulebook()
    last = evolve_rules(book, rounds=10, n_workers=1, repo_path=repo, target_reward=1.0)
    assert last.stop_reason == "target_reward"
    assert last.version == 4
    assert last.ledger_log[:2] == first.ledger_log[:2]
    assert rule("alpha") in last.rendered


# With threads interleaving, one task can draw four failing calls in a row; the worker
# then warns and backs off, which is the behaviour under test, not noise to report.
@pytest.mark.filterwarnings("ignore:.*failed after its retries:RuntimeWarning")
def test_transient_failures_one_call_in_three_the_run_finishes_and_learns() -> None:
    book = Rulebook(fail_every=3)
    result = evolve_rules(book, rounds=12, n_workers=2, target_reward=1.0)
    assert result.error is None
    assert result.stop_reason == "target_reward"
    assert result.final_reward == 1.0
    assert result.usage["retries"] > 0
    assert result.retired_workers == 0


def test_a_dead_backend_ends_fast_with_an_error_naming_it() -> None:
    book = Rulebook(dead=True)
    started = time.monotonic()
    with pytest.warns(RuntimeWarning) as caught:
        result = evolve_rules(book, rounds=50, n_workers=3, max_worker_errors=3)
    assert any("ended on an error" in str(w.message) for w in caught)
    # It gives up after max_worker_errors rounds, not after the 50 rounds asked for: 50
    # rounds of 3 workers trying each rollout 4 times would be 600 calls at least.  The
    # clock bound is generous so a loaded machine cannot fail it; it took 0.56 s here.
    assert book.run_calls < 150
    assert time.monotonic() - started < 5.0
    assert result.stop_reason == "error"
    assert result.error is not None
    assert result.error.startswith("BackendError: ")
    assert "ConnectionError: backend unreachable" in result.error
    assert result.retired_workers == 3
    assert len(result.history) == 3
    assert result.state == {}
    assert result.final_reward is None


def test_a_malformed_reward_raises_contract_error() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match=r"reward .*returned 47"):
        evolve(book.tasks, lambda task, out: 47, run=book.run, propose=book.propose, rounds=2,
               held_out_frac=HELD_OUT)
    with pytest.raises(ContractError, match="finite number"):
        evolve(book.tasks, lambda task, out: math.nan, run=book.run, propose=book.propose,
               held_out_frac=HELD_OUT)


def test_bad_actor_signatures_raise_before_the_first_rollout() -> None:
    book = Rulebook()

    def propose_without_score(rendered: str, task: Task, output: Any) -> str:
        return "x"

    with pytest.raises(ContractError, match=r"propose .*propose_without_score.*cannot be called "
                                            r"as propose\(rendered, task, output, score\)"):
        evolve(book.tasks, book.reward, run=book.run, propose=propose_without_score)
    with pytest.raises(ContractError, match="run"):
        evolve(book.tasks, book.reward, run=lambda task: "x",  # type: ignore[arg-type, misc]
               propose=book.propose)
    with pytest.raises(ContractError, match="reward"):
        evolve(book.tasks, lambda out: 1.0,  # type: ignore[arg-type, misc]
               run=book.run, propose=book.propose)
    with pytest.raises(ContractError, match=r"needs an actor.*propose= missing"):
        evolve(book.tasks, book.reward, run=book.run)
    assert book.run_calls == 0


def test_a_proposal_of_the_wrong_type_is_a_contract_error() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match="returned int"):
        evolve(book.tasks, book.reward, run=book.run, propose=lambda r, t, o, s: 5,
               held_out_frac=HELD_OUT)


def test_patience_stops_a_run_that_no_longer_improves() -> None:
    book = Rulebook(useless=True)
    result = evolve_rules(book, rounds=20, n_workers=2, patience=3)
    assert result.stop_reason == "patience"
    assert len(result.history) == 3
    assert result.outcomes() == {"below-threshold": 3}
    assert result.error is None


def test_the_max_calls_budget_stops_the_run() -> None:
    book = Rulebook()
    result = evolve_rules(book, rounds=20, n_workers=2, max_calls=60)
    assert result.stop_reason == "max_calls"
    assert result.usage["calls"] <= 60
    assert book.run_calls <= 60
    assert result.error is None


def test_an_on_round_exception_warns_and_the_run_continues() -> None:
    def explode(info: RoundInfo) -> None:
        raise KeyError("dashboard down")

    with pytest.warns(RuntimeWarning, match="on_round callback .*explode.*KeyError"):
        result = evolve_rules(Rulebook(), rounds=3, n_workers=1, on_round=explode)
    assert len(result.history) == 3
    assert result.error is None
    assert result.stop_reason == "rounds"


def test_a_failing_ledger_ends_the_run_and_keeps_the_artifact(tmp_path: Path) -> None:
    repo = tmp_path / "ledger"

    def hold_the_dev_lock(info: RoundInfo) -> None:
        if info.round == 1:
            (repo / "refs" / "heads" / "agentdescent" / "dev.lock").write_text("held")

    with pytest.warns(RuntimeWarning, match="ended on an error"):
        result = evolve_rules(Rulebook(), rounds=5, n_workers=1, repo_path=repo,
                              on_round=hold_the_dev_lock)
    assert result.stop_reason == "error"
    assert result.error is not None
    assert result.error.startswith("LedgerError: ")
    assert "dev.lock" in result.error
    assert result.state == {k: v for k, v in result.state.items()}
    assert rule("alpha") in result.rendered  # the version committed before the failure
    assert result.version == 1


def test_round_timeout_leaves_a_straggler_behind() -> None:
    book = Rulebook()
    release = threading.Event()

    def slow_run(rendered: str, task: Task) -> str:
        if task.id == "alpha-0" and not release.is_set():
            release.wait(5)
        return book.run(rendered, task)

    with pytest.warns(RuntimeWarning, match="round_timeout"):
        result = evolve(book.tasks, book.reward, run=slow_run, propose=book.propose,
                        held_out_frac=HELD_OUT, n_workers=2, rounds=3, round_timeout=0.3)
    release.set()
    assert result.error is None
    assert len(result.history) == 3


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    result = evolve_rules(Rulebook(), rounds=3, n_workers=2)
    path = tmp_path / "result.json"
    result.save(path)
    loaded = EvolutionResult.load(path)
    assert loaded == result
    assert loaded.outcomes() == result.outcomes()
    assert loaded.history[0].held_out_reward == result.history[0].reward
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a saved EvolutionResult"):
        EvolutionResult.load(tmp_path / "other.json")


def test_stop_reason_is_one_of_the_documented_values() -> None:
    result = evolve_rules(Rulebook(), rounds=1, n_workers=1)
    assert result.stop_reason == "rounds"
    assert result.stop_reason in DRIVER_REASONS


def test_async_only_arguments_warn_on_the_sync_path() -> None:
    with pytest.warns(RuntimeWarning, match="async_ratio= only applies"):
        evolve_rules(Rulebook(), rounds=1, n_workers=1, async_ratio=2)


def test_staleness_appears_with_refresh_interval() -> None:
    result = evolve_rules(Rulebook(), rounds=6, n_workers=2, refresh_interval=3,
                          staleness_policy="full", agg_config=AggregatorConfig())
    assert result.error is None
    assert result.final_reward is not None
    assert result.final_reward > 0.0


def test_a_versions_screen_base_runs_are_the_runs_of_its_own_acceptance() -> None:
    # What the acceptance bench counts as free: the base run 0 of every evaluation task
    # that the next candidates' screens pair against was made while the version was
    # itself the candidate.
    book = Rulebook()
    events: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def run(rendered: str, task: Task) -> str:
        with lock:
            events.append(("run", rendered, task.id))
        return book.run(rendered, task)

    def propose(rendered: str, task: Task, output: Any, score: float) -> str:
        with lock:
            events.append(("propose", rendered, task.id))
        return book.propose(rendered, task, output, score)

    result = evolve(book.tasks, book.reward, run=run, propose=propose,
                    strategy=AppendRules(), rounds=3, n_workers=1, held_out_frac=HELD_OUT)
    assert result.error is None
    assert result.outcomes()["committed"] >= 2
    judged = sorted(book.held_out_ids)  # the aggregator's tasks; proposers see the rest
    heads = [rendered for kind, rendered, _ in events if kind == "propose"]
    versions = list(dict.fromkeys(heads))  # v0, v1, ...: the heads the proposer was shown
    assert len(versions) >= 3
    for earlier, version in itertools.pairwise(versions):
        asked = next(i for i, e in enumerate(events) if e[0] == "propose" and e[1] == version)
        proposed_before = max(i for i, e in enumerate(events)
                              if e[0] == "propose" and e[1] == earlier)
        first_run = {task: min(i for i, e in enumerate(events)
                               if e[0] == "run" and e[1] == version and e[2] == task)
                     for task in judged}
        # every evaluation task's first run of the version: after it was proposed, before the
        # next candidate was asked for, i.e. during its own acceptance test
        assert all(proposed_before < i < asked for i in first_run.values()), first_run
        # and the next candidates' screens drew none of them again: only the task the
        # next rule fixes (a won pair, so paired deeper) needed fresh base runs
        rerun = {e[2] for e in events[asked:] if e[0] == "run" and e[1] == version
                 and e[2] in judged}
        assert len(rerun) <= 1, rerun
