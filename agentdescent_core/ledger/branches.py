"""Creating, resuming and carrying the two ledger branches for a base commit.

One call decides, for a base commit, where ``<prefix>dev`` and
``<prefix>stable`` must point, writes any carry commits, and moves both refs in
one atomic compare-and-swap transaction (a lost race is re-decided from
scratch by the caller's retry loop):

- neither branch exists: both are created at the base (version 0);
- a branch exists and contains the base: it is reused as is (resume);
- a branch does not contain the base (the base branch moved since it was cut):
  at version 0 it simply moves to the base; otherwise its evolved files are
  carried onto the base (:mod:`.carry`) in a new commit with the next version;
- stable equal to dev: both get the same carry commit; stable at an older dev
  version: stable is carried first and dev's carry is committed *on top of it*
  (first parent), so stable remains a commit on dev's history and promotion
  keeps its meaning;
- one branch missing, the other present: dev is recreated at stable, stable at
  the base of dev's history.

A stable that is not on dev at all can only come from refs moved by hand; it is
carried on its own and keeps its version number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.ledger.carry import CarryConflict, carry_commit
from agentdescent_core.ledger.message import BASE, parse_message
from agentdescent_core.ledger.plumbing import GitRepo, RefUpdate


@dataclass(frozen=True)
class BranchesResult:
    """Outcome of :meth:`Ledger.ensure_branches`.

    ``created``/``carried`` name the branches (short names) that were created or
    carried onto a moved base; ``merged`` lists artifact files dev's carry
    merged three-way; ``conflicts`` the files a carry could not merge (the
    base's version was kept); ``messages`` says all of it in plain words.
    """

    base: str
    dev: str
    stable: str
    dev_version: int
    created: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    conflicts: tuple[CarryConflict, ...] = ()
    messages: tuple[str, ...] = field(default=())

    @property
    def resumed(self) -> bool:
        """True when both branches already existed (an earlier run is continued)."""
        return not self.created


def version_of(repo: GitRepo, sha: str) -> int:
    """Version of a commit: its trailer on a ledger commit, 0 for any other commit."""
    return parse_message(repo.message(sha)).version or 0


def history_base(repo: GitRepo, sha: str) -> str:
    """The version-0 commit of the history ``sha`` belongs to."""
    parsed = parse_message(repo.message(sha))
    if parsed.version is None:
        return sha
    base = parsed.get(BASE)
    return base if base and repo.resolve(base) else sha


def ensure_once(
    repo: GitRepo,
    tree: FileTree,
    *,
    base_sha: str,
    dev_branch: str,
    stable_branch: str,
) -> BranchesResult:
    """Decide and apply both refs for ``base_sha``; RefUpdateFailed on a lost race."""
    dev_ref, stable_ref = f"refs/heads/{dev_branch}", f"refs/heads/{stable_branch}"
    dev, stable = repo.ref_value(dev_ref), repo.ref_value(stable_ref)
    created: list[str] = []
    carried: list[str] = []
    merged: tuple[str, ...] = ()
    conflicts: list[CarryConflict] = []
    messages: list[str] = []

    def carry(branch: str, tip: str, first_parent: str, version: int) -> str:
        nonlocal merged
        outcome = carry_commit(
            repo, tree, branch=branch, tip=tip, tip_version=version_of(repo, tip),
            onto=base_sha, first_parent=first_parent, version=version,
        )
        carried.append(branch)
        merged = outcome.merged  # dev is carried last, so its files are reported
        conflicts.extend(outcome.conflicts)
        messages.append(
            f"the base moved: carried {branch} ({tip[:12]}) onto {base_sha[:12]} as "
            f"v{version}; {len(outcome.merged)} file(s) merged three-way, "
            f"{len(outcome.conflicts)} conflict(s)"
        )
        messages.extend(c.message for c in outcome.conflicts)
        return outcome.sha

    dev_moved = dev is not None and not repo.is_ancestor(base_sha, dev)
    stable_moved = stable is not None and not repo.is_ancestor(base_sha, stable)
    dev_version = version_of(repo, dev) if dev is not None else 0
    new_dev, new_stable = dev, stable
    next_version = dev_version + 1
    chained = dev_moved and dev_version > 0
    stable_carry: str | None = None

    if stable is not None and stable_moved and stable != dev:
        stable_version = version_of(repo, stable)
        if stable_version == 0:
            new_stable = base_sha  # nothing promoted yet: just follow the base
        elif chained:
            stable_carry = carry(stable_branch, stable, base_sha, next_version)
            new_stable = stable_carry
            next_version += 1
        else:
            new_stable = carry(stable_branch, stable, base_sha, stable_version)
    if dev is not None and dev_moved:
        if dev_version == 0:
            new_dev = base_sha  # nothing evolved yet: just follow the base
        else:
            new_dev = carry(dev_branch, dev, stable_carry or base_sha, next_version)
        if stable == dev:
            new_stable = new_dev
    if new_dev is None:
        new_dev = new_stable if new_stable is not None else base_sha
        created.append(dev_branch)
    if new_stable is None:
        new_stable = history_base(repo, new_dev)
        created.append(stable_branch)

    updates = [
        RefUpdate(ref, new, old)
        for ref, new, old in ((dev_ref, new_dev, dev), (stable_ref, new_stable, stable))
        if new != old
    ]
    if updates:
        repo.update_refs(updates, f"agentdescent: ensure branches at {base_sha[:12]}")
    at = {dev_branch: new_dev, stable_branch: new_stable}
    for branch in reversed(created):
        messages.insert(0, f"created {branch} at {at[branch][:12]}")
    if not created and not carried:
        messages.append(f"resumed {dev_branch} at v{dev_version} ({new_dev[:12]})")
    return BranchesResult(
        base=base_sha,
        dev=new_dev,
        stable=new_stable,
        dev_version=version_of(repo, new_dev),
        created=tuple(created),
        carried=tuple(carried),
        merged=merged,
        conflicts=tuple(conflicts),
        messages=tuple(messages),
    )
