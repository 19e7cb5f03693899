"""The pull request body (sections, safety, size limit) and the GitHub Actions files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentdescent_core.github import (
    PR_MARKER,
    GitHubError,
    append_step_summary,
    render_pr_body,
    set_outputs,
)

REVIEW = "agentdescent review --base 1111111111111111111111111111111111111111 --head 2222222"


def report(tasks: int = 3) -> dict[str, Any]:
    rows = [{"nodeid": f"tests/test_agent.py::test_case[{i}]", "before": 0.0,
             "after": 1.0 if i % 2 == 0 else 0.0, "holdout": i == 0,
             "change": "fail->pass" if i % 2 == 0 else "same"} for i in range(tasks)]
    return {
        "reward_before": 0.2, "reward_after": 0.6,
        "train": {"tasks": tasks - 1, "reward_before": 0.3, "reward_after": 0.7},
        "holdout": {"tasks": 1, "reward_before": 0.0, "reward_after": 1.0},
        "flips": {"fail->pass": [r["nodeid"] for r in rows if r["change"] == "fail->pass"],
                  "pass->fail": ["tests/test_agent.py::test_polite"]},
        "tasks": rows, "calls": 12, "cost_usd": 0.5,
        "model": {"input_tokens": 10_000, "output_tokens": 2_500},
    }


def versions(count: int = 2,
             rationale: str = "Because the tests asked for it.") -> list[dict[str, Any]]:
    return [{"version": v, "sha": f"{v:040x}", "subject": f"agentdescent: v{v} change {v}",
             "rationale": f"{rationale} ({v})", "author": f"worker-{v}",
             "reward_before": 0.2 + 0.1 * (v - 1), "reward_after": 0.3 + 0.1 * (v - 1),
             "p_improvement": 0.9 + 0.01 * v} for v in range(1, count + 1)]


DIFFSTAT = [("skills/greet/SKILL.md", 4, 1), ("skills/greet/examples.md", 10, 0)]


def test_body_has_every_section():
    body = render_pr_body(report(), ledger_versions=versions(), diffstat=DIFFSTAT,
                          review_command=REVIEW)
    assert body.startswith(PR_MARKER)
    assert body.count(PR_MARKER) == 1
    assert "| reward, all tasks | 0.200 | 0.600 |" in body
    assert "| reward, train (2 tasks) | 0.300 | 0.700 |" in body
    assert "| reward, held-out (1 tasks) | 0.000 | 1.000 |" in body
    # P(improvement) of the newest version, fixed / broken, calls, tokens, cost.
    assert "| 0.920 | 2 | 1 | 12 | 10,000 in / 2,500 out | 0.5000 |" in body
    assert "**Now failing:** `tests/test_agent.py::test_polite`" in body
    assert "| `tests/test_agent.py::test_case[0]` | holdout | 0.000 | 1.000 | fail→pass |" in body
    assert "```mermaid" in body
    assert 'x-axis ["base", "v1", "v2"]' in body
    assert "line [0.200, 0.300, 0.400]" in body
    assert "2 files, +14 −1." in body
    assert "| `skills/greet/SKILL.md` | +4 | −1 |" in body
    assert "### v2 `000000000000`" in body
    assert "Because the tests asked for it. (2)" in body
    assert "reward 0.300 → 0.400, P(improvement) 0.920, proposed by `worker-2`" in body
    assert f"```bash\n{REVIEW}\n```" in body
    assert "cut" not in body


def test_body_without_a_report_uses_the_versions():
    body = render_pr_body(None, ledger_versions=versions(3), diffstat=DIFFSTAT,
                          review_command=REVIEW)
    assert "reward 0.200 → 0.500 (improved)" in body
    assert "No per-test results were given" in body
    assert REVIEW in body


def test_model_text_cannot_ping_people_or_forge_the_marker():
    sneaky = f"@octocat please merge\n{PR_MARKER}\n```\n# Heading injection"
    body = render_pr_body(report(), ledger_versions=versions(1, rationale=sneaky),
                          diffstat=DIFFSTAT, review_command=REVIEW)
    assert body.count(PR_MARKER) == 1
    # The rationale sits inside a fence longer than any backtick run it contains.
    match = re.search(r"(`{4,})text\n@octocat please merge\n.*?\n```\n# Heading injection "
                      r"\(1\)\n\1\n", body, re.S)
    assert match is not None


@pytest.mark.parametrize("limit", [20_000, 6_000, 1_500])
def test_long_bodies_are_cut_to_the_limit_with_a_notice(limit: int):
    long_versions = versions(60, rationale="A long explanation. " * 80)
    many_files = [(f"skills/s{i}/SKILL.md", i, 1) for i in range(400)]
    body = render_pr_body(report(tasks=500), ledger_versions=long_versions,
                          diffstat=many_files, review_command=REVIEW, limit=limit)
    assert len(body) <= limit
    assert body.startswith(PR_MARKER)
    assert REVIEW in body
    assert "| reward, all tasks | 0.200 | 0.600 |" in body
    if limit >= 6_000:  # room for the summary: the lineage loses entries, with a notice
        assert re.search(r"\*\*\d+ more versions cut\*\* to keep this pull request within",
                         body)
    else:  # not even that: the sections are cut short, the review command kept
        assert "**Cut here** to stay within GitHub's size limit" in body
    full = render_pr_body(report(tasks=500), ledger_versions=long_versions,
                          diffstat=many_files, review_command=REVIEW, limit=10_000_000)
    assert len(full) > limit
    assert "cut**" not in full


def test_the_lineage_is_cut_before_the_tests_and_files():
    long_versions = versions(40, rationale="Why. " * 200)
    full = render_pr_body(report(), ledger_versions=long_versions, diffstat=DIFFSTAT,
                          review_command=REVIEW, limit=10_000_000)
    body = render_pr_body(report(), ledger_versions=long_versions, diffstat=DIFFSTAT,
                          review_command=REVIEW, limit=len(full) - 2_000)
    assert "more versions cut" in body
    assert "more tests cut" not in body
    assert "more files cut" not in body
    assert "### v1 " in body  # the oldest versions stay, the newest are cut


def test_a_tiny_limit_still_keeps_the_marker():
    body = render_pr_body(report(tasks=50), ledger_versions=versions(10), diffstat=DIFFSTAT,
                          review_command=REVIEW, limit=400)
    assert len(body) <= 400
    assert body.startswith(PR_MARKER)
    assert "Cut here" in body


# ---------------------------------------------------------------------- actions files


def read_outputs(path: Path) -> dict[str, str]:
    """Parse a GITHUB_OUTPUT file the way the runner does."""
    values: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            values[name] = "\n".join(lines[i + 1:end])
            i = end + 1
        elif line:
            name, value = line.split("=", 1)
            values[name] = value
            i += 1
        else:
            i += 1
    return values


def test_outputs_are_written_multi_line_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    forged = "line one\nghadelimiter_x\ninjected=1"
    assert set_outputs({"pr-number": 7, "pr-url": None, "created": True, "body": forged,
                        "data": {"a": 1}})
    assert set_outputs({"pr-operation": "updated"})
    assert read_outputs(out) == {
        "pr-number": "7", "pr-url": "", "created": "true", "body": forged,
        "data": '{"a": 1}', "pr-operation": "updated",
    }


def test_outputs_and_summary_do_nothing_outside_actions(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert set_outputs({"a": 1}) is False
    assert append_step_summary("# hi") is False


def test_bad_output_names_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    with pytest.raises(GitHubError, match="not a valid step output name"):
        set_outputs({"a=b\nc": 1})


def test_step_summary_is_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert append_step_summary("## agentdescent\n\nreward 0.2 → 0.6")
    assert summary.read_text(encoding="utf-8") == (
        "# earlier step\n## agentdescent\n\nreward 0.2 → 0.6\n")


def test_a_session_that_found_nothing_new_does_not_hide_what_the_branch_gained():
    # a scheduled session resumed at the last version and accepted nothing
    quiet = report() | {"reward_before": 0.4, "reward_after": 0.4,
                         "flips": {"fail->pass": [], "pass->fail": []}}
    body = render_pr_body(quiet, ledger_versions=versions(3), diffstat=DIFFSTAT,
                          review_command=REVIEW)
    assert "3 accepted versions since the base; reward 0.200 → 0.500 (improved)" in body
    assert "The session that last updated this pull request" in body
    assert "| reward, all tasks | 0.400 | 0.400 |" in body
    assert "## Per-test flips (last session)" in body


def test_the_body_says_how_candidates_were_selected_and_names_any_miss():
    selected = {**report(), "selection": {"mode": "reads", "tests": 60, "candidates": 6,
                                          "candidate_runs": 92, "confirm_runs": 54,
                                          "misses": []}}
    body = render_pr_body(selected, ledger_versions=versions(), diffstat=DIFFSTAT,
                          review_command=REVIEW)
    assert ("Tests re-run by read: 92 test run(s) judged 6 candidate(s) of 60 tests; 54 kept "
            "result(s) ran again before a promotion, no selection miss.") in body
    missed = {**selected, "selection": {**selected["selection"],
                                        "misses": ["tests/test_a.py::test_x"]}}
    body = render_pr_body(missed, ledger_versions=versions(), diffstat=DIFFSTAT,
                          review_command=REVIEW)
    assert "**1 selection miss(es)**, now always run: `tests/test_a.py::test_x`." in body
    everything = {**selected, "selection": {**selected["selection"], "mode": "all"}}
    assert "re-run by read" not in render_pr_body(everything, ledger_versions=versions(),
                                                  diffstat=DIFFSTAT, review_command=REVIEW)
