"""Each staleness policy inside the merge pipeline, on a ledger whose head moved."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from test_aggregator import NEEDS, World, only, world_builder

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts import FileTree
from agentdescent_core.artifacts.strategies import rule_key
from agentdescent_core.errors import ContractError
from agentdescent_core.staleness import Full, Guarded, Reflective


@pytest.fixture
def worlds() -> Iterator[Callable[..., World]]:
    yield from world_builder()


def advance(w: World, n: int) -> None:
    for i in range(n):
        w.commit_directly({rule_key(f"note {i}"): f"note {i}"})


def test_guarded_drops_a_card_beyond_alpha_as_all_stale(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Guarded())
    advance(w, 2)
    report = only(w.agg.step([w.rule("cite sources", base=0)], round=1))
    assert report.category == "all-stale"
    assert report.discarded_stale == 1
    assert "eta=2, alpha=1" in report.reason
    assert "guarded" in report.reason
    assert w.verifier.evaluations == 0


def test_guarded_rebases_within_alpha_and_l1_tolerates_more(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Guarded(), blast_radius=0.5,
               config=AggregatorConfig(oracle_budget=0))
    advance(w, 3)
    report = only(w.agg.step([w.rule("cite sources", base=0, tasks=("t0",))], round=1))
    assert report.category == "committed"
    assert "eta=3, alpha=5" in report.reason
    assert "rebased, gain holds (0.000 -> 1.000 on 1 task(s))" in report.reason
    state = w.agg.head()[1]
    assert "note 2" in state.values()
    assert "cite sources" in state.values()


def test_contract_breaking_cards_are_never_rebased(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Guarded())
    advance(w, 1)
    report = only(w.agg.step([w.rule("cite sources", base=0, contract_breaking=True)], 1))
    assert report.category == "all-stale"
    assert "alpha=0" in report.reason


def test_full_accepts_stale_cards_without_reverifying(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Full())
    advance(w, 4)
    report = only(w.agg.step([w.rule("cite sources", base=0, tasks=("t0",))], round=1))
    assert report.category == "committed"
    assert report.discarded_stale == 0
    assert "rebased" not in report.reason
    assert "eta=4" not in report.reason


def test_reflective_rebases_whatever_the_lag(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Reflective())
    advance(w, 6)
    report = only(w.agg.step([w.rule("answer in French", base=0, tasks=("t4",))], round=1))
    assert report.category == "committed"
    assert "eta=6, alpha=1" in report.reason
    assert "gain holds" in report.reason


def test_reflective_drops_a_rebase_whose_gain_no_longer_holds(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Reflective())
    # Another worker's version already taught the rule (in other words).
    w.commit_directly({rule_key("Please cite sources."): "Please cite sources."})
    report = only(w.agg.step([w.rule("cite sources!", base=0, tasks=("t0", "t1"))], 1))
    assert report.category == "all-stale"
    assert report.discarded_stale == 1
    assert "dropped: gain gone on rebase (1.000 -> 1.000 on 2 task(s))" in report.reason


def test_stale_survivors_and_discards_are_counted_in_one_merge(worlds: Callable[..., World]):
    w = worlds(NEEDS, policy=Guarded(), config=AggregatorConfig(batch_size=2))
    advance(w, 3)
    fresh = w.rule("cite sources")
    old = w.rule("answer in French", base=0)
    report = only(w.agg.step([fresh, old], round=1))
    assert report.category == "committed"
    assert report.considered == 2
    assert report.discarded_stale == 1


def test_rebase_of_a_file_merges_with_what_the_head_changed(worlds: Callable[..., World]):
    base = "".join(f"line {i}\n" for i in range(10))
    w = worlds(NEEDS, policy=Guarded(), strategy=FileTree(["skills"]),
               files={"skills/s.md": base})
    w.commit_directly({"skills/s.md": base.replace("line 8", "line 8 edited by head")})
    stale = w.card({"skills/s.md": base.replace("line 1", "cite sources")}, base=0,
                   tasks=("t0",))
    report = only(w.agg.step([stale], round=1))
    assert report.category == "committed"
    text = w.agg.head()[1]["skills/s.md"]
    assert "line 8 edited by head" in text
    assert "cite sources" in text


def test_rebase_clash_on_the_same_lines_is_dropped(worlds: Callable[..., World]):
    base = "".join(f"line {i}\n" for i in range(10))
    w = worlds(NEEDS, policy=Guarded(), strategy=FileTree(["skills"]),
               files={"skills/s.md": base})
    w.commit_directly({"skills/s.md": base.replace("line 1", "head's line 1")})
    stale = w.card({"skills/s.md": base.replace("line 1", "cite sources")}, base=0)
    report = only(w.agg.step([stale], round=1))
    assert report.category == "all-stale"
    assert "clash with the head's" in report.reason


class ByName:
    """A custom policy answering with plain strings, as a user's might."""

    name = "by-name"

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> str:
        return self.answer if eta else "accept"


def test_custom_policies_may_answer_with_strings_but_not_nonsense(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS, policy=ByName("discard"))
    advance(w, 1)
    assert only(w.agg.step([w.rule("cite sources", base=0)], 1)).category == "all-stale"
    w.agg.staleness_policy = ByName("maybe")  # type: ignore[assignment]
    with pytest.raises(ContractError, match="'maybe'"):
        w.agg.step([w.rule("cite sources", base=0)], 2)
