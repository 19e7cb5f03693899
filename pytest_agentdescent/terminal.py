"""What ``pytest --evolve`` prints: the header, one line per round, the final summary.

Written through pytest's terminal reporter (so ``-q``, colours and captured
output behave as in any pytest run), and silent when the reporter is off
(``-p no:terminal``).  The functions that build lines are pure, so the layout
is tested without a run.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentdescent_core.artifacts.paths import is_inside
from agentdescent_core.loop.result import RoundInfo
from pytest_agentdescent.collect import IMPLICIT_HOLDOUT_MIN_TASKS, EvolvePlan

#: Per-test flips listed by name in the terminal; the rest are counted (report.md has all).
_SHOWN_FLIPS = 10


class Out:
    """A thin writer over the terminal reporter; does nothing without one."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    @property
    def _tr(self) -> Any:
        # looked up when writing: the reporter registers after this plugin is built
        return self._config.pluginmanager.get_plugin("terminalreporter")

    def sep(self, title: str, char: str = "=", **markup: bool) -> None:
        if self._tr is not None:
            self._tr.write_sep(char, title, **markup)

    def line(self, text: str = "", **markup: bool) -> None:
        if self._tr is not None:
            self._tr.write_line(text, **markup)

    def lines(self, texts: Sequence[str], **markup: bool) -> None:
        for text in texts:
            self.line(text, **markup)


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def _split_line(plan: EvolvePlan) -> str:
    held = len(plan.held_out)
    explicit = sum(1 for t in plan.tasks if t.explicit and t.holdout)
    how = []
    if held - explicit:
        how.append(f"{held - explicit} by node-id hash at {_pct(plan.holdout_fraction)}")
    if explicit:
        how.append(f"{explicit} by marker")
    detail = f" ({', '.join(how)})" if how else ""
    return f"holdout: {held} of {len(plan.tasks)} tasks{detail}"


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``"1 file"``, ``"2 files"``: a count with its noun in the right number."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _roots_line(plan: EvolvePlan, files: int | None) -> str:
    count = f" ({counted(files, 'file')})" if files is not None else ""
    return "artifact: " + ", ".join(plan.roots) + count


def header_lines(
    plan: EvolvePlan,
    *,
    files: int,
    sandbox: str,
    proposer: str,
    base: str,
    ledger: str,
) -> list[str]:
    """The run header: what evolves, on which tests, where it runs, who proposes, from where."""
    lines = [
        _roots_line(plan, files),
        f"tasks: {len(plan.tasks)} ({len(plan.train)} train, {len(plan.held_out)} holdout); "
        f"guards: {len(plan.guards)}"
        + (f"; {plan.unmarked} unmarked tests are not run" if plan.unmarked else ""),
        _split_line(plan),
        sandbox,
        f"proposer: {proposer}",
        f"base: {base}",
        ledger,
    ]
    if plan.layout.subdir:
        lines.append(f"repository: {plan.layout.root} (tests run in {plan.layout.subdir}/)")
    return lines


def collect_listing(plan: EvolvePlan) -> list[str]:
    """``--collect-only --evolve``: tasks, guards, the split and the frozen roots; no evaluation."""
    lines = [_roots_line(plan, None)]
    if not plan.tasks:
        lines.append("tasks: none (mark tests with @pytest.mark.evolve to make them tasks)")
    else:
        lines.append(f"tasks: {len(plan.tasks)} ({len(plan.train)} train, "
                     f"{len(plan.held_out)} holdout)")
    for task in plan.tasks:
        role = "holdout" if task.holdout else "train  "
        weight = f"  weight {task.weight:g}" if task.weight != 1.0 else ""
        lines.append(f"  {role} {task.nodeid}{weight}")
    lines.append(f"guards: {len(plan.guards)}")
    lines.extend(f"  guard   {nodeid}" for nodeid in plan.guards)
    lines.append(_split_line(plan))
    if len(plan.tasks) < IMPLICIT_HOLDOUT_MIN_TASKS and plan.holdout_fraction > 0:
        lines.append(f"  (suites under {IMPLICIT_HOLDOUT_MIN_TASKS} tasks get no implicit "
                     "holdout)")
    lines.append("frozen: everything outside " + ", ".join(plan.roots) + ", plus:")
    inside = [f for f in plan.test_files if is_inside(f, plan.roots)]
    lines.append("  conftest.py, pytest config and test modules anywhere, even inside the roots"
                 + (f" ({', '.join(inside)})" if inside else ""))
    for pattern in plan.frozen.patterns:
        lines.append(f"  {pattern}")
    return lines


def _reasons(info: RoundInfo) -> str:
    rejected = {k: v for k, v in sorted(info.reasons.items()) if k != "committed"}
    if info.merged:
        text = f"accepted v{info.version}"
        if rejected:
            text += " (also " + ", ".join(f"{k} x{v}" for k, v in rejected.items()) + ")"
        return text
    if rejected:
        return "rejected: " + ", ".join(f"{k} x{v}" for k, v in rejected.items())
    if info.worker_errors:
        return f"{info.worker_errors} worker error(s)"
    return "no proposal" if not info.proposals else "nothing merged"


def round_line(info: RoundInfo, *, total: int, previous: float | None, calls: int,
               elapsed: float, ran: str | None = None) -> str:
    """One progress line: round, reward (and its change), decision, proposer calls, time.

    The seconds are the round's own, as ``report.json`` has them (``seconds`` of
    each history entry); ``elapsed``, the time since the rounds started, follows
    as the total.  ``ran`` says how many tests the round's candidates re-ran
    ("ran 6 of 60 tests (reads)"), when it judged any.
    """
    width = len(str(total))
    reward = "reward   –  " if info.reward is None else f"reward {info.reward:.3f}"
    if info.reward is not None and previous is not None and abs(info.reward - previous) > 1e-12:
        reward += f" ({info.reward - previous:+.3f})"
    line = (f"round {info.round:>{width}}/{total}  {reward:<22} {_reasons(info):<40}  "
            f"calls {calls:<3} {info.seconds:6.1f}s (total {elapsed:.1f}s)")
    return line if ran is None else f"{line}  {ran}"


def _r(value: object) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{float(value):.3f}"


def summary_lines(report: Mapping[str, Any], *, report_path: str,
                  prefix: str = "agentdescent/") -> list[str]:
    """The final table: reward before -> after, train/holdout, flips, commits, stop reason."""
    before, after = report.get("reward_before"), report.get("reward_after")
    if before is None and after is None:
        lines = ["reward    not measured (nothing could be evaluated; the error below says why)"]
    else:
        lines = [f"reward    {_r(before)} -> {_r(after)}"]
    for name in ("train", "holdout"):
        part = report.get(name) or {}
        if part.get("tasks"):
            lines.append(f"  {name:<7} {_r(part.get('reward_before'))} -> "
                         f"{_r(part.get('reward_after'))}  ({part['tasks']} tasks)")
    flips = report.get("flips") or {}
    fixed = list(flips.get("fail->pass", []))
    broken = list(flips.get("pass->fail", []))
    lines.append(f"flips     {len(fixed)} fail->pass, {len(broken)} pass->fail")
    for sign, names in (("+", fixed), ("-", broken)):
        for nodeid in names[:_SHOWN_FLIPS]:
            lines.append(f"  {sign} {nodeid}")
        if len(names) > _SHOWN_FLIPS:
            lines.append(f"  {sign} ... and {len(names) - _SHOWN_FLIPS} more (see report.md)")
    outcomes = report.get("outcomes") or {}
    if outcomes:
        lines.append("outcomes  " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    version = report.get("version")
    if report.get("dry_run"):
        lines.append("dev       (dry run: scratch ledger, no ref of this repository changed)")
    else:
        lines.append(f"dev       {str(report.get('dev') or '–')[:12]}"
                     + (f" (v{version})" if version is not None else ""))
        lines.append(f"stable    {str(report.get('stable') or '–')[:12]}")
    lines.append(f"stopped   {report.get('stop_reason')} after {report.get('rounds')} round(s), "
                 f"{report.get('accepted', 0)} accepted, {report.get('calls', 0)} proposer "
                 "call(s)")
    model = report.get("model")
    if isinstance(model, Mapping):
        cost = model.get("cost_usd")
        spent = f"{cost:.4f} USD" if isinstance(cost, (int, float)) else "cost unknown (no price)"
        cached = (f" (and {model['cache_hits']} replayed, not sent)"
                  if model.get("cache_hits") else "")
        lines.append(f"model     {model.get('spec')}: {model.get('calls', 0)} call(s) sent"
                     f"{cached}, {model.get('input_tokens', 0)} input / "
                     f"{model.get('output_tokens', 0)} output tokens, {spent}")
    if report.get("error"):
        lines.append(f"error     {report['error']}")
    lines.append(f"report    {report_path}")
    lines.extend(_next_steps(report, prefix))
    return lines


def _next_steps(report: Mapping[str, Any], prefix: str) -> list[str]:
    """What the user can do with this run's result, as commands to type."""
    if report.get("error"):
        return []
    if report.get("dry_run"):
        if not report.get("accepted"):
            return []
        return ["next      run again without --evolve-dry-run to record the accepted "
                f"versions on {prefix}dev"]
    if not report.get("stable"):
        return []
    return [f"next      git diff HEAD {prefix}stable  (what a pull request would propose);",
            "          agentdescent review  (the evidence); agentdescent pr  (open or "
            "update it)"]


def evolved_diff(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """A unified diff of the artifact files, as ``git diff`` would show them."""
    lines: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        lines.extend(
            line.rstrip("\n")
            for line in difflib.unified_diff(
                (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
                fromfile=f"a/{path}" if old is not None else "/dev/null",
                tofile=f"b/{path}" if new is not None else "/dev/null",
            )
        )
    return lines
