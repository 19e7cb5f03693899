"""Conflict resolution, duplicates, 3-way merge of one file, and the fusion tournament."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from test_aggregator import NEEDS, POISON, World, only, world_builder

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts import FileTree, KeyedRules

BASE = "".join(f"line {i}\n" for i in range(10))
TWO = AggregatorConfig(batch_size=2)


@pytest.fixture
def worlds() -> Iterator[Callable[..., World]]:
    yield from world_builder()


def tree_world(worlds: Callable[..., World], **kw: object) -> World:
    files = {"skills/a.md": BASE, "skills/b.md": "b\n"}
    return worlds(NEEDS, strategy=FileTree(["skills"]), files=files, config=TWO, **kw)


def test_edits_of_different_files_are_fused(worlds: Callable[..., World]):
    w = tree_world(worlds)
    a = w.card({"skills/a.md": BASE + "cite sources\n"}, worker="w1", tasks=("t0",))
    b = w.card({"skills/b.md": "answer in French\n"}, worker="w2", tasks=("t3",))
    report = only(w.agg.step([a, b], round=1))
    assert report.category == "committed"
    assert report.fused
    assert report.reward_after == 1.0
    assert report.conflicts_dropped == 0
    # the default tournament tests the union first and scores its parts only if it loses
    assert "union first" in report.reason
    assert "=1.000" in report.reason
    assert report.diff is not None
    assert report.diff.author == "w1, w2"
    state = w.agg.head()[1]
    assert state["skills/a.md"].endswith("cite sources\n")
    assert state["skills/b.md"] == "answer in French\n"


def test_disjoint_hunks_of_one_file_are_merged_three_way(worlds: Callable[..., World]):
    w = tree_world(worlds)
    a = w.card({"skills/a.md": BASE.replace("line 1\n", "cite sources\n")}, worker="w1")
    b = w.card({"skills/a.md": BASE.replace("line 8\n", "answer in French\n")}, worker="w2")
    report = only(w.agg.step([a, b], round=1))
    assert report.category == "committed"
    assert report.fused
    assert report.conflicts_dropped == 0
    text = w.agg.head()[1]["skills/a.md"]
    expected = BASE.replace("line 1\n", "cite sources\n").replace(
        "line 8\n", "answer in French\n")
    assert text == expected


def test_overlapping_edits_are_a_conflict_resolved_by_score(worlds: Callable[..., World]):
    w = tree_world(worlds)
    weaker = w.card({"skills/a.md": BASE.replace("line 1\n", "cite sources\n")},
                    worker="weak", tasks=("t0",))
    stronger = w.card(
        {"skills/a.md": BASE.replace("line 1\n", "cite sources, answer in French\n")},
        worker="strong", tasks=("t3",))
    report = only(w.agg.step([weaker, stronger], round=1))
    assert report.category == "committed"
    assert report.conflicts_dropped == 1
    assert not report.fused
    assert "kept the latter, 1.000 vs 0.500 on 2 shared tasks" in report.reason
    assert "by weak contradicts" in report.reason
    assert "answer in French" in w.agg.head()[1]["skills/a.md"]


def test_identical_proposals_are_duplicates_not_conflicts(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=TWO)
    report = only(w.agg.step(
        [w.rule("cite sources", worker="w1"), w.rule("cite  sources", worker="w2")], 1))
    assert report.category == "committed"
    assert report.considered == 2
    assert report.conflicts_dropped == 0
    assert not report.fused
    assert report.diff is not None
    assert report.diff.author == "w1, w2"


def test_keyed_rules_contradiction_keeps_the_better_value(worlds: Callable[..., World]):
    w = worlds(NEEDS, strategy=KeyedRules(["sources", "style"]), config=TWO)
    good = w.card({"sources": "cite sources"}, worker="good", tasks=("t0",))
    bad = w.card({"sources": "never mind sources"}, worker="bad", tasks=("t1",))
    report = only(w.agg.step([bad, good], round=1))
    assert report.category == "committed"
    assert report.conflicts_dropped == 1
    assert w.agg.head()[1]["sources"] == "cite sources"


def test_tournament_keeps_an_individual_when_the_fusion_interferes(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS, config=TWO)
    helpful = w.rule("cite sources", worker="w1")
    harmful = w.rule(f"answer in French {POISON}", worker="w2")
    report = only(w.agg.step([helpful, harmful], round=1))
    assert report.category == "committed"
    assert not report.fused
    assert "fused" in report.reason
    assert "=0.000" in report.reason
    state = w.agg.head()[1]
    assert not any(POISON in v for v in state.values())


def test_fusion_can_be_switched_off(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(batch_size=2, fusion=False))
    report = only(w.agg.step([w.rule("cite sources"), w.rule("answer in French")], 1))
    assert report.category == "committed"
    assert not report.fused
    assert report.reward_after == 0.5


def test_fused_candidate_outside_the_trust_region_is_left_out(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(batch_size=2, trust_region_ops=1))
    report = only(w.agg.step([w.rule("cite sources"), w.rule("answer in French")], 1))
    assert report.category == "committed"
    assert not report.fused
    assert "fusion left out" in report.reason


def test_union_first_tournament_skips_the_parts_when_the_union_wins(
    worlds: Callable[..., World],
):
    full = worlds(NEEDS, config=AggregatorConfig(batch_size=2, tournament="full"))
    full_report = only(full.agg.step([full.rule("cite sources"), full.rule("answer in French")],
                                     1))
    quick = worlds(NEEDS, config=AggregatorConfig(batch_size=2, tournament="union-first"))
    quick_report = only(quick.agg.step(
        [quick.rule("cite sources"), quick.rule("answer in French")], 1))
    assert quick_report.category == full_report.category == "committed"
    assert quick_report.fused
    assert full_report.fused
    assert "union first" in quick_report.reason
    assert "parts not scored" in quick_report.reason
    assert quick_report.evaluations < full_report.evaluations
    assert quick.agg.head()[1] == full.agg.head()[1]


def test_union_first_falls_back_to_the_full_tournament_when_the_union_loses(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS, config=AggregatorConfig(batch_size=2, tournament="union-first"))
    report = only(w.agg.step(
        [w.rule("cite sources"), w.rule(f"answer in French {POISON}")], 1))
    assert report.category == "committed"
    assert not report.fused
    assert "union first" not in report.reason
    assert "tournament:" in report.reason


def test_an_accepted_union_drops_a_part_its_own_pairs_do_not_support(
    worlds: Callable[..., World],
):
    # A real fix (t0-t2 need "cite sources") fused with a useless note that claims t3.
    w = worlds(NEEDS, config=TWO)
    real = w.rule("cite sources", worker="w1", tasks=("t0",))
    note = w.rule("be thorough", worker="w2", tasks=("t3",))
    report = only(w.agg.step([real, note], round=1))
    assert report.category == "committed"
    assert "dropped 1 part(s) the union's own pairs do not support" in report.reason
    assert not report.fused
    assert report.diff is not None
    assert report.diff.author == "w1"
    text = "\n".join(w.agg.head()[1].values())
    assert "cite sources" in text
    assert "be thorough" not in text


def test_a_union_of_two_real_fixes_keeps_both(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=TWO)
    report = only(w.agg.step([w.rule("cite sources", worker="w1", tasks=("t0",)),
                              w.rule("answer in French", worker="w2", tasks=("t3",))], 1))
    assert report.category == "committed"
    assert report.fused
    assert "dropped" not in report.reason
    assert report.reward_after == 1.0


def test_unknown_tournament_is_refused():
    with pytest.raises(ValueError, match="tournament='best'"):
        AggregatorConfig(tournament="best")
