"""Carrying evolved artifact files onto a base branch that moved.

When the user's base branch gained commits since ``<prefix>dev`` was cut, the
next run must evaluate the *new* base (its tests, its code) with the *evolved*
artifact files.  The carry does that with one three-way merge per artifact file:

- ancestor: the file at the merge-base of the old ledger tip and the new base;
- ours: the file at the new base; theirs: the file at the old ledger tip.

Only files under the FileTree roots (as ``FileTree.load_git`` sees them: frozen
and executable-config files excluded) take part; everything else comes from the
new base unchanged.  Per file:

- changed on one side only -> that side's version;
- changed identically on both sides -> that version;
- changed on both sides -> :func:`~agentdescent_core.artifacts.merge3.merge3`;
  a clean merge is taken, a conflicting one (or a delete against an edit) keeps
  **the base's version** and is reported as a :class:`CarryConflict`: the base is
  what the user committed on purpose, the evolved edit is still in the old tip.

The carry commit is a merge commit with parents ``(new base, old tip)``: its
first parent starts the new history on the base, its second parent keeps every
earlier version reachable (``git log`` shows them; nothing is rewritten).  Its
tree is the new base's tree plus the merged artifact files.  It gets the next
version number and ``Agentdescent-Carry`` / ``Agentdescent-Carry-Ancestor`` /
``Agentdescent-Carry-Conflict`` trailers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.artifacts.merge3 import merge3
from agentdescent_core.errors import LedgerError
from agentdescent_core.ledger.message import carry_message
from agentdescent_core.ledger.plumbing import GitRepo


@dataclass(frozen=True)
class CarryConflict:
    """An artifact file the carry could not merge; the base's version was kept."""

    branch: str
    path: str
    reason: str
    evolved_commit: str

    @property
    def message(self) -> str:
        short = self.evolved_commit[:12]
        return (
            f"{self.branch}: {self.path}: {self.reason}; kept the base branch's version. "
            f"The evolved version is still in commit {short} "
            f"(git show {short}:{self.path}); port the change by hand if you want it."
        )


@dataclass(frozen=True)
class CarryPlan:
    """Ops to apply to the new base's artifact state, and what the merge found."""

    ops: dict[str, str | None]
    merged: tuple[str, ...]
    conflicts: tuple[tuple[str, str], ...]  # (path, reason)


@dataclass(frozen=True)
class CarryOutcome:
    sha: str
    version: int
    merged: tuple[str, ...]
    conflicts: tuple[CarryConflict, ...]


def plan_carry(
    ancestor: Mapping[str, str],
    base: Mapping[str, str],
    evolved: Mapping[str, str],
) -> CarryPlan:
    """Decide every artifact file of the carry (pure: states in, ops out)."""
    ops: dict[str, str | None] = {}
    merged: list[str] = []
    conflicts: list[tuple[str, str]] = []
    for path in sorted(set(ancestor) | set(base) | set(evolved)):
        old, ours, theirs = ancestor.get(path), base.get(path), evolved.get(path)
        if theirs in (old, ours):
            continue  # not evolved, or the base already has it
        if ours == old:
            ops[path] = theirs  # only the ledger changed it
            continue
        if ours is None:
            conflicts.append((path, "the base branch deleted it and the ledger edited it"))
            continue
        if theirs is None:
            conflicts.append((path, "the ledger deleted it and the base branch edited it"))
            continue
        result = merge3(old or "", ours, theirs, labels=("base branch", "ancestor", "ledger"))
        if result.clean:
            ops[path] = result.text
            merged.append(path)
        else:
            what = "added it with different content" if old is None else "changed the same lines"
            conflicts.append((path, f"the base branch and the ledger both {what}"))
    return CarryPlan(ops, tuple(merged), tuple(conflicts))


def carry_commit(
    repo: GitRepo,
    tree: FileTree,
    *,
    branch: str,
    tip: str,
    tip_version: int,
    onto: str,
    first_parent: str,
    version: int,
) -> CarryOutcome:
    """Write the carry commit of ``tip`` onto ``onto`` (no ref moves).

    ``first_parent`` is normally ``onto``; when stable and dev are carried
    together, dev's carry sits on stable's so that stable stays a dev commit.
    """
    ancestor = repo.merge_base(tip, onto)
    if ancestor is None:
        raise _no_merge_base(repo, branch, tip, onto)
    ancestor_state = tree.load_git(repo.commit(ancestor).tree)
    base_state = tree.load_git(repo.commit(onto).tree)
    evolved_state = tree.load_git(repo.commit(tip).tree)
    plan = plan_carry(ancestor_state, base_state, evolved_state)
    new_tree = repo.build_tree(onto, plan.ops, repo.write_blobs(plan.ops))
    conflict_paths = [p for p, _ in plan.conflicts]
    message = carry_message(
        version=version,
        base=onto,
        carried=tip,
        carried_version=tip_version,
        ancestor=ancestor,
        branch=branch,
        merged=plan.merged,
        conflicts=conflict_paths,
    )
    sha = repo.commit_tree(new_tree, _unique([first_parent, tip]), message)
    conflicts = tuple(CarryConflict(branch, p, why, tip) for p, why in plan.conflicts)
    return CarryOutcome(sha, version, plan.merged, conflicts)


def _unique(shas: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(shas))


def _no_merge_base(repo: GitRepo, branch: str, tip: str, onto: str) -> LedgerError:
    if repo.is_shallow():
        return LedgerError(
            f"the base moved since {branch} was cut, and carrying the evolved files onto "
            f"{onto[:12]} needs the common history of {tip[:12]} and {onto[:12]}, which this "
            "shallow clone does not have. Fetch the full history (git fetch --unshallow), "
            "or in GitHub Actions check out with `fetch-depth: 0`."
        )
    return LedgerError(
        f"{branch} ({tip[:12]}) shares no history with the base {onto[:12]}, so its evolved "
        f"files cannot be carried over. If {branch} belongs to another project, delete it "
        f"(git branch -D {branch}) or choose another branch prefix (--evolve-branch-prefix)."
    )
