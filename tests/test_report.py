"""The run report: every promised key, per-test flips, train/holdout, the Markdown for people."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.callable import CallableVerifier
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.ledger.message import Evidence
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.report import REQUIRED_KEYS, build_report, render_markdown, task_rewards
from agentdescent_core.tasks import Task

A, B, C, D = (f"tests/test_bot.py::test_case[{x}]" for x in "abcd")
PIPE = "tests/test_bot.py::test_odd[x|y]"
GUARD = "tests/test_bot.py::test_frontmatter"
SPLIT = TaskSplit(train=(A, B, PIPE), held_out=(C, D), guards=(GUARD,), weights={A: 2.0})
BEFORE = {A: 0.0, B: 1.0, PIPE: 0.5, C: 0.0, D: 0.25, GUARD: 1.0}
AFTER = {A: 1.0, B: 0.0, PIPE: 0.5, C: 1.0, D: 0.4, GUARD: 1.0}


def result(**changes: object) -> EvolutionResult:
    history = [
        RoundInfo(1, 0.25, version=1, merged=1, reasons={"committed": 1, "frozen-violation": 1}),
        RoundInfo(2, None, version=1, reasons={"below-threshold": 2}),
        RoundInfo(3, 0.7, version=2, merged=1, reasons={"committed": 1}),
    ]
    fields: dict[str, object] = {
        "rendered": "", "state": {"skills/a.md": "x\n"}, "final_reward": 0.7,
        "initial_reward": 0.125, "history": history, "ledger_log": ["v1 abc first", "v2 def two"],
        "stop_reason": "rounds", "version": 2, "usage": {"calls": 5.0},
    }
    fields.update(changes)
    return EvolutionResult(**fields)  # type: ignore[arg-type]


def make(**changes: object) -> dict[str, Any]:
    return build_report(result(**changes), split=SPLIT, before=BEFORE, after=AFTER,
                        dev="d" * 40, stable="s" * 40, calls=5, cost_usd=None,
                        extra={"sandbox": "local"})


def test_the_report_has_every_promised_key_and_is_json() -> None:
    report = make()
    assert set(REQUIRED_KEYS) <= set(report)
    assert json.loads(json.dumps(report)) == report
    assert report["rounds"] == 3
    assert report["accepted"] == 2
    assert report["outcomes"] == {"below-threshold": 2, "committed": 2, "frozen-violation": 1}
    assert (report["stop_reason"], report["error"]) == ("rounds", None)
    assert (report["calls"], report["cost_usd"]) == (5, None)
    assert (report["dev"], report["stable"]) == ("d" * 40, "s" * 40)
    assert report["sandbox"] == "local"
    assert report["ledger_log"] == ["v1 abc first", "v2 def two"]
    assert [h["round"] for h in report["history"]] == [1, 2, 3]
    # guards are reported apart from the tasks
    assert [t["nodeid"] for t in report["tasks"]] == [A, B, PIPE, C, D]
    assert report["guards"] == [{"nodeid": GUARD, "before": 1.0, "after": 1.0, "change": "same"}]


def test_rewards_are_weighted_and_split_into_train_and_holdout() -> None:
    report = make()
    # all tasks, A weighing 2: before (0 + 1 + .5 + 0 + .25) / 6, after (2 + 0 + .5 + 1 + .4) / 6
    assert report["reward_before"] == pytest.approx(1.75 / 6)
    assert report["reward_after"] == pytest.approx(3.9 / 6)
    assert report["train"] == {"tasks": 3, "reward_before": pytest.approx(1.5 / 4),
                               "reward_after": pytest.approx(2.5 / 4)}
    assert report["holdout"] == {"tasks": 2, "reward_before": pytest.approx(0.125),
                                 "reward_after": pytest.approx(0.7)}
    # the engine's own acceptance reward is kept next to it
    assert (report["eval_reward_before"], report["eval_reward_after"]) == (0.125, 0.7)


def test_flips_name_the_tests_that_crossed_the_pass_line() -> None:
    report = make()
    rows = {t["nodeid"]: t for t in report["tasks"]}
    assert {n: r["change"] for n, r in rows.items()} == {
        A: "fail->pass", B: "pass->fail", PIPE: "same", C: "fail->pass", D: "improved"}
    assert rows[C]["holdout"] is True
    assert rows[A]["holdout"] is False
    assert rows[A]["weight"] == 2.0
    assert report["flips"] == {"fail->pass": [A, C], "pass->fail": [B]}


def test_missing_measurements_show_as_unknown_not_as_zero() -> None:
    report = build_report(result(initial_reward=None, final_reward=None, history=[]),
                          split=SPLIT, before={}, after={A: 1.0}, dev=None, stable=None,
                          calls=0, cost_usd=0.0)
    assert report["reward_before"] is None
    assert report["reward_after"] == 1.0  # only A was measured
    assert report["tasks"][0]["change"] == "unknown"
    text = render_markdown(report)
    assert "No reward was measured" in text
    assert "```mermaid" not in text


def test_extra_cannot_replace_the_reports_own_keys() -> None:
    with pytest.raises(ValueError, match="'reward_after'"):
        build_report(result(), split=SPLIT, before=BEFORE, after=AFTER, dev=None, stable=None,
                     calls=0, cost_usd=None, extra={"reward_after": 1.0})


def test_markdown_has_the_summary_the_flips_and_a_mermaid_chart() -> None:
    text = render_markdown(make(error="LedgerError: dev moved"))
    assert text.startswith("# agentdescent report\n")
    assert "Reward 0.292 → 0.650 (improved); stopped on **rounds**." in text
    assert "> **The run ended on an error:** LedgerError: dev moved" in text
    assert "| all tasks | 5 | 0.292 | 0.650 |" in text
    assert "| train | 3 | 0.375 | 0.625 |" in text
    assert "| holdout | 2 | 0.125 | 0.700 |" in text
    assert "| 3 | 2 | 5 | – | `dddddddddddd` | `ssssssssssss` |" in text
    assert "2 fail→pass, 1 pass→fail." in text
    assert f"Now failing: `{B}`." in text
    assert f"| `{A}` | train | 0.000 | 1.000 | fail→pass |" in text
    assert "| `tests/test_bot.py::test_odd[x\\|y]` | train |" in text  # a pipe cannot break a row
    assert f"| `{GUARD}` | 1.000 | 1.000 |" in text
    chart = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert chart is not None
    body = chart.group(1)
    assert "xychart-beta" in body
    assert "x-axis [0, 1, 2, 3]" in body
    # round 0 is the baseline; the unmeasured round 2 carries round 1's reward forward
    assert "line [0.125, 0.250, 0.250, 0.700]" in body
    assert "held-out reward" in body
    assert "| committed | 2 |" in text
    assert "| frozen-violation | 1 |" in text
    # every table row has as many cells as its header
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, re.M):
        rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in block.splitlines()]
        assert len({len(r) for r in rows}) == 1, block


def test_with_a_ledger_the_report_lists_versions_and_their_p_improvement() -> None:
    tree = FileTree(["skills"])
    with Ledger.scratch({"skills/a.md": "one\n"}, tree) as ledger:
        ledger.commit(Diff({"skills/a.md": "two\n"}, author="worker-0",
                           rationale="say two"),
                      evidence=Evidence(reward_before=0.2, reward_after=0.9, p_improvement=0.97))
        report = build_report(result(), split=SPLIT, before=BEFORE, after=AFTER,
                              dev=ledger.head("dev"), stable=None, calls=1, cost_usd=0.012,
                              ledger=ledger)
    [version] = report["versions"]
    assert version["version"] == 1
    assert version["author"] == "worker-0"
    assert (version["reward_before"], version["reward_after"], version["p_improvement"]) == (
        0.2, 0.9, 0.97)
    text = render_markdown(report)
    assert "## Accepted versions" in text
    assert re.search(r"\| v1 \| `[0-9a-f]{12}` \| 0\.970 \| 0\.200 \| 0\.900 \| .*say two", text)
    assert "| 0.0120 |" in text


def test_task_rewards_measures_every_task_and_guard_through_the_verifier() -> None:
    split = TaskSplit(train=("a", "b"), held_out=("c",), guards=("g",))
    flaky = iter([1.0, 0.0, 1.0, 0.0])

    def run(rendered: str, task: Task) -> float:
        if task.id == "b":
            return next(flaky)
        return 1.0 if task.id in rendered or task.id == "g" else 0.0

    verifier = CallableVerifier([Task(t, "") for t in "abcg"], run, lambda task, out: out,
                                lambda state: "".join(sorted(state.values())), split)
    try:
        state = {"skills/a.md": "a c"}
        assert task_rewards(verifier, state, repeats=2) == {"a": 1.0, "b": 0.5, "c": 1.0,
                                                             "g": 1.0}
        spent = verifier.evaluations
        assert task_rewards(verifier, state, repeats=2)["b"] == 0.5  # memoised, not re-run
        assert verifier.evaluations == spent
    finally:
        verifier.close()


def test_markdown_shows_the_model_section_only_when_a_model_proposed() -> None:
    assert "## Model" not in render_markdown(make())
    report = build_report(result(), split=SPLIT, before=BEFORE, after=AFTER, dev=None,
                          stable=None, calls=3, cost_usd=0.0123,
                          extra={"model": {"spec": "openai:test-model", "calls": 3,
                                           "input_tokens": 1200, "output_tokens": 300,
                                           "cost_usd": 0.0123, "cache_hits": 1,
                                           "replayed_input_tokens": 400,
                                           "replayed_output_tokens": 50,
                                           "refused": {"secret": 1, "invalid-proposal": 2}}})
    text = render_markdown(report)
    assert "## Model" in text
    assert "| model | requests sent | input tokens |" in text
    assert "| openai:test-model | 3 | 1200 | 300 | 0.0123 | 1 |" in text
    assert "The 1 replayed answer(s) were not sent; they carried 400 input / 50 output" in text
    assert "invalid-proposal ×2, secret ×1" in text


def test_the_chart_is_titled_for_the_tasks_its_reward_covers() -> None:
    # the pytest plugin measures acceptance on every task, held-out ones included
    split = TaskSplit(train=SPLIT.train, held_out=SPLIT.held_out, guards=SPLIT.guards,
                      eval_on_all=True)
    report = build_report(result(), split=split, before=BEFORE, after=AFTER, dev=None,
                          stable=None, calls=0, cost_usd=None)
    assert report["eval_on"] == "all"
    body = render_markdown(report)
    assert "Reward per round" in body
    assert "held-out" not in body.split("```mermaid", 1)[1]
    no_holdout = build_report(result(), split=TaskSplit(train=SPLIT.train), before=BEFORE,
                              after=AFTER, dev=None, stable=None, calls=0, cost_usd=None)
    assert "Train reward per round" in render_markdown(no_holdout)
