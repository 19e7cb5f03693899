"""The pull request's review comment: ``agentdescent review`` as one sticky Markdown comment.

The Action's ``review`` mode runs ``agentdescent review --json`` on a pull
request and keeps *one* comment up to date with the result, so the pull
request shows the latest verdict instead of a growing thread of old ones.  The
comment is found again by :data:`REVIEW_MARKER`, a hidden HTML comment at the
top of its body: :func:`publish_review_comment` edits the comment that carries
it and creates one only when none does (the sticky-comment habit of
``peter-evans/create-or-update-comment`` users).

:func:`render_review_comment` turns the review's JSON into the body: the
verdict (PASSED, FAILED or SKIPPED), reward before and after, the evidence
(P(improvement), the p-value against its threshold, repeats), the per-test
table with the flips, the cost when the JSON carries one, and every reason to
fail.  Every string passes the environment's redactor, so a secret that leaked
into a test's output or an error never reaches the pull request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentdescent_core.github.api import GitHubClient
from agentdescent_core.redact import redact, redact_data

#: Hidden first line of the review comment; how the next run finds it again.
REVIEW_MARKER = "<!-- agentdescent-review -->"

#: GitHub refuses comments over 65,536 characters; the table is cut well before.
_MAX_ROWS = 150
_MAX_BODY = 60_000


def review_status(data: Mapping[str, Any]) -> str:
    """``passed``, ``failed`` or ``skipped`` (the head changes no artifact file)."""
    scope = data.get("scope") or {}
    if scope.get("artifact_changed") is False:
        return "skipped"
    return "passed" if data.get("ok") else "failed"


def render_review_comment(data: Mapping[str, Any], *, command: str = "") -> str:
    """The comment's Markdown for one ``agentdescent review --json`` result.

    ``command`` is the review command to show for reproducing it locally.
    """
    data = redact_data(dict(data))
    status = review_status(data)
    roots = ", ".join(f"`{r}`" for r in data.get("roots") or []) or "(none)"
    base, head = str(data.get("base", "")), str(data.get("head", ""))
    lines = [REVIEW_MARKER, f"## agentdescent review: {_headline(status)}", "",
             f"Base `{base[:12]}` → head `{head[:12]}` · artifact roots {roots}"
             + _source(str(data.get("roots_source") or "")), ""]
    scope = data.get("scope") or {}
    if status == "skipped":
        lines += ["This pull request changes no file under the artifact roots, so there is "
                  "no evolved change to verify.", ""]
        return _finish(lines, command)
    violations = scope.get("violations") or []
    if violations:
        lines += [f"**Scope: FAILED.** {len(violations)} changed file(s) lie outside what "
                  "may evolve; nothing was evaluated.", "",
                  "| file | change | why |", "|---|---|---|"]
        lines += [f"| `{_cell(v.get('path'))}` | {_cell(v.get('change'))} | "
                  f"{_cell(v.get('reason'))} |" for v in violations[:_MAX_ROWS]]
        lines.append("")
    else:
        lines += [f"**Scope: ok.** {len(scope.get('changed') or [])} changed file(s), all "
                  "under the artifact roots.", ""]
    evaluation = data.get("evaluation")
    if isinstance(evaluation, Mapping):
        lines += _evidence(evaluation, data)
    rows = data.get("tasks") or []
    if rows:
        lines += _table(rows)
    failures = data.get("failures") or []
    if failures:
        lines += ["### Why it failed", ""]
        lines += [f"- {_one_line(str(f))}" for f in failures]
        lines.append("")
    return _finish(lines, command)


def render_review_error(message: str, *, base: str, head: str, command: str = "") -> str:
    """The comment when the review could not run at all (no JSON came back)."""
    lines = [REVIEW_MARKER, f"## agentdescent review: {_headline('failed')}", "",
             f"Base `{base[:12]}` → head `{head[:12]}`", "",
             "The review could not be carried out:", "", "```text",
             redact(message).strip().replace("```", "'''") or "(no message)", "```", ""]
    return _finish(lines, command)


def publish_review_comment(client: GitHubClient, number: int, body: str, *,
                           create: bool = True) -> tuple[str, str]:
    """Edit the review comment of pull request ``number`` or create it: (operation, url).

    The operation is ``updated``, ``created``, or ``none`` when there is no
    earlier comment and ``create`` is False (nothing worth a new comment).
    A marked comment is one whose body starts with :data:`REVIEW_MARKER`; of
    several, the oldest by a bot account is kept up to date.
    """
    body = redact(body)
    marked = [c for c in client.issue_comments(number)
              if isinstance(c.get("body"), str) and c["body"].startswith(REVIEW_MARKER)
              and c.get("id") is not None]
    # A person may paste the marker too; a bot's comment (ours) is preferred.
    bots = [c for c in marked if (c.get("user") or {}).get("type") == "Bot"]
    for comment in (bots or marked)[:1]:
        if comment["body"] == body:
            return "updated", str(comment.get("html_url") or "")
        updated = client.update_comment(int(comment["id"]), body)
        return "updated", str(updated.get("html_url") or comment.get("html_url") or "")
    if not create:
        return "none", ""
    created = client.comment(number, body)
    return "created", str(created.get("html_url") or "")


# ---------------------------------------------------------------------- pieces


def _headline(status: str) -> str:
    return {"passed": "PASSED ✅", "failed": "FAILED ❌",
            "skipped": "SKIPPED (no artifact file changed)"}[status]


def _source(source: str) -> str:
    if source.startswith("commit "):
        return f" (read from the Agentdescent-Root trailers of `{source.split()[1][:12]}`)"
    if source == "evolve_paths":
        return " (the base's `evolve_paths`)"
    return ""


def _evidence(evaluation: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    before, after = evaluation.get("reward_before"), evaluation.get("reward_after")
    p_value = evaluation.get("p_value")
    confidence = evaluation.get("confidence")
    repeats = evaluation.get("repeats") or {}
    verdict = "reproduces" if evaluation.get("accepted") else "does not reproduce"
    parts = [f"P(improvement) {_num(evaluation.get('p_improvement'), 2)}",
             f"p = {_num(p_value, 3, g=True)} vs threshold "
             f"{_num(evaluation.get('threshold'), 3, g=True)}"]
    if isinstance(confidence, (int, float)):
        parts.append(f"confidence {confidence:.1%}")
    if repeats:
        parts.append(f"repeats: base {repeats.get('base')}, head {repeats.get('head')}")
    if evaluation.get("sandbox"):
        parts.append(f"sandbox `{evaluation['sandbox']}`")
    lines = ["| | before | after |", "|---|---|---|",
             f"| reward | {_num(before, 3)} | {_num(after, 3)} |", "",
             f"**Evidence:** the improvement {verdict} — " + "; ".join(parts) + ".", ""]
    cost = data.get("cost_usd", evaluation.get("cost_usd"))
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        lines += [f"**Cost:** ${cost:.4f}", ""]
    return lines


def _table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    flips = sum(1 for r in rows if r.get("flip"))
    lines = [f"### Per-test results ({flips} flip(s))", "",
             "| test | kind | before | after | flip |", "|---|---|---:|---:|---|"]
    for row in rows[:_MAX_ROWS]:
        lines.append(f"| `{_cell(row.get('nodeid'))}` | {_cell(row.get('kind'))} | "
                     f"{_num(row.get('before'), 3)} | {_num(row.get('after'), 3)} | "
                     f"{_cell(row.get('flip') or '')} |")
    if len(rows) > _MAX_ROWS:
        lines.append(f"| … {len(rows) - _MAX_ROWS} more (see the job log) | | | | |")
    lines.append("")
    return lines


def _finish(lines: list[str], command: str) -> str:
    if command:
        lines += [f"<sub>Reproduce locally: `{_cell(command)}`</sub>", ""]
    body = "\n".join(lines)
    if len(body) > _MAX_BODY:
        body = body[:_MAX_BODY] + "\n\n… (cut; the job summary has the whole review)\n"
    return redact(body)


def _num(value: object, digits: int, *, g: bool = False) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "n/a"
    return f"{value:.{digits}g}" if g else f"{value:.{digits}f}"


def _cell(value: object) -> str:
    return _one_line(str(value if value is not None else "")).replace("|", "\\|").replace(
        "`", "'")


def _one_line(text: str) -> str:
    return " ".join(text.split())
