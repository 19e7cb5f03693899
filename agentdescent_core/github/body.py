"""The pull request body: the evidence a reviewer needs to merge an evolved artifact.

A reviewer opening the bot's pull request should see, without leaving the page:
whether the reward went up overall and on the held-out tests (the summary
table), which tests flipped, the reward of every version (a Mermaid chart,
rendered by GitHub), which files changed and how much, why each version was
accepted (the lineage, one entry per dev commit with its evidence and the
proposer's rationale), and the exact command that re-checks the claim.

GitHub refuses bodies over 65 536 characters, and a long run can exceed that
(hundreds of tests, dozens of versions with long rationales).  The body is
built from sections whose entries can be dropped from the end; when the whole
does not fit ``limit``, the lineage, then the per-test table, then the file
list lose entries, each with a visible notice of how many were cut.  The
hidden marker, the summary and the review command are never cut.

Text that came from a model (subjects, rationales) is shown inside code
blocks, so it can neither ping people with ``@mentions`` nor inject Markdown
or a second marker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdescent_core.ledger.message import VersionRecord
from agentdescent_core.markdown import cell, code, line_chart, num, number_or_none, sha, table
from agentdescent_core.redact import redact

PR_MARKER = "<!-- agentdescent:pull-request -->"
#: GitHub's limit is 65 536 characters; leave room for what GitHub adds.
DEFAULT_LIMIT = 65_000

_FIXED, _BROKEN = "fail->pass", "pass->fail"


@dataclass
class _Section:
    """Lines that always stay, then entries that may be cut from the end."""

    head: list[str]
    entries: list[list[str]] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    noun: str = "entries"
    cut: int = 0

    def lines(self) -> list[str]:
        out = list(self.head)
        for entry in self.entries:
            out.extend(entry)
        if self.cut:
            out += ["", f"> **{self.cut} more {self.noun} cut** to keep this pull request "
                        "within GitHub's size limit; the full report is in the run's job "
                        "summary and `.agentdescent/report.md`."]
        out.extend(self.tail)
        return out


def version_entry(record: VersionRecord) -> dict[str, Any]:
    """The mapping :func:`render_pr_body` expects for one ledger version."""
    return {
        "version": record.version,
        "sha": record.sha,
        "subject": record.subject,
        "rationale": record.rationale,
        "author": record.author,
        "reward_before": record.reward_before,
        "reward_after": record.reward_after,
        "p_improvement": record.p_improvement,
    }


def render_pr_body(report: Mapping[str, Any] | None, *,
                   ledger_versions: Sequence[Mapping[str, Any]],
                   diffstat: Sequence[tuple[str, int, int]], review_command: str,
                   limit: int = DEFAULT_LIMIT) -> str:
    """Markdown for the pull request, at most ``limit`` characters, holding :data:`PR_MARKER`.

    ``report``: the run's ``report.json`` dict (None when publishing without
    one: the summary then comes from the versions' evidence alone).
    ``ledger_versions``: one mapping per dev version since the base, oldest
    first (see :func:`version_entry`).  ``diffstat``: (path, lines added,
    lines deleted) per changed file.  ``review_command``: shown verbatim.
    """
    report = report or {}
    versions = list(ledger_versions)
    sections = [
        _Section(_summary(report, versions)),
        _flips(report),
        _Section(["", "## Reward per version", "", *_chart(report, versions)]),
        _files(diffstat),
        _lineage(versions),
        _Section(["", "## Reproduce", "",
                  "Re-run the evaluation on the base and on this branch and check that the "
                  "improvement holds (it also fails when anything outside the artifacts "
                  "changed):", "", *_fenced(review_command, "bash"), ""]),
    ]
    for section in (sections[4], sections[1], sections[3]):
        _shrink(sections, section, limit)
    text = _join(sections)
    if len(text) > limit:  # nothing left to cut gracefully: keep the start and the command
        notice = ("\n\n> **Cut here** to stay within GitHub's size limit; see the run's job "
                  "summary for the rest.\n")
        keep = _join(sections[-1:])
        room = limit - len(notice) - len(keep)
        if room < len(PR_MARKER) + 1:
            keep, room = "", limit - len(notice)
        text = _join(sections[:-1])[: max(0, room)].rstrip() + notice + keep
    return redact(text)  # no secret value in a PR (a mask may add a few characters)


# ---------------------------------------------------------------------- sections


def _summary(report: Mapping[str, Any], versions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The headline is the whole branch (base -> last version); the table, the last session.

    A scheduled job updates this pull request every session; a session that
    found nothing new must not make the pull request read "not improved" when
    its versions took the reward from 0.1 to 1.0, so the headline comes from
    the versions' evidence and the run's report is labelled as one session.
    """
    before = report.get("reward_before")
    after = report.get("reward_after")
    count = len(versions)
    lines = [PR_MARKER, "## agentdescent: evolved artifacts", ""]
    if versions:
        first = versions[0].get("reward_before")
        last = next((v.get("reward_after") for v in reversed(versions)
                     if number_or_none(v.get("reward_after")) is not None), None)
        lines.append(f"{count} accepted version{'s' if count != 1 else ''} since the base; "
                     f"reward {num(first)} → {num(last)} ({_verdict(first, last)}), as "
                     "measured when each version was accepted.")
        if before is None and after is None:
            before, after = first, last
    else:
        lines.append(f"No accepted version; reward {num(before)} → {num(after)} "
                     f"({_verdict(before, after)}).")
    if report.get("error"):
        lines += ["", f"> **The run ended on an error:** {cell(report['error'])}"]
    p_value = next((v.get("p_improvement") for v in reversed(versions)
                    if number_or_none(v.get("p_improvement")) is not None), None)
    flips = report.get("flips") or {}
    model = report.get("model") if isinstance(report.get("model"), Mapping) else {}
    assert isinstance(model, Mapping)
    tokens_in, tokens_out = model.get("input_tokens"), model.get("output_tokens")
    tokens = "–" if tokens_in is None and tokens_out is None else \
        f"{int(tokens_in or 0):,} in / {int(tokens_out or 0):,} out"
    cost = number_or_none(report.get("cost_usd", model.get("cost_usd")))
    rows = [["reward, all tasks", num(before), num(after)]]
    if report:
        lines += ["", "The session that last updated this pull request, from its start to its "
                      "end:"]
    for name, label in (("train", "reward, train"), ("holdout", "reward, held-out")):
        part = report.get(name) or {}
        if isinstance(part, Mapping) and part.get("tasks", 1):
            rows.append([f"{label} ({part.get('tasks', '?')} tasks)",
                         num(part.get("reward_before")), num(part.get("reward_after"))])
    lines += ["", *table(["", "before", "after"], rows), ""]
    calls = report.get("calls")
    lines += table(["P(improvement)", "tasks fixed", "tasks broken", "proposer calls", "tokens",
                    "cost (USD)"],
                   [[num(p_value), str(len(flips.get(_FIXED, []))),
                     str(len(flips.get(_BROKEN, []))), "–" if calls is None else str(calls),
                     tokens, "–" if cost is None else f"{cost:.4f}"]])
    return lines + _selection(report)


def _selection(report: Mapping[str, Any]) -> list[str]:
    """How the session's candidates were judged when read-based selection was on."""
    block = report.get("selection")
    if not isinstance(block, Mapping) or block.get("mode") != "reads" \
            or not block.get("candidates"):
        return []
    candidates, runs = int(block["candidates"]), int(block.get("candidate_runs") or 0)
    misses = [str(m) for m in block.get("misses") or []]
    line = (f"Tests re-run by read: {runs} test run(s) judged {candidates} candidate(s) of "
            f"{block.get('tests', '?')} tests; {int(block.get('confirm_runs') or 0)} kept "
            "result(s) ran again before a promotion")
    line += ", no selection miss." if not misses else (
        f"; **{len(misses)} selection miss(es)**, now always run: {_names(misses, 5)}.")
    return ["", line]


def _verdict(before: object, after: object) -> str:
    low, high = number_or_none(before), number_or_none(after)
    if low is None or high is None:
        return "not measured"
    return "improved" if high > low else "not improved"


def _flips(report: Mapping[str, Any]) -> _Section:
    flips = report.get("flips") or {}
    fixed, broken = list(flips.get(_FIXED, [])), list(flips.get(_BROKEN, []))
    head = ["", "## Per-test flips (last session)", ""]
    if not report.get("tasks") and not fixed and not broken:
        head.append("No per-test results were given (publish with the run's report for them).")
        return _Section(head)
    head.append(f"{len(fixed)} fail → pass, {len(broken)} pass → fail.")
    if fixed:
        head.append("Now passing: " + _names(fixed, 20) + ".")
    if broken:
        head.append("**Now failing:** " + _names(broken, 50) + ".")
    rows = [t for t in report.get("tasks") or [] if isinstance(t, Mapping)]
    section = _Section(head, noun="tests")
    if rows:
        section.head += ["", *table(["test", "set", "before", "after", "change"], [])]
        section.entries = [[f"| {code(t.get('nodeid'))} | "
                            f"{'holdout' if t.get('holdout') else 'train'} | "
                            f"{num(t.get('before'))} | {num(t.get('after'))} | "
                            f"{cell(str(t.get('change', '')).replace('->', '→'))} |"]
                           for t in rows]
    return section


def _chart(report: Mapping[str, Any], versions: Sequence[Mapping[str, Any]]) -> list[str]:
    labels: list[str] = []
    values: list[float] = []
    start = number_or_none(versions[0].get("reward_before")) if versions else None
    if start is None:
        start = number_or_none(report.get("eval_reward_before"))
    if start is not None:
        labels.append('"base"')
        values.append(start)
    last = start
    for entry in versions:
        value = number_or_none(entry.get("reward_after"))
        last = value if value is not None else last
        if last is not None:
            labels.append(f'"v{entry.get("version")}"')
            values.append(last)
    if not values:
        return ["No reward was recorded for these versions, so there is nothing to chart."]
    return line_chart("Reward per version", labels, values, "reward")


def _files(diffstat: Sequence[tuple[str, int, int]]) -> _Section:
    added = sum(a for _, a, _ in diffstat)
    deleted = sum(d for _, _, d in diffstat)
    head = ["", "## Files changed", "",
            f"{len(diffstat)} file{'s' if len(diffstat) != 1 else ''}, +{added} −{deleted}.", ""]
    if not diffstat:
        return _Section(head)
    section = _Section([*head, *table(["file", "added", "deleted"], [])], noun="files")
    section.entries = [[f"| {code(path)} | +{a} | −{d} |"] for path, a, d in diffstat]
    return section


def _lineage(versions: Sequence[Mapping[str, Any]]) -> _Section:
    head = ["", "## Lineage", ""]
    if not versions:
        return _Section([*head, "No ledger versions since the base."])
    section = _Section([*head, "Each accepted version, oldest first, with the evidence it was "
                               "accepted on and the proposer's rationale.", ""],
                       noun="versions")
    for entry in versions:
        evidence = (f"reward {num(entry.get('reward_before'))} → "
                    f"{num(entry.get('reward_after'))}, P(improvement) "
                    f"{num(entry.get('p_improvement'))}")
        if entry.get("author"):
            evidence += f", proposed by {code(entry['author'])}"
        lines = [f"### v{entry.get('version')} {sha(entry.get('sha'))}", "",
                 *_fenced(str(entry.get("subject") or ""), "text"), "", evidence + "."]
        rationale = str(entry.get("rationale") or "").strip()
        if rationale:
            lines += ["", "<details><summary>Rationale</summary>", "",
                      *_fenced(rationale, "text"), "", "</details>"]
        lines.append("")
        section.entries.append(lines)
    return section


# ---------------------------------------------------------------------- helpers


def _names(nodeids: Sequence[str], most: int) -> str:
    shown = ", ".join(code(n) for n in nodeids[:most])
    rest = len(nodeids) - most
    return shown + (f" and {rest} more" if rest > 0 else "")


def _fenced(text: str, language: str) -> list[str]:
    text = text.replace(PR_MARKER, "<!-- (marker) -->")
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *text.splitlines(), fence]


def _join(sections: Sequence[_Section]) -> str:
    return "\n".join(line for s in sections for line in s.lines()) + "\n"


def _shrink(sections: Sequence[_Section], section: _Section, limit: int) -> None:
    """Drop entries from the end of ``section`` until the body fits (or it has none left)."""
    while section.entries:
        over = len(_join(sections)) - limit
        if over <= 0:
            return
        # Drop several entries at once when far over, then one at a time near the limit.
        drop = 1
        size = 0
        for entry in reversed(section.entries):
            size += sum(len(line) + 1 for line in entry)
            if size >= over or drop >= len(section.entries):
                break
            drop += 1
        del section.entries[-drop:]
        section.cut += drop
