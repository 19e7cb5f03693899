"""``--evolve-pr``: the end of a run that publishes its stable branch as a pull request.

The GitHub work itself is :func:`agentdescent_core.github.publish_pull_request`;
this is the plugin's policy around it: what a dry run or a failed run
publishes (nothing), what the terminal says, and that a failure to publish
makes the run exit 1 while keeping the evolution.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_agentdescent.settings import EvolveSettings

__all__ = ["Published", "publish"]


@dataclass(frozen=True)
class Published:
    """``record`` goes to report.json (``pull_request``); ``line`` to the terminal."""

    record: dict[str, Any]
    line: str
    failed: bool = False


def publish(root: Path, settings: EvolveSettings, report: Mapping[str, Any]) -> Published:
    """Push stable and create / update / close its pull request, or say why not."""
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
