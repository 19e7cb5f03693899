"""The evolve() API of seed 001 through the public surface (issue 18, item 4).

``oracle_budget=`` / ``cheap_eval_tasks=`` / ``verbose=`` / ``initial_state=``,
``AggregatorConfig(base_delta=...)`` for the ``beta`` policy, a ``plan()`` /
``WorkUnit`` parallel strategy, and the seed's ``StrictAggregator._tournament``
override.  The workload is tests/rulebook.py (12 tasks, 4 categories, each
needing its category's rule); every run is a real evolve() on a scratch or
tmp_path git ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from rulebook import CATS, HELD_OUT, Rulebook, rule

from agentdescent_core import (
    AggregatorConfig,
    ContractError,
    EvolutionResult,
    KeyedRules,
    WorkUnit,
    async_evolve,
    evolve,
)
from agentdescent_core.aggregator import Aggregator


def evolve_rules(book: Rulebook, **kw: Any) -> EvolutionResult:
    kw.setdefault("held_out_frac", HELD_OUT)
    return evolve(book.tasks, book.reward, run=book.run, propose=book.propose, **kw)


def messages(result: EvolutionResult) -> str:
    return "\n".join(m for info in result.history for m in info.messages)


# ---------------------------------------------------------------- oracle_budget, cheap_eval_tasks


def test_oracle_budget_caps_the_audits_of_an_l1_artifact() -> None:
    # blast_radius 0.6 is L1: every merge wants an audit, and the budget decides.
    spent = evolve_rules(Rulebook(), blast_radius=0.6, oracle_budget=0, rounds=2, n_workers=1)
    assert "the oracle budget is spent (0/0)" in messages(spent)
    assert "full evaluation at" not in messages(spent)

    one = evolve_rules(Rulebook(), blast_radius=0.6, oracle_budget=1, rounds=3, n_workers=1)
    text = messages(one)
    assert text.count("full evaluation at") == 1  # the one audit it could pay for
    assert "the oracle budget is spent (1/1)" in text


def test_cheap_eval_tasks_makes_the_cheap_check_score_that_many_eval_tasks() -> None:
    book = Rulebook()
    by_id = {t.id: t for t in book.tasks}
    # train starts with a beta task; the first eval task is about alpha
    train = ["beta-0"] + [t.id for t in book.tasks[:-4] if t.id != "beta-0"]
    order = [by_id[t] for t in train] + book.tasks[-4:]
    assert order[-4].id == "alpha-2"

    def run(cheap: int | None) -> str:
        fresh = Rulebook()
        result = evolve(order, fresh.reward, run=fresh.run, propose=fresh.propose,
                        held_out_frac=HELD_OUT, rounds=1, n_workers=1, cheap_eval_tasks=cheap)
        assert fresh.proposed_on[0] == "beta-0"
        return messages(result)

    # default: the cheap layer reads the card's own task (beta-0, fixed by the beta rule)
    assert "cheap verdict up" in run(None)
    # one eval task: alpha-2, which the beta rule does not fix
    assert "cheap verdict not up" in run(1)


def test_an_evolve_knob_that_contradicts_agg_config_is_refused() -> None:
    book = Rulebook()
    with pytest.raises(ValueError, match=r"oracle_budget=5 was given to evolve\(\) and "
                                         r"agg_config sets oracle_budget=10"):
        evolve_rules(book, oracle_budget=5, agg_config=AggregatorConfig(oracle_budget=10))
    with pytest.raises(ValueError, match="cheap_eval_tasks must be an integer >= 1"):
        evolve_rules(book, cheap_eval_tasks=0)
    assert book.run_calls == 0
    # the same value in both places is not a contradiction
    same = evolve_rules(Rulebook(), rounds=0, oracle_budget=10,
                        agg_config=AggregatorConfig(oracle_budget=10, repeats=1))
    assert same.error is None


# ---------------------------------------------------------------- verbose


def test_verbose_prints_a_line_per_round_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[int] = []
    result = evolve_rules(Rulebook(), rounds=2, n_workers=1, verbose=True,
                          on_round=lambda info: seen.append(info.round))
    err = capsys.readouterr().err.splitlines()
    assert seen == [1, 2]  # the caller's callback still runs
    assert err[0].startswith("evolve: round 1  reward ")
    assert err[1].startswith("evolve: round 2  reward ")
    assert "committed 1" in err[0]
    assert err[-1] == (f"evolve: done (rounds)  reward {result.initial_reward:.3f} -> "
                       f"{result.final_reward:.3f}  v{result.version}  error none")


def test_quiet_by_default_and_verbose_must_be_a_bool(capsys: pytest.CaptureFixture[str]) -> None:
    evolve_rules(Rulebook(), rounds=1, n_workers=1)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="verbose must be True or False, got 'yes'"):
        evolve_rules(Rulebook(), verbose="yes")


def test_async_evolve_takes_verbose_and_initial_state(capsys: pytest.CaptureFixture[str]) -> None:
    book = Rulebook()
    start = {c: rule(c) for c in CATS}
    result = async_evolve(book.tasks, book.reward, run=book.run, propose=book.propose,
                          held_out_frac=HELD_OUT, strategy=KeyedRules(categories=list(CATS)),
                          initial_state=start, verbose=True, target_reward=1.0,
                          max_seconds=60.0, n_workers=1)
    assert result.initial_reward == 1.0  # every category is covered from the start
    assert result.stop_reason == "target_reward"
    assert book.run_calls == 4  # the four held-out tasks were measured, nothing rolled out
    err = capsys.readouterr().err.splitlines()
    assert err == ["evolve: done (target_reward)  reward 1.000 -> 1.000  v0  error none"]


# ---------------------------------------------------------------- initial_state


def test_initial_state_is_where_the_run_starts() -> None:
    book = Rulebook()
    start = {"alpha": rule("alpha"), "beta": rule("beta")}
    result = evolve_rules(book, strategy=KeyedRules(categories=list(CATS)), initial_state=start,
                          rounds=0)
    assert result.state == start
    assert result.initial_reward == 0.5  # two of the four held-out categories are covered
    assert result.ledger_log[0].startswith("v0 ")


def test_initial_state_with_keys_the_strategy_lacks_is_refused_before_any_rollout() -> None:
    book = Rulebook()
    with pytest.raises(ValueError, match=r"not categories of KeyedRules"):
        evolve_rules(book, strategy=KeyedRules(categories=list(CATS)),
                     initial_state={"omega": "x"})
    with pytest.raises(ValueError, match=r"must be a \{key: text\} mapping"):
        evolve_rules(book, initial_state=["a rule"])
    with pytest.raises(ValueError, match="must map str keys to str text"):
        evolve_rules(book, initial_state={"k": 3})
    assert book.run_calls == 0


def test_initial_state_is_ignored_with_a_warning_on_resume(tmp_path: Path) -> None:
    repo = tmp_path / "run"
    strategy = KeyedRules(categories=list(CATS))
    first = evolve_rules(Rulebook(), strategy=strategy, repo_path=repo, rounds=0,
                         initial_state={"alpha": rule("alpha")})
    with pytest.warns(RuntimeWarning, match="initial_state= is ignored"):
        again = evolve_rules(Rulebook(), strategy=strategy, repo_path=repo, rounds=0,
                             initial_state={"delta": rule("delta")})
    assert again.state == first.state == {"alpha": rule("alpha")}


# ---------------------------------------------------------------- base_delta


def test_base_delta_sets_the_beta_policys_tolerance() -> None:
    def once(base_delta: float) -> EvolutionResult:
        config = AggregatorConfig(acceptance="beta", base_delta=base_delta, repeats=1,
                                  baseline_repeats=3)
        return evolve_rules(Rulebook(), agg_config=config, rounds=1, n_workers=1)

    # One rule fixes 1 of the 4 eval tasks: P(improvement) is about 0.93 on this evidence.
    loose = once(0.5)
    assert loose.version == 1
    assert "1-delta=0.500 (delta=0.5 at version 0)" in messages(loose)
    strict = once(0.05)
    assert strict.version == 0
    assert "1-delta=0.950 (delta=0.05 at version 0)" in messages(strict)
    assert strict.outcomes() == {"below-threshold": 1}


def test_base_delta_without_the_beta_policy_is_refused() -> None:
    with pytest.raises(ValueError, match=r"base_delta=0.5 tunes the 'beta' acceptance policy, "
                                         r"but acceptance='betting'; pass acceptance='beta'"):
        AggregatorConfig(base_delta=0.5)
    with pytest.raises(ValueError, match=r"base_delta must be a number in \(0, 1\]"):
        AggregatorConfig(acceptance="beta", base_delta=0.0)


# ---------------------------------------------------------------- plan() / WorkUnit


class Blocks:
    """The seed's block strategy: contiguous blocks of the train tasks, one per worker."""

    name = "block"

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, list[str]]] = []

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        keys = list(keys)
        self.calls.append((n_workers, round_index, keys))
        size = (len(keys) + n_workers - 1) // n_workers
        return [WorkUnit(worker=i, keys=keys[i * size:(i + 1) * size]) for i in range(n_workers)]


def test_a_plan_strategy_is_asked_every_round_with_the_train_tasks() -> None:
    book = Rulebook()
    blocks = Blocks()
    asked: list[tuple[str, str]] = []

    def propose(rendered: str, task: Any, output: Any, score: float, *, site: Any) -> str:
        asked.append((site.worker, task.id))
        return book.propose(rendered, task, output, score)

    propose.wants_site = True  # type: ignore[attr-defined]
    result = evolve(book.tasks, book.reward, run=book.run, propose=propose,
                    held_out_frac=HELD_OUT, parallel=blocks, n_workers=2, rounds=3)
    train = [t.id for t in book.tasks[:-4]]
    assert [c[:2] for c in blocks.calls] == [(2, 1), (2, 2), (2, 3)]
    assert all(c[2] == train for c in blocks.calls)
    assert result.error is None
    # each worker proposed only on its own block: the first and the second half of train
    assert {w for w, _ in asked} == {"worker-0", "worker-1"}
    for worker, task in asked:
        assert task in (train[:4] if worker == "worker-0" else train[4:])


class OneCategoryPerRound:
    """Round r: worker 0 works on category CATS[r - 1] only; the other workers idle."""

    name = "rotate"

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        category = CATS[(round_index - 1) % len(CATS)]
        return [WorkUnit(worker=0, keys=[k for k in keys if k.startswith(category)])]


def test_a_plan_decides_what_each_round_works_on() -> None:
    book = Rulebook()
    result = evolve_rules(book, parallel=OneCategoryPerRound(), n_workers=3, rounds=4,
                          target_reward=1.0)
    assert [task.split("-")[0] for task in book.proposed_on] == list(CATS)
    assert result.final_reward == 1.0
    assert result.stop_reason == "target_reward"


class BadPlan:
    name = "bad"

    def __init__(self, units: list[Any]) -> None:
        self.units = units

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[Any]:
        return self.units


@pytest.mark.parametrize(("units", "match"), [
    ([WorkUnit(worker=5, keys=())], r"planned worker 5; workers are 0 \.\. 1"),
    ([WorkUnit(worker=0), WorkUnit(worker=0)], "planned worker 0 twice"),
    ([WorkUnit(worker=0, keys=["nope"])], r"\['nope'\], which are not train task ids"),
    ([("worker", 0)], "each item must be a WorkUnit"),
])
def test_a_bad_plan_is_a_contract_error_before_any_rollout(units: list[Any], match: str) -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match=match):
        evolve_rules(book, parallel=BadPlan(units), n_workers=2)
    assert book.run_calls == 0


def test_an_object_that_is_no_parallel_mode_is_refused() -> None:
    with pytest.raises(ContractError, match=r"is not a parallel mode.*plan\(n_workers"):
        evolve_rules(Rulebook(), parallel=object())


# ---------------------------------------------------------------- the _tournament hook


class StrictAggregator(Aggregator):
    """The seed's example: never fuse, test only the first candidate."""

    def _tournament(self, artifact: Mapping[str, str], diffs: list[Any]) -> Any:
        return super()._tournament(artifact, [diffs[0]] if diffs else diffs)


def strict_factory(ledger: Any, verifier: Any, audit: Any, config: Any, policy: Any) -> Any:
    return StrictAggregator(ledger, verifier, audit, config, staleness_policy=policy)


def test_the_seeds_strict_aggregator_overrides_the_tournament() -> None:
    fused = evolve_rules(Rulebook(), n_workers=4, rounds=1)
    assert fused.history[0].fused == 1
    assert fused.version == 1
    assert len(fused.state) == 4  # the union of four rules

    strict = evolve_rules(Rulebook(), n_workers=4, rounds=1, aggregator_factory=strict_factory)
    assert strict.error is None
    assert strict.history[0].fused == 0
    assert len(strict.state) == 1  # only the first worker's rule was tested and committed


class DecidesNothing(Aggregator):
    def _decide(self, winner: Any) -> Any:  # a merge stage: the engine never calls it here
        raise AssertionError("never called")


class ReturnsJunk(Aggregator):
    def _tournament(self, artifact: Mapping[str, str], diffs: list[Any]) -> Any:
        return "the first one"


def test_an_override_the_engine_would_not_call_is_a_contract_error() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match=r"DecidesNothing\._decide overrides nothing.*"
                                            r"supported hook is _tournament"):
        evolve_rules(book, aggregator_factory=lambda s, v, a, c, p: DecidesNothing(s, v, a, c, p))
    assert book.run_calls == 0


def test_a_tournament_override_must_return_a_candidate() -> None:
    with pytest.raises(ContractError, match=r"ReturnsJunk\._tournament returned str"):
        evolve_rules(Rulebook(), n_workers=2, rounds=1,
                     aggregator_factory=lambda s, v, a, c, p: ReturnsJunk(s, v, a, c, p))
