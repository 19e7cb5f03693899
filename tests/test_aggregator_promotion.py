"""dev -> stable promotion: after K quiet, regression-free rounds, and at a clean finish."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from test_aggregator import NEEDS, World, only, world_builder

from agentdescent_core.aggregator import AggregatorConfig

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
