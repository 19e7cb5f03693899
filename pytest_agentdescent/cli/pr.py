"""``agentdescent pr``: push the stable branch and open, update or close its pull request.

Run after an evolution (locally, or by the Action after ``pytest --evolve``).
The body is built from the last run's ``report.json`` when there is one.  In
GitHub Actions the outcome is also written as step outputs, with
peter-evans/create-pull-request's names (``pull-request-number``, ``-url``,
``-operation``, ``-head-sha``, ``-branch``) and the older ``pr-number``,
``pr-url``, ``pr-operation``.  The token comes from ``GITHUB_TOKEN`` and is
never echoed: errors are :class:`GitHubError` messages, which never hold it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pytest_agentdescent.cli.inifile import find_inifile
from pytest_agentdescent.cli.project import repo_root, state_dir

__all__ = ["DEFAULT_LABEL", "pr"]

DEFAULT_LABEL = "agentdescent"
_DEFAULT_PREFIX = "agentdescent/"


def _last_report(directory: Path) -> dict[str, Any] | None:
    path = directory / "report.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"{path} is unreadable ({exc}); rerun the evolution, or "
                                   "delete the file to open the pull request without it"
                                   ) from None
    return data if isinstance(data, dict) else None


def _prefix(root: Path, given: str | None) -> str:
    if given:
        return given
    ini = find_inifile(Path.cwd(), root)
    raw = ini.read().get("evolve_branch_prefix") if ini is not None else None
    return str(raw).strip() if raw else _DEFAULT_PREFIX


@click.command("pr")
@click.option("--base", default=None, metavar="REF",
              help="Branch the pull request targets (default: the repository's default branch).")
@click.option("--draft", is_flag=True, help="Open the pull request as a draft.")
@click.option("--label", "labels", multiple=True, metavar="LABEL",
              help=f"Label to put on the pull request (repeatable; default {DEFAULT_LABEL}).")
@click.option("--remote", default="origin", show_default=True,
              help="The git remote to push the stable branch to.")
@click.option("--branch-prefix", "prefix", default=None, metavar="PREFIX",
              help="Prefix of the dev and stable branches (default: evolve_branch_prefix of "
                   "the pytest configuration, else agentdescent/).")
@click.option("--state-dir", "state", default=None, metavar="DIR",
              help="Where the last report.json is (default: evolve_state_dir, else "
                   ".agentdescent), relative to the repository root.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def pr(base: str | None, draft: bool, labels: tuple[str, ...], remote: str, prefix: str | None,
       state: str | None, as_json: bool) -> None:
    """Push <prefix>stable and create, update or close its pull request.

    Needs GITHUB_TOKEN; the repository is GITHUB_REPOSITORY or the remote's
    owner/name, the API GITHUB_API_URL (GitHub Enterprise) or api.github.com.
    Exit codes: 0 done (created, updated, closed or nothing to do), 1 failed, 2 usage.
    """
    from agentdescent_core.errors import AgentDescentError
    from agentdescent_core.github import publish_pull_request, set_outputs

    root = repo_root()
    report_data = _last_report(state_dir(root, state))
    try:
        outcome = publish_pull_request(
            root, prefix=_prefix(root, prefix), remote=remote, base=base, draft=draft,
            labels=labels or (DEFAULT_LABEL,), report=report_data)
    except AgentDescentError as exc:
        raise click.ClickException(str(exc)) from None
    set_outputs(outcome.step_outputs())
    if as_json:
        click.echo(json.dumps(outcome.to_json(), indent=2, sort_keys=True))
        return
    number = f"#{outcome.number}" if outcome.number is not None else "-"
    click.echo(f"{outcome.operation} {number} {outcome.url or ''}".rstrip())
    if outcome.message:
        click.echo(outcome.message, err=True)
