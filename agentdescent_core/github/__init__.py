"""Publishing an evolution's result on GitHub: push the stable branch, open its pull request.

:func:`publish_pull_request` (:mod:`.pr`) is the entry point; :mod:`.remote`
does the git side (owner/name from the remote URL, pushes with a lease),
:mod:`.api` the REST calls, :mod:`.body` the pull request's Markdown, and
:mod:`.actions` the GitHub Actions files (step outputs, job summary), and
:mod:`.review_comment` the sticky comment the Action's ``review`` mode keeps on
a pull request.
"""

from __future__ import annotations

from agentdescent_core.github.actions import append_step_summary, set_outputs
from agentdescent_core.github.api import GitHubClient
from agentdescent_core.github.body import PR_MARKER, render_pr_body
from agentdescent_core.github.errors import GitHubError
from agentdescent_core.github.pr import PullRequestOutcome, publish_pull_request
from agentdescent_core.github.remote import parse_repository, push_branches
from agentdescent_core.github.review_comment import (
    REVIEW_MARKER,
    publish_review_comment,
    render_review_comment,
    render_review_error,
    review_status,
)

__all__ = [
    "PR_MARKER",
    "REVIEW_MARKER",
    "GitHubClient",
    "GitHubError",
    "PullRequestOutcome",
    "append_step_summary",
    "parse_repository",
    "publish_pull_request",
    "publish_review_comment",
    "push_branches",
    "render_pr_body",
    "render_review_comment",
    "render_review_error",
    "review_status",
    "set_outputs",
]
