"""The evidence of one run, as data (``report.json``) and for people (``report.md``).

A reviewer deciding whether to merge an evolved artifact needs the same few
things every time: did the reward go up, on which tests (and did any that
used to pass now fail), on held-out tests the proposer never saw, how many
candidates were refused and why, and which commits hold the result.
:func:`build_report` gathers them from the run's
:class:`~agentdescent_core.loop.result.EvolutionResult` and the per-test
rewards the caller measured before and after; :func:`render_markdown` turns
that dict into the Markdown that becomes ``report.md`` (and later a pull
request's body).  The report is plain JSON data so scripts and the
``pytest_evolve_report`` hook can read it without importing the engine.

``reward_before`` / ``reward_after`` are the weighted mean over every task
(train and held-out, not guards) — the number a plain ``pytest`` run prints
as "evolve: N tasks, reward R".  The engine's own acceptance reward is kept as
``eval_reward_before`` / ``eval_reward_after`` and is what the per-round chart
shows; ``eval_on`` says which tasks it covers: ``all`` (the pytest plugin:
train and held-out together), ``holdout`` (the held-out tasks, when there are
any) or ``train``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentdescent_core.evaluation.protocol import TaskSplit, Verifier
from agentdescent_core.loop.result import EvolutionResult
from agentdescent_core.markdown import (
    cell as _cell,
    code as _code,
    line_chart,
    num as _num,
    number_or_none as _reward_of,
    sha as _sha,
    table as _table,
)
from agentdescent_core.redact import redact, redact_data
from agentdescent_core.stats.samples import PASS_THRESHOLD

if TYPE_CHECKING:
    from agentdescent_core.ledger.ledger import Ledger

REPORT_FORMAT = "agentdescent-report/1"

#: The keys DESIGN.md promises in every ``report.json``.
REQUIRED_KEYS: tuple[str, ...] = (
    "reward_before", "reward_after", "rounds", "accepted", "stop_reason", "error", "outcomes",
    "tasks", "calls", "cost_usd", "dev", "stable",
)

_FIXED = "fail->pass"
_BROKEN = "pass->fail"


# ---------------------------------------------------------------- building

def _weighted(rewards: Mapping[str, float], nodeids: Iterable[str], split: TaskSplit
              ) -> float | None:
    """Weighted mean of the tasks that have a reward, None when none has."""
    pairs = [(split.weight(n), rewards[n]) for n in nodeids if rewards.get(n) is not None]
    total = math.fsum(w for w, _ in pairs)
    if not pairs or total <= 0:
        return None
    return math.fsum(w * r for w, r in pairs) / total


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None:
        return "unknown"
    was, now = before >= PASS_THRESHOLD, after >= PASS_THRESHOLD
    if was != now:
        return _FIXED if now else _BROKEN
    if after > before:
        return "improved"
    if after < before:
        return "regressed"
    return "same"


def _clean(rewards: Mapping[str, object]) -> dict[str, float]:
    out: dict[str, float] = {}
    for nodeid, value in rewards.items():
        number = _reward_of(value)
        if number is not None:
            out[str(nodeid)] = number
    return out


def _versions(ledger: Ledger) -> list[dict[str, Any]]:
    """The dev versions since the base, with the evidence their commits carry."""
    rows: list[dict[str, Any]] = []
    for record in ledger.history("dev"):
        if record.version == 0:
            continue
        rows.append({
            "version": record.version,
            "sha": record.sha,
            "subject": record.subject,
            "author": record.author,
            "reward_before": record.reward_before,
            "reward_after": record.reward_after,
            "p_improvement": record.p_improvement,
        })
    return rows


def task_rewards(verifier: Verifier, state: Mapping[str, str], *, repeats: int
                 ) -> dict[str, float]:
    """Mean reward of every task and guard of ``verifier.split`` at ``state``.

    What ``before`` / ``after`` of :func:`build_report` expect.  Goes through
    the verifier, so repeats it already measured (the baseline, the accepted
    candidates) cost nothing; a disqualified state scores 0.0 everywhere.
    """
    tasks = verifier.split.all_tasks
    if not tasks:
        return {}
    samples = verifier.evaluate(state, tasks, repeats)
    return {nodeid: samples.mean(nodeid) for nodeid in tasks}


def build_report(
    result: EvolutionResult,
    *,
    split: TaskSplit,
    before: Mapping[str, float],
    after: Mapping[str, float],
    dev: str | None,
    stable: str | None,
    calls: int,
    cost_usd: float | None,
    extra: Mapping[str, object] | None = None,
    ledger: Ledger | None = None,
) -> dict[str, Any]:
    """The run's evidence as a JSON-ready dict (every key of :data:`REQUIRED_KEYS` and more).

    ``before`` / ``after``: mean reward per nodeid at the base and at the
    final dev head (tasks missing from them show as None).  ``dev`` /
    ``stable``: the commits the ledger branches point at (None for a dry run
    whose scratch ledger is gone).  ``calls`` / ``cost_usd``: proposer calls
    and their cost when known.  ``extra`` adds keys (the caller's context:
    sandbox, proposer, base commit...) and may not replace one of the report's
    own.  ``ledger``, when given, adds ``versions``: each accepted dev version
    with its P(improvement) and rewards from its commit's evidence.
    """
    b, a = _clean(before), _clean(after)
    tasks = [*split.train, *(t for t in split.held_out if t not in split.train)]
    held = set(split.held_out)
    rows: list[dict[str, Any]] = []
    for nodeid in tasks:
        rows.append({
            "nodeid": nodeid,
            "before": b.get(nodeid),
            "after": a.get(nodeid),
            "holdout": nodeid in held,
            "weight": split.weight(nodeid),
            "change": _change(b.get(nodeid), a.get(nodeid)),
        })
    guards = [{"nodeid": g, "before": b.get(g), "after": a.get(g),
               "change": _change(b.get(g), a.get(g))}
              for g in split.guards if g not in set(tasks)]
    fixed = [row["nodeid"] for row in rows if row["change"] == _FIXED]
    broken = [row["nodeid"] for row in rows if row["change"] == _BROKEN]
    history = [info.to_json() for info in result.history]
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "reward_before": _weighted(b, tasks, split),
        "reward_after": _weighted(a, tasks, split),
        "train": {
            "tasks": len(split.train),
            "reward_before": _weighted(b, split.train, split),
            "reward_after": _weighted(a, split.train, split),
        },
        "holdout": {
            "tasks": len(split.held_out),
            "reward_before": _weighted(b, split.held_out, split),
            "reward_after": _weighted(a, split.held_out, split),
        },
        "eval_reward_before": result.initial_reward,
        "eval_reward_after": result.final_reward,
        "eval_on": "all" if split.eval_on_all else "holdout" if split.held_out else "train",
        "rounds": result.rounds,
        "accepted": sum(info.merged for info in result.history),
        "version": result.version,
        "stop_reason": result.stop_reason,
        "error": result.error,
        "outcomes": result.outcomes(),
        "tasks": rows,
        "guards": guards,
        "flips": {_FIXED: fixed, _BROKEN: broken},
        "history": history,
        "ledger_log": list(result.ledger_log),
        "calls": int(calls),
        "cost_usd": None if cost_usd is None else float(cost_usd),
        "dev": dev,
        "stable": stable,
        "usage": dict(result.usage),
    }
    if ledger is not None:
        report["versions"] = _versions(ledger)
    for key, value in (extra or {}).items():
        if key in report:
            raise ValueError(
                f"extra key {key!r} would replace the report's own {key!r}; pick another name"
            )
        report[key] = value
    return redact_data(report)  # no secret value reaches report.json, report.md or a PR


# ---------------------------------------------------------------- rendering

def _chart(report: Mapping[str, Any]) -> list[str]:
    """A Mermaid xychart of the acceptance reward after each round (round 0: the baseline)."""
    last = _reward_of(report.get("eval_reward_before"))
    history = report.get("history") or []
    values: list[float | None] = [last]
    for info in history:
        value = _reward_of(info.get("reward") if isinstance(info, Mapping) else None)
        last = value if value is not None else last  # an unmeasured round carries forward
        values.append(last)
    if all(v is None for v in values):
        return ["No reward was measured, so there is nothing to chart."]
    first = next(v for v in values if v is not None)
    points = [first if v is None else v for v in values]
    label = {"all": "reward", "holdout": "held-out reward", "train": "train reward"}.get(
        str(report.get("eval_on")), "reward")
    return line_chart(f"{label.capitalize()} per round",
                      [str(i) for i in range(len(points))], points, label)


def render_markdown(report: Mapping[str, Any]) -> str:
    """``report.md``: summary table, per-test results and flips, reward chart, outcomes.

    Takes the dict :func:`build_report` made (or one read back from
    ``report.json``).
    """
    lines: list[str] = ["# agentdescent report", ""]
    before, after = report.get("reward_before"), report.get("reward_after")
    low, high = _reward_of(before), _reward_of(after)
    verdict = "improved" if low is not None and high is not None and high > low \
        else "not improved"
    lines.append(f"Reward {_num(before)} → {_num(after)} ({verdict}); "
                 f"stopped on **{_cell(report.get('stop_reason', '?'))}**.")
    if report.get("error"):
        lines += ["", f"> **The run ended on an error:** {_cell(report['error'])}"]
    lines.append("")
    summary = [["all tasks", str(len(report.get("tasks") or [])), _num(before), _num(after)]]
    for name in ("train", "holdout"):
        part = report.get(name) or {}
        summary.append([name, str(part.get("tasks", 0)), _num(part.get("reward_before")),
                        _num(part.get("reward_after"))])
    lines += _table(["", "tasks", "reward before", "reward after"], summary)
    lines.append("")
    cost = report.get("cost_usd")
    lines += _table(
        ["rounds", "accepted", "proposer calls", "cost (USD)", "dev", "stable"],
        [[str(report.get("rounds", 0)), str(report.get("accepted", 0)),
          str(report.get("calls", 0)), "–" if cost is None else f"{float(cost):.4f}",
          _sha(report.get("dev")), _sha(report.get("stable"))]],
    )
    flips = report.get("flips") or {}
    fixed, broken = list(flips.get(_FIXED, [])), list(flips.get(_BROKEN, []))
    lines += ["", "## Per-test results", "",
              f"{len(fixed)} fail→pass, {len(broken)} pass→fail."]
    if broken:
        lines.append("Now failing: " + ", ".join(_code(n) for n in broken) + ".")
    lines.append("")
    task_rows = [[_code(t.get("nodeid")), "holdout" if t.get("holdout") else "train",
                  _num(t.get("before")), _num(t.get("after")),
                  _cell(str(t.get("change", "")).replace("->", "→"))]
                 for t in report.get("tasks") or []]
    lines += _table(["test", "set", "before", "after", "change"], task_rows)
    guards = report.get("guards") or []
    if guards:
        lines += ["", "Guards (must keep passing):", ""]
        lines += _table(["guard", "before", "after"],
                        [[_code(g.get("nodeid")), _num(g.get("before")), _num(g.get("after"))]
                         for g in guards])
    lines += ["", "## Reward per round", ""]
    lines += _chart(report)
    outcomes = report.get("outcomes") or {}
    lines += ["", "## Merge decisions", ""]
    if outcomes:
        lines += _table(["outcome", "count"],
                        [[_cell(k), str(v)] for k, v in sorted(outcomes.items())])
    else:
        lines.append("No candidate reached the aggregator.")
    model = report.get("model")
    if isinstance(model, Mapping):
        lines += ["", "## Model", ""]
        cost = model.get("cost_usd")
        lines += _table(
            ["model", "requests sent", "input tokens", "output tokens", "cost (USD)",
             "replayed"],
            [[_cell(model.get("spec", "?")), str(model.get("calls", 0)),
              str(model.get("input_tokens", 0)), str(model.get("output_tokens", 0)),
              "–" if cost is None else f"{float(cost):.4f}", str(model.get("cache_hits", 0))]],
        )
        lines += ["", "Requests, tokens and cost are what went over the wire (retries and "
                      "answers that were not valid included)."]
        if model.get("cache_hits"):
            lines[-1] += (f" The {model['cache_hits']} replayed answer(s) were not sent; "
                          f"they carried {model.get('replayed_input_tokens', 0)} input / "
                          f"{model.get('replayed_output_tokens', 0)} output tokens as "
                          "recorded, which the budgets count.")
        refused = model.get("refused") or {}
        if refused:
            lines += ["", "Answers refused before evaluation: " + ", ".join(
                f"{_cell(k)} ×{v}" for k, v in sorted(refused.items())) + "."]
    versions = report.get("versions") or []
    if versions:
        lines += ["", "## Accepted versions", ""]
        lines += _table(
            ["version", "commit", "P(improvement)", "reward before", "reward after", "subject"],
            [[f"v{v.get('version')}", _sha(v.get("sha")), _num(v.get("p_improvement")),
              _num(v.get("reward_before")), _num(v.get("reward_after")),
              _cell(v.get("subject", ""))] for v in versions],
        )
    lines += _selection(report)
    lines += _durability(report)
    return redact("\n".join(lines) + "\n")


def _selection(report: Mapping[str, Any]) -> list[str]:
    """Which tests each candidate re-ran and why (read-based selection), when present."""
    block = report.get("selection")
    if not isinstance(block, Mapping) or not block.get("candidates"):
        return []
    tests, candidates = int(block.get("tests") or 0), int(block.get("candidates") or 0)
    runs = int(block.get("candidate_runs") or 0)
    lines = ["", "## Tests re-run per candidate", "",
             f"Selection `{_cell(block.get('mode'))}`: {runs} test run(s) on {candidates} "
             f"candidate(s) of {tests} test(s)."]
    misses = list(block.get("misses") or [])
    if misses:
        lines.append(f"**{len(misses)} selection miss(es)** (a kept result a fresh run "
                     "contradicted; these tests now always run): "
                     + ", ".join(_code(m) for m in misses) + ".")
    lines.append("")
    rows = []
    for entry in block.get("per_candidate") or []:
        why = entry.get("why") or {}
        reasons: dict[str, int] = {}
        for reason in why.values():
            reasons[str(reason)] = reasons.get(str(reason), 0) + 1
        touched = list(entry.get("touched") or [])
        rows.append([str(entry.get("round", "")), _code(entry.get("candidate", "")),
                     _cell(", ".join(touched[:3]) + (" …" if len(touched) > 3 else "")),
                     f"{len(entry.get('selected') or [])} of {tests}",
                     _cell("; ".join(f"{k} ×{v}" for k, v in sorted(reasons.items())))])
    lines += _table(["round", "candidate", "changes", "re-ran", "why"], rows)
    return lines


def _durability(report: Mapping[str, Any]) -> list[str]:
    """The scheduled-session decision, the durable run and the pull request, when present."""
    lines: list[str] = []
    session = report.get("session")
    if isinstance(session, Mapping):
        verb = "evolved" if session.get("evolve") else "skipped evolution (baseline only)"
        lines += ["", "## Session", "",
                  f"This scheduled session {verb}: **{_cell(session.get('code', '?'))}** — "
                  f"{_cell(session.get('reason', ''))}"]
    run = report.get("run")
    if isinstance(run, Mapping):
        replayed = int(run.get("replayed") or 0)
        lines += ["", f"Run {_code(run.get('id', '?'))}: {_cell(run.get('status', '?'))}, "
                      f"{run.get('generations', 0)} round(s) recorded"
                      + (f", {replayed} of them before a restart" if replayed else "")
                      + " (`agentdescent report --history`)."]
    pull = report.get("pull_request")
    if isinstance(pull, Mapping):
        if pull.get("url"):
            lines += ["", f"Pull request #{pull.get('number')}: {_cell(pull.get('operation'))} "
                          f"({_cell(pull.get('url'))})."]
        else:
            detail = pull.get("error") or pull.get("reason") or pull.get("message") or ""
            lines += ["", f"Pull request: {_cell(pull.get('operation'))}"
                          + (f" — {_cell(detail)}" if detail else "") + "."]
    return lines
