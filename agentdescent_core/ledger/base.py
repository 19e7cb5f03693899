"""The repository questions a run asks before it has a ledger: where it starts, and from what.

A dry run evolves on a scratch repository seeded with the artifact as
committed at ``HEAD``; a real run names the commit and branch it starts from
in its header; a run that took over a dead run's lease clears the git locks
that run left on our refs.  Each needs the user's repository, read-only except
for those locks, and none needs the ledger's branches to exist yet.
"""

from __future__ import annotations

import os
from pathlib import Path

import git

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import LedgerError


def resolve_head(root: str | os.PathLike[str]) -> str:
    """The commit ``HEAD`` points at; LedgerError (saying to commit first) when there is none."""
    try:
        out = git.Git(str(root)).execute(["git", "rev-parse", "--verify", "HEAD^{commit}"],
                                         with_extended_output=False, with_exceptions=True)
    except git.GitCommandError:
        raise LedgerError(
            f"the repository {root} has no commits yet, so there is nothing to evolve from; "
            "commit your files first (git add -A && git commit -m 'initial')"
        ) from None
    return str(out).strip()


def head_name(root: str | os.PathLike[str], commit: str) -> str:
    """``"<sha12> (<branch>)"``, or ``(detached HEAD)``: the run header's "base" line."""
    try:
        branch = git.Git(str(root)).execute(
            ["git", "symbolic-ref", "--quiet", "--short", "HEAD"],
            with_extended_output=False, with_exceptions=True)
        where = str(branch).strip()
    except git.GitCommandError:
        where = "detached HEAD"
    return f"{commit[:12]} ({where})"


def files_at(root: str | os.PathLike[str], commit: str, tree: FileTree) -> dict[str, str]:
    """The artifact files as committed at ``commit`` (what a dry run starts from)."""
    repo = git.Repo(str(root))
    try:
        return tree.load_git(repo.commit(commit).tree)
    finally:
        repo.close()


def clear_stale_ref_locks(repo_path: str | os.PathLike[str], prefix: str) -> list[str]:
    """Remove ``*.lock`` files of our own refs left by a killed run; return their paths.

    Only called after the repository lease was taken over from a holder known
    dead, so no live process of ours can own them; locks of other refs are
    never touched.
    """
    with git.Repo(str(repo_path)) as repo:
        common = Path(repo.common_dir)
    removed = []
    roots = [common / "refs" / "heads" / prefix.rstrip("/"), common / "refs" / prefix.rstrip("/")]
    for root in roots:
        if not root.is_dir():
            continue
        for lock in root.rglob("*.lock"):
            lock.unlink(missing_ok=True)
            removed.append(str(lock))
    return removed
