"""Publishing the stable branch as one pull request that later runs keep up to date.

:func:`publish_pull_request` is what ``agentdescent pr`` and ``pytest --evolve
--evolve-pr`` call at the end of a run.  It pushes ``<prefix>stable`` (and
nothing else), then finds the open pull request whose head is that branch:

- stable proposes something the base does not have -> that pull request's
  title and body are updated, or one is created (draft and labels as asked);
- stable proposes nothing (same tree as the base, already contained in it, or
  every file it changed already has the same content there) -> no pull request
  is created, and an open one is closed with a comment saying why.

There is only ever one open pull request per prefix, so a scheduled workflow
can call this every night without piling up duplicates.

To compare stable with the base the base's commit must be local; it is
fetched by itself (see :meth:`.remote.GitRemote.fetch_commit`) so no ref
outside the prefix is created or moved, and the user's working tree, index and
``HEAD`` are never read or written.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentdescent_core.errors import LedgerError
from agentdescent_core.github.api import DEFAULT_API_URL, GitHubClient
from agentdescent_core.github.body import render_pr_body, version_entry
from agentdescent_core.github.errors import GitHubError, scrub
from agentdescent_core.github.remote import (
    GitRemote,
    check_remote_known,
    full_ref,
    parse_repository,
)
from agentdescent_core.ledger.ledger import validate_prefix
from agentdescent_core.ledger.message import VersionRecord, parse_message
from agentdescent_core.markdown import number_or_none


@dataclass(frozen=True)
class PullRequestOutcome:
    """What :func:`publish_pull_request` did.

    ``operation``: ``created`` | ``updated`` | ``closed`` | ``none``.
    ``number`` / ``url``: the pull request concerned (None for ``none``).
    ``branch`` / ``base``: head and base branch names.  ``pushed``: whether
    the push moved the remote branch.  ``message``: one line for people.
    ``body``: the pull request body that was sent (None for ``closed`` /
    ``none``), e.g. for ``$GITHUB_STEP_SUMMARY``; left out of :meth:`to_json`.
    ``head_sha``: the commit of ``branch`` that was published.
    """

    operation: str
    number: int | None
    url: str | None
    branch: str
    base: str
    pushed: bool
    message: str
    body: str | None = field(default=None, repr=False, compare=False)
    head_sha: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["body"]
        return data

    def step_outputs(self) -> dict[str, str]:
        """The GitHub Actions step outputs: create-pull-request's names, then our aliases."""
        number = "" if self.number is None else str(self.number)
        url = self.url or ""
        return {
            "pull-request-number": number, "pull-request-url": url,
            "pull-request-operation": self.operation,
            "pull-request-head-sha": self.head_sha or "", "pull-request-branch": self.branch,
            "pr-number": number, "pr-url": url, "pr-operation": self.operation,
        }


def publish_pull_request(
    repo_root: str | os.PathLike[str],
    *,
    prefix: str = "agentdescent/",
    remote: str = "origin",
    base: str | None = None,
    draft: bool = False,
    labels: Sequence[str] = ("agentdescent",),
    token: str | None = None,
    api_url: str | None = None,
    repository: str | None = None,
    report: Mapping[str, Any] | None = None,
    review_command: str | None = None,
    timeout: float = 30.0,
) -> PullRequestOutcome:
    """Push ``<prefix>stable`` and create, update or close its pull request.

    ``token``: default ``$GITHUB_TOKEN``.  ``api_url``: default
    ``$GITHUB_API_URL``, else ``https://api.github.com``.  ``repository``
    (``owner/name``): default ``$GITHUB_REPOSITORY``, else parsed from the
    remote's URL.  ``base``: the branch to merge into, default the
    repository's default branch.  ``report``: the run's ``report.json`` dict
    for the body.  ``review_command``: default ``agentdescent review --base
    <base sha> --head <stable sha>``.  Raises :class:`GitHubError` with what to
    fix on every failure.
    """
    token = os.environ.get("GITHUB_TOKEN", "") if token is None else token
    if not token.strip():
        raise GitHubError(
            "GITHUB_TOKEN is not set: export a token that may push and open pull requests "
            "(in GitHub Actions: env: GITHUB_TOKEN: ${{ github.token }})"
        )
    try:
        validate_prefix(prefix)
    except LedgerError as exc:
        raise GitHubError(str(exc)) from None
    api_url = api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL
    branch = f"{prefix}stable"
    stable_ref = full_ref(branch)
    try:
        with GitRemote(repo_root, remote) as handle:
            return _publish(
                handle, token=token, api_url=api_url, repository=repository, base=base,
                branch=branch, stable_ref=stable_ref, dev_ref=full_ref(f"{prefix}dev"),
                draft=draft, labels=labels, report=report, review_command=review_command,
                timeout=timeout,
            )
    except GitHubError as exc:
        cleaned = scrub(str(exc), token)
        if cleaned == str(exc):
            raise
        failure = GitHubError(cleaned, status=exc.status)
    raise failure


def _publish(handle: GitRemote, *, token: str, api_url: str, repository: str | None,
             base: str | None, branch: str, stable_ref: str, dev_ref: str, draft: bool,
             labels: Sequence[str], report: Mapping[str, Any] | None,
             review_command: str | None, timeout: float) -> PullRequestOutcome:
    stable_sha = handle.local_sha(stable_ref)
    if stable_sha is None:
        raise GitHubError(
            f"{branch} does not exist in {handle.root}: run the evolution first "
            "(pytest --evolve PATH), or pass the branch prefix the run used"
        )
    local = {stable_ref: stable_sha}
    dev_sha = handle.local_sha(dev_ref)
    if dev_sha is not None:
        local[dev_ref] = dev_sha
    repository = repository or os.environ.get("GITHUB_REPOSITORY") or parse_repository(handle.url)
    with GitHubClient(token, repository, api_url=api_url, timeout=timeout) as client:
        base = (base or client.default_branch()).removeprefix("refs/heads/")
        base_ref = full_ref(base)
        found = handle.ls_remote([base_ref, stable_ref])
        base_sha = found.get(base_ref)
        if base_sha is None:
            raise GitHubError(
                f"the base branch {base!r} does not exist on {handle.remote}; push it first or "
                "pass an existing branch as the base"
            )
        check_remote_known(handle, stable_ref, found.get(stable_ref), local)
        handle.fetch_commit(base_ref, base_sha)
        reason, diffstat = _proposal(handle, base_sha, stable_sha)
        # The lease is the value check_remote_known vetted: a push since then is refused.
        pushed = bool(handle.push([stable_ref], seen=found))
        owner = repository.split("/")[0]
        pulls = client.open_pulls(f"{owner}:{branch}")
        pull = pulls[0] if pulls else None
        if reason is not None:
            if pull is None:
                return PullRequestOutcome("none", None, None, branch, base, pushed,
                                          f"no pull request: {reason}", head_sha=stable_sha)
            number = int(pull["number"])
            client.comment(number, (
                f"Closing: `{branch}` ({stable_sha[:12]}) has no changes to propose against "
                f"`{base}` ({base_sha[:12]}): {reason}. A new pull request will be opened "
                "when a later run promotes an improvement."))
            closed = client.update_pull(number, state="closed")
            url = str(closed.get("html_url") or pull.get("html_url") or "") or None
            return PullRequestOutcome("closed", number, url, branch, base, pushed,
                                      f"closed pull request #{number}: {reason}",
                                      head_sha=stable_sha)
        versions = [version_entry(r) for r in _lineage(handle, base_sha, stable_sha)]
        command = review_command or default_review_command(base_sha, stable_sha, report)
        body = render_pr_body(report, ledger_versions=versions, diffstat=diffstat,
                              review_command=command)
        title = _title(report, versions)
        if pull is not None:
            number = int(pull["number"])
            fields: dict[str, object] = {"title": title, "body": body}
            if (pull.get("base") or {}).get("ref") not in (None, base):
                fields["base"] = base
            updated = client.update_pull(number, **fields)
            client.add_labels(number, labels)
            url = str(updated.get("html_url") or pull.get("html_url") or "") or None
            return PullRequestOutcome("updated", number, url, branch, base, pushed,
                                      f"updated pull request #{number}: {url}", body,
                                      head_sha=stable_sha)
        created = client.create_pull(title=title, head=f"{owner}:{branch}", base=base, body=body,
                                     draft=draft)
        number = int(created["number"])
        client.add_labels(number, labels)
        url = str(created.get("html_url") or "") or None
        return PullRequestOutcome("created", number, url, branch, base, pushed,
                                  f"created pull request #{number}: {url}", body,
                                  head_sha=stable_sha)


def _proposal(handle: GitRemote, base_sha: str, stable_sha: str
              ) -> tuple[str | None, list[tuple[str, int, int]]]:
    """(why there is nothing to propose, or None; the diffstat a pull request would show)."""
    tree = handle.ok("rev-parse", f"{stable_sha}^{{tree}}", f"{base_sha}^{{tree}}",
                     what="read the trees of the base and the stable branch").split()
    if tree[0] == tree[1]:
        return "its files are identical to the base", []
    status, out, _ = handle.run("merge-base", base_sha, stable_sha)
    start = out.strip() if status == 0 and out.strip() else base_sha
    changed = [p for p in handle.ok("diff-tree", "-r", "--no-renames", "--name-only", "-z",
                                    start, stable_sha, what="list the changed files")
               .split("\0") if p]
    if not changed:
        return "the base already contains it", []
    differs = handle.ok("diff-tree", "-r", "--no-renames", "--name-only", "-z", base_sha,
                        stable_sha, "--", *changed, what="compare the changed files")
    if not differs.strip("\0"):
        return "every file it changed already has the same content in the base", []
    numstat = handle.ok("diff-tree", "-r", "--no-renames", "--numstat", "-z", start,
                        stable_sha, what="count the changed lines")
    stat: list[tuple[str, int, int]] = []
    for record in numstat.split("\0"):
        added, _, rest = record.partition("\t")
        deleted, _, path = rest.partition("\t")
        if path:
            stat.append((path, int(added) if added.isdigit() else 0,
                         int(deleted) if deleted.isdigit() else 0))
    return None, stat


def _lineage(handle: GitRemote, base_sha: str, stable_sha: str) -> list[VersionRecord]:
    """The ledger versions on stable's first-parent line that the base does not have."""
    out = handle.ok("log", "--first-parent", "--reverse", "--no-color", "--format=%H%x00%B%x1e",
                    f"{base_sha}..{stable_sha}", what="read the ledger history")
    records: list[VersionRecord] = []
    for chunk in out.split("\x1e"):
        sha, sep, message = chunk.strip("\n").partition("\0")
        if not sep:
            continue
        parsed = parse_message(message)
        if parsed.version is None:
            continue
        records.append(VersionRecord(version=parsed.version, sha=sha.strip(),
                                     subject=parsed.subject, trailers=parsed.trailers,
                                     rationale=parsed.body))
    return records


def _title(report: Mapping[str, Any] | None, versions: Sequence[Mapping[str, Any]]) -> str:
    report = report or {}
    before = number_or_none(report.get("reward_before"))
    after = number_or_none(report.get("reward_after"))
    if before is None and after is None and versions:
        before = number_or_none(versions[0].get("reward_before"))
        after = number_or_none(versions[-1].get("reward_after"))
    title = "agentdescent: evolved artifacts"
    if versions:
        title += f" v{versions[-1].get('version')}"
    if before is not None and after is not None:
        title += f", reward {before:.2f} → {after:.2f}"
    return title


def default_review_command(base_sha: str, head_sha: str,
                           report: Mapping[str, Any] | None) -> str:
    """The command a reviewer runs to reproduce the claim, from where pytest runs.

    The artifact roots come from the run's report (repo-relative there; given
    relative to the project's directory here), so the command works without
    ``evolve_paths`` in the ini file; a project in a subdirectory of the
    repository gets a ``cd`` first.
    """
    command = f"agentdescent review --base {base_sha} --head {head_sha}"
    if not report:
        return command
    subdir = str(report.get("subdir") or "").strip("/")
    roots = [str(root) for root in report.get("roots") or ()]
    if subdir:
        roots = [root[len(subdir) + 1:] if root.startswith(subdir + "/") else root
                 for root in roots]
    if roots:
        command += " " + " ".join(shlex.quote(root) for root in roots)
    return f"cd {shlex.quote(subdir)} && {command}" if subdir else command
