"""dev -> stable promotion: after K quiet, regression-free rounds, and at a clean finish."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from test_aggregator import NEEDS, RuleVerifier, World, only, world_builder

from agentdescent_core.aggregator import Aggregator, AggregatorConfig, ArtifactStore
from agentdescent_core.artifacts import Diff, FileTree
from agentdescent_core.codec import codec_for
from agentdescent_core.errors import RefusalError
from agentdescent_core.evaluation.protocol import Selective
from agentdescent_core.evidence import EvidenceCard
from agentdescent_core.ledger import Ledger

K2 = AggregatorConfig(promote_after=2)


@pytest.fixture
def worlds() -> Iterator[Callable[..., World]]:
    yield from world_builder()


def test_promotes_after_k_rounds_without_change(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=K2)
    stable0 = w.ledger.head("stable")
    assert only(w.agg.step([w.rule("cite sources")], round=1)).committed
    w.agg.step([], round=2)
    assert w.ledger.head("stable") == stable0
    w.agg.step([], round=3)
    assert w.ledger.head("stable") == w.ledger.head("dev")
    assert [p.version for p in w.agg.promotions] == [1]
    w.agg.step([], round=4)  # nothing new to promote
    assert len(w.agg.promotions) == 1


def test_a_commit_restarts_the_clock(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=K2)
    w.agg.step([w.rule("cite sources")], round=1)
    w.agg.step([], round=2)
    assert only(w.agg.step([w.rule("answer in French")], round=3)).committed
    w.agg.step([], round=4)
    assert w.agg.promotions == []
    w.agg.step([], round=5)
    assert [p.version for p in w.agg.promotions] == [2]


def test_a_move_of_dev_by_someone_else_also_restarts_it(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=K2)
    w.agg.step([], round=1)
    w.commit_directly({"x": "a note"})
    w.agg.step([], round=2)
    w.agg.step([], round=3)
    assert w.agg.promotions == []
    w.agg.step([], round=4)
    assert [p.version for p in w.agg.promotions] == [1]


def test_a_guard_regression_on_dev_blocks_promotion(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=K2, guards={"g_polite": "rude"})
    w.agg.step([], round=1)
    w.commit_directly({"x": "be rude"})
    for round in range(2, 6):
        w.agg.step([], round=round)
    assert w.agg.promotions == []
    assert w.agg.finish(clean=True) is None
    assert w.ledger.head("stable") != w.ledger.head("dev")


def test_clean_finish_promotes_at_once_and_an_unclean_one_does_not(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS, config=AggregatorConfig(promote_after=10))
    w.agg.step([w.rule("cite sources")], round=1)
    assert w.agg.finish(clean=False) is None
    result = w.agg.finish(clean=True)
    assert result is not None
    assert result.moved
    assert result.version == 1
    assert w.ledger.head("stable") == w.ledger.head("dev")
    assert w.agg.finish(clean=True) is None  # already promoted


class ConfirmingVerifier(RuleVerifier):
    """A rule verifier that selects by reads: confirming a head may rule it out.

    Like the sandboxed verifier, whose kept results run for real before a
    promotion and can then find the head writing a frozen file.
    """

    def __init__(self, needs: dict[str, str], *, ruled_out: str) -> None:
        super().__init__(needs)
        self.ruled_out = ruled_out
        self.confirmed: list[dict[str, str]] = []

    def select_tests(self, base: Mapping[str, str], candidate: Mapping[str, str],
                     task_ids: Sequence[str]) -> Any:
        return _AllSelected(tuple(task_ids))

    def confirm(self, state: Mapping[str, str]) -> list[str]:
        self.confirmed.append(dict(state))
        return []

    def disqualification(self, state: Mapping[str, str]) -> RefusalError | None:
        confirmed = any(dict(state) == seen for seen in self.confirmed)
        if confirmed and any(self.ruled_out in text for text in state.values()):
            return RefusalError("frozen-violation", "frozen-modified",
                                "a kept test, run for real, wrote tests/test_x.py (frozen)")
        return None


@dataclass(frozen=True)
class _AllSelected:
    selected: tuple[str, ...]
    touched: tuple[str, ...] = ()


@pytest.mark.parametrize(("rule", "promoted"), [("cite sources", True),
                                                ("cite sources, then WRITE", False)])
def test_kept_results_run_before_promotion_and_a_head_they_rule_out_stays_on_dev(
        rule: str, promoted: bool) -> None:
    ledger = Ledger.scratch({"artifact/rules.txt": "base\n"}, FileTree(["artifact"]))
    try:
        strategy = FileTree(["artifact"])
        store = ArtifactStore(ledger, strategy, codec_for(strategy))
        verifier = ConfirmingVerifier(NEEDS, ruled_out="WRITE")
        assert isinstance(verifier, Selective)
        agg = Aggregator(store, verifier, None, AggregatorConfig(promote_after=10))
        card = EvidenceCard(diff=Diff({"artifact/rules.txt": f"{rule}\n"}, target="artifact"),
                            worker="w0", round=0, tasks=tuple(NEEDS))
        assert only(agg.step([card], round=1)).committed
        result = agg.finish(clean=True)
        assert verifier.confirmed == [{"artifact/rules.txt": f"{rule}\n"}]
        assert (result is not None and result.moved) is promoted
        assert (ledger.head("stable") == ledger.head("dev")) is promoted
    finally:
        ledger.close()
