"""What a ``pytest --evolve`` run leaves behind once its rounds are over.

The controller (:mod:`.session`) hands over the engine's result and what it
knew about the run; this module turns it into the things people read and
scripts use: ``report.json`` / ``report.md`` in the state directory, the
entry on ``refs/<prefix>sessions`` for scheduled sessions, and — with
``--evolve-pr`` — the pull request of the stable branch.  Everything here runs
after the last candidate was judged, so nothing here can change a decision;
a failure to record or publish becomes a warning or exit status 1, never a
lost evolution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_agentdescent.settings import EvolveSettings
from pytest_agentdescent.terminal import evolved_diff

if TYPE_CHECKING:
    from agentdescent_core.evaluation.protocol import TaskSplit
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.ledger.ledger import Ledger
    from agentdescent_core.loop.result import EvolutionResult
    from agentdescent_core.loop.schedule import SessionDecision
    from agentdescent_core.memory import AttemptMemory
    from pytest_agentdescent.collect import EvolvePlan


@dataclass
class Finished:
    """What the terminal summary shows: the report, where it is, the dry run's diff, the PR."""

    report: dict[str, Any]
    report_path: Path
    diff: list[str]
    warnings: list[str] = field(default_factory=list)
    pr_line: str | None = None
    pr_failed: bool = False


@dataclass(frozen=True)
class Published:
    """``record`` goes to report.json (``pull_request``); ``line`` to the terminal."""

    record: dict[str, Any]
    line: str
    failed: bool = False


def finish_run(
    result: EvolutionResult,
    *,
    settings: EvolveSettings,
    plan: EvolvePlan,
    ledger: Ledger,
    split: TaskSplit,
    initial: Mapping[str, str],
    before: Mapping[str, float],
    after: Mapping[str, float],
    broken: bool,
    calls: int,
    cost_usd: float | None,
    extra: Mapping[str, object],
    decision: SessionDecision | None,
    created: Sequence[str],
    base: str,
    state_dir: Path,
    started_at: float,
    memory: AttemptMemory | None = None,
) -> Finished:
    """Build and write the report, record the session, publish: in that order.

    ``before`` / ``after`` are the per-task rewards (:func:`measure_per_task`).
    ``broken`` says the baseline could not be measured: then the branches this
    run ``created`` are removed again.  ``extra`` are the report fields only the
    controller knows (model, sandbox, warnings, ...).  ``memory``, the attempts
    so far, goes beside the session entry on the sessions ref.
    """
    from agentdescent_core.report import build_report, render_markdown

    dry = settings.dry_run
    diff = evolved_diff(initial, result.state)
    report = build_report(
        result, split=split, before=before, after=after,
        dev=None if dry else ledger.head_or_none("dev"),
        stable=None if dry else ledger.head_or_none("stable"),
        calls=calls, cost_usd=cost_usd, ledger=ledger,
        extra={**extra, "dry_run": dry, "base": base, "diff": "\n".join(diff)},
    )
    finished = Finished(report, state_dir / "report.json", diff if dry else [])
    if broken and not dry:
        gone = ledger.forget_branches(created, base)
        if gone:  # the run leaves no ref behind that it created
            report.update(dev=None, stable=None, versions=[])
            finished.warnings.append(f"removed {', '.join(gone)} again: this run created them "
                                     "and could not measure its baseline")
    if decision is not None:
        problem = record_session(plan.layout.root, settings.branch_prefix, report, decision,
                                 split.eval_tasks, started_at, memory=memory)
        if problem is not None:
            finished.warnings.append(problem)
    if settings.pr:
        published = publish(plan.layout.root, settings, report)
        report["pull_request"] = published.record
        finished.pr_line, finished.pr_failed = published.line, published.failed
    finished.report_path.write_text(json.dumps(report, indent=2, sort_keys=True,
                                               ensure_ascii=False, default=str) + "\n",
                                    encoding="utf-8")
    (state_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    return finished


def measure_per_task(verifier: SandboxedVerifier, states: Sequence[Mapping[str, str]],
                     repeats: int) -> list[dict[str, float]]:
    """Per-task mean rewards of every task at each of ``states`` (before, after)."""
    split = verifier.split
    tasks = list(dict.fromkeys((*split.train, *split.held_out, *split.guards)))
    return [per_task(verifier, state, tasks, repeats) for state in states]


def per_task(verifier: SandboxedVerifier, state: Mapping[str, str], tasks: Sequence[str],
             repeats: int) -> dict[str, float]:
    """Mean reward per task at ``state`` (mostly cache hits); {} when it cannot be measured."""
    from agentdescent_core.errors import AgentDescentError

    if not tasks:
        return {}
    try:
        samples = verifier.evaluate(state, tasks, repeats)
    except (AgentDescentError, RuntimeError, ValueError):
        return {}
    return {t: math.fsum(v) / len(v) for t, v in samples.rewards.items() if len(v)}


def record_session(repo_root: Path, prefix: str, report: Mapping[str, Any],
                   decision: SessionDecision, tasks: Sequence[str],
                   started_at: float, *, memory: AttemptMemory | None = None) -> str | None:
    """Append this session to the history (and ``memory`` beside it, in the same commit);
    a warning text when it could not be recorded."""
    from agentdescent_core.errors import LedgerError
    from agentdescent_core.loop.schedule import SessionEntry, SessionHistory

    entry = SessionEntry(
        started_at=started_at, base=str(report.get("base") or ""),
        baseline=_number(report.get("eval_reward_before")),
        final=_number(report.get("eval_reward_after")),
        evolved=decision.evolve, decision="evolve" if decision.evolve else "skip",
        reason=decision.reason, tasks=tuple(tasks),
        stop_reason=None if report.get("stop_reason") is None else str(report["stop_reason"]),
        error=None if report.get("error") is None else str(report["error"]),
        accepted=int(report.get("accepted") or 0),
    )
    try:
        with SessionHistory(repo_root, prefix=prefix) as history:
            history.append(entry, memory=memory)
    except LedgerError as exc:
        return f"this session was not recorded in the session history: {exc}"
    return None


def publish(root: Path, settings: EvolveSettings, report: Mapping[str, Any]) -> Published:
    """``--evolve-pr``: push stable and create / update / close its pull request, or say why not.

    A dry run and a failed run publish nothing; a failure to publish makes the
    run exit 1 while keeping the evolution.
    """
    if settings.dry_run:
        return Published({"operation": "none", "reason": "dry run"},
                         "pull request: none (a dry run pushes nothing)")
    if report.get("error"):
        return Published({"operation": "none", "reason": "the run ended on an error"},
                         "pull request: none (the run ended on an error)")
    from agentdescent_core.github import GitHubError, publish_pull_request, set_outputs

    try:
        outcome = publish_pull_request(root, prefix=settings.branch_prefix, report=report)
    except GitHubError as exc:
        return Published({"operation": "failed", "error": str(exc)},
                         f"pull request: failed: {exc}", failed=True)
    set_outputs(outcome.step_outputs())
    return Published(outcome.to_json(), f"pull request: {outcome.message}")


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
