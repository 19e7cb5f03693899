"""The Ledger: accepted versions as commits on ``<prefix>dev`` in the user's repository.

Two branches carry a run's history, ``refs/heads/<prefix>dev`` (every accepted
version) and ``refs/heads/<prefix>stable`` (the last promoted one, always a dev
commit).  Every version is a real commit with the real file changes of its
Diff, so ``git log base..agentdescent/dev`` and ``git show --stat`` tell the
story, and its evidence (version, rewards, P(improvement), author, diff id)
rides along as git trailers (:mod:`.message`).

What the ledger never does: touch the working tree, the index, ``HEAD`` or any
ref outside the prefix.  Trees and commits are written as objects
(:mod:`.objects`) and refs move by compare-and-swap (:mod:`.plumbing`), so
several threads or processes can commit to the same dev branch and no update is
ever lost: a writer that loses the race re-reads the head, re-applies its ops
on it and tries again a bounded number of times (at once, then with jittered
backoff), then raises :class:`CasConflictError`.

Versions are numbered per run history: the base commit is version 0 and each
dev commit is its first parent's version + 1 (read from the parent's trailer).
A carry onto a moved base (:mod:`.branches`, :mod:`.carry`) takes the carried
dev head's version + 1 although its first parent is the new base, so the
numbers along dev stay unique and increasing; :meth:`Ledger.history` lists the
versions since the current base.

Edge cases and what happens:

- detached HEAD: works, the base is the commit HEAD points at;
- HEAD (of the main checkout or any linked worktree) attached to a ledger
  branch: refused, because moving that branch would change that checkout;
- a held ``.git/index.lock``: irrelevant, the index is never read or written;
- a held ref lock (``.git/refs/heads/<prefix>dev.lock``): retried, then a
  LedgerError naming the lock file;
- a shallow clone: works as long as no carry needs history it lacks, then a
  LedgerError saying to fetch the full history.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import git

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import CasConflictError, LedgerError
from agentdescent_core.ledger.branches import BranchesResult, ensure_once, version_of
from agentdescent_core.ledger.message import (
    BASE,
    Evidence,
    VersionRecord,
    commit_message,
    parse_message,
)
from agentdescent_core.ledger.plumbing import GitRepo, RefUpdate, RefUpdateFailed

if TYPE_CHECKING:
    from agentdescent_core.ledger.scratch import ScratchLedger


_T = TypeVar("_T")

_WRITER_LOCKS: dict[str, threading.RLock] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


def _writer_lock(common_dir: str) -> threading.RLock:
    """The lock serialising this process's ledger writes to one repository.

    Re-entrant, so a write made from inside another (a callback that commits)
    still goes through and simply makes the outer one retry.
    """
    key = os.path.realpath(common_dir)
    with _WRITER_LOCKS_GUARD:
        return _WRITER_LOCKS.setdefault(key, threading.RLock())


@dataclass(frozen=True)
class CommitResult:
    """Outcome of :meth:`Ledger.commit`.

    ``committed`` is False when the diff changed nothing: then ``sha`` and
    ``version`` are the unchanged dev head.  ``attempts`` counts CAS attempts.
    """

    sha: str
    version: int
    committed: bool = True
    parent: str | None = None
    attempts: int = 1


@dataclass(frozen=True)
class PromoteResult:
    """Outcome of :meth:`Ledger.promote`; ``moved`` is False when stable was already there."""

    sha: str
    version: int
    previous: str | None
    moved: bool


def validate_prefix(prefix: str) -> str:
    """The branch prefix if ``<prefix>dev`` and ``<prefix>stable`` are valid branch names."""
    if not isinstance(prefix, str) or not prefix:
        raise LedgerError(
            "the branch prefix must be a non-empty string such as 'agentdescent/'; an empty "
            "prefix would use plain 'dev' and 'stable', which are often your own branches"
        )
    runner = git.Git()
    for name in ("dev", "stable"):
        ref = f"refs/heads/{prefix}{name}"
        status, _, _ = runner.execute(
            ["git", "check-ref-format", ref], with_extended_output=True, with_exceptions=False
        )
        if status != 0:
            raise LedgerError(
                f"branch prefix {prefix!r} gives the invalid branch name {prefix + name!r} "
                "(git check-ref-format); use letters, digits, '-', '_', '.' and '/' "
                "separators, e.g. 'agentdescent/'"
            )
    return prefix


class Ledger:
    """Versions of one FileTree artifact as commits in the repository at ``repo_path``.

    ``repo_path`` is the repository's top directory (or a bare repository).
    ``identity`` is the (name, email) for the commits, default ``agentdescent
    <agentdescent@users.noreply.github.com>``.  A Ledger may be shared by threads;
    call :meth:`close` (or use it as a context manager) when done.
    """

    def __init__(
        self,
        repo_path: str | os.PathLike[str],
        tree: FileTree,
        *,
        prefix: str = "agentdescent/",
        identity: tuple[str, str] | None = None,
        max_cas_retries: int = 8,
    ) -> None:
        self.prefix = validate_prefix(prefix)
        if not isinstance(max_cas_retries, int) or max_cas_retries < 0:
            raise LedgerError(f"max_cas_retries must be an integer >= 0, got {max_cas_retries!r}")
        self.tree = tree
        self.max_cas_retries = max_cas_retries
        self.git = GitRepo(repo_path, identity)
        self.repo_path = self.git.path
        self.dev_branch = f"{prefix}dev"
        self.stable_branch = f"{prefix}stable"
        self._rng = random.Random()

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def scratch(
        cls,
        files: Mapping[str, str],
        tree: FileTree,
        *,
        prefix: str = "agentdescent/",
        identity: tuple[str, str] | None = None,
        max_cas_retries: int = 8,
    ) -> ScratchLedger:
        """A ledger on a throwaway repository holding ``files`` (see :mod:`.scratch`)."""
        from agentdescent_core.ledger.scratch import ScratchLedger

        return ScratchLedger(
            files, tree, prefix=prefix, identity=identity, max_cas_retries=max_cas_retries
        )

    def close(self) -> None:
        self.git.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.repo_path!r}, prefix={self.prefix!r})"

    # ------------------------------------------------------------ reading

    def ref(self, branch: str = "dev") -> str:
        """Full ref name of ``branch`` ('dev', 'stable' or the full short name)."""
        short = {"dev": self.dev_branch, "stable": self.stable_branch}.get(branch, branch)
        if short not in (self.dev_branch, self.stable_branch):
            raise LedgerError(
                f"unknown ledger branch {branch!r}; use 'dev' or 'stable' "
                f"({self.dev_branch} / {self.stable_branch})"
            )
        return f"refs/heads/{short}"

    def head(self, branch: str = "dev") -> str:
        """Commit sha the ledger branch points at."""
        ref = self.ref(branch)
        sha = self.git.ref_value(ref)
        if sha is None:
            raise LedgerError(
                f"{ref.removeprefix('refs/heads/')} does not exist in {self.repo_path}; "
                "call ensure_branches() first"
            )
        return sha

    def head_or_none(self, branch: str = "dev") -> str | None:
        """The branch's commit, or None when it does not exist (or cannot be read).

        For the end of a run: the report names the heads that exist, and a
        failing ledger must not turn a finished run into a crash.
        """
        try:
            return self.head(branch)
        except LedgerError:
            return None

    def state_or_none(self, branch: str = "dev") -> dict[str, str] | None:
        """The artifact files at the branch's head, or None when they cannot be read."""
        try:
            return dict(self.read_state(self.head(branch)))
        except LedgerError:
            return None

    def version_of(self, sha: str) -> int:
        """Version of a commit: its trailer on a ledger commit, 0 for any other commit."""
        return version_of(self.git, sha)

    def history(self, branch: str = "dev") -> list[VersionRecord]:
        """Versions from the base (version 0) to the branch head, oldest first.

        Follows first parents from the head to the commit recorded as the base of
        this history.  After a carry the walk ends at the new base; older
        versions stay reachable through the carry commit's second parent.
        """
        sha: str | None = self.head(branch)
        records: list[VersionRecord] = []
        base: str | None = None
        while sha is not None:
            parsed = parse_message(self.git.message(sha))
            version = parsed.version
            if base is None and version is not None:
                base = parsed.get(BASE)
            is_base = version is None or sha == base or parsed.get(BASE) != base
            records.append(VersionRecord(
                version=0 if is_base else int(version or 0),
                sha=sha,
                subject=parsed.subject,
                trailers=parsed.trailers,
                rationale=parsed.body,
            ))
            if is_base:
                break
            parents = self.git.commit(sha).parents
            sha = str(parents[0].hexsha) if parents else None
        records.reverse()
        return records

    def read_state(self, rev_or_version: str | int) -> dict[str, str]:
        """The artifact state ({path: text}) at a version number (on dev) or a revision."""
        sha = self._resolve_target(rev_or_version)
        return self.tree.load_git(self.git.commit(sha).tree)

    # ------------------------------------------------------------ branches

    def ensure_branches(self, base: str = "HEAD") -> BranchesResult:
        """Create or reuse dev and stable for the base commit ``base`` names.

        Missing branches are created at the base; existing ones are reused
        (resume).  A branch that does not contain the base (the base branch moved
        since it was cut) is carried onto it (:mod:`.carry`).  All ref changes
        happen in one atomic transaction; if another process changed the refs
        meanwhile, the whole decision is re-made.
        """
        self._refuse_checked_out()
        return self._with_cas(
            "ensure the ledger branches",
            lambda _: ensure_once(
                self.git, self.tree, base_sha=self._resolve_base(base),
                dev_branch=self.dev_branch, stable_branch=self.stable_branch,
            ),
        )

    # ------------------------------------------------------------ commit

    def commit(
        self,
        diff: Diff,
        *,
        evidence: Evidence | None = None,
        expected_head: str | None = None,
    ) -> CommitResult:
        """Commit ``diff`` onto dev as the next version (compare-and-swap on the ref).

        The ops are validated by the FileTree first.  With ``expected_head``, the
        commit only lands on that exact head: if dev is elsewhere (now or by the
        time the ref is swapped) CasConflictError is raised at once, and the
        caller decides whether the diff is stale.  Without it, a lost race is
        retried on the new head.  A diff that changes nothing commits nothing.
        """
        ops = self.tree.validate_ops(diff.ops)
        self._refuse_checked_out()
        blobs = self.git.write_blobs(ops)
        dev_ref = self.ref("dev")

        def attempt(number: int) -> CommitResult:
            head = self.head("dev")
            if expected_head is not None and head != expected_head:
                raise CasConflictError(
                    f"{self.dev_branch} is at {head[:12]}, not at the expected "
                    f"{expected_head[:12]}; re-read the head and re-check the diff"
                )
            parsed = parse_message(self.git.message(head))
            version = parsed.version or 0
            base = parsed.get(BASE) if parsed.version is not None else head
            assert base is not None
            new_tree = self.git.build_tree(head, ops, blobs)
            if new_tree == self.git.tree_sha(head):
                return CommitResult(head, version, committed=False, parent=head,
                                    attempts=number)
            message = commit_message(
                version=version + 1, base=base, diff=diff, paths=list(ops),
                evidence=evidence, roots=self.tree.roots,
            )
            sha = self.git.commit_tree(new_tree, [head], message)
            try:
                self.git.update_refs([RefUpdate(dev_ref, sha, head)],
                                     f"agentdescent: v{version + 1}")
            except RefUpdateFailed as exc:
                if exc.kind == "race" and expected_head is not None:
                    raise CasConflictError(
                        f"{self.dev_branch} moved away from the expected head "
                        f"{expected_head[:12]} while committing; re-read and re-check the diff"
                    ) from None
                raise
            return CommitResult(sha, version + 1, parent=head, attempts=number)

        return self._with_cas(f"commit to {self.dev_branch}", attempt)

    # ------------------------------------------------------------ promote

    def promote(self, rev: str | int | None = None) -> PromoteResult:
        """Move stable to a dev commit (default: the dev head) by compare-and-swap.

        Only commits on dev's history since its base may be promoted; anything
        else (a commit of another branch, a version from before a carry) is
        refused.  Moving stable back to an older dev version is allowed (rollback).
        """
        self._refuse_checked_out()
        stable_ref = self.ref("stable")

        def attempt(number: int) -> PromoteResult:
            target = self.head("dev") if rev is None else self._resolve_target(rev)
            on_dev = {r.sha: r.version for r in self.history("dev")}
            if target not in on_dev:
                raise LedgerError(
                    f"refusing to promote {target[:12]}: it is not a commit of "
                    f"{self.dev_branch}'s history since its base; promote a version listed by "
                    "history()"
                )
            current = self.git.ref_value(stable_ref)
            if current == target:
                return PromoteResult(target, on_dev[target], current, moved=False)
            self.git.update_refs([RefUpdate(stable_ref, target, current)],
                                 f"agentdescent: promote v{on_dev[target]}")
            return PromoteResult(target, on_dev[target], current, moved=True)

        return self._with_cas(f"promote {self.stable_branch}", attempt)

    def forget_branches(self, created: Sequence[str], at: str) -> list[str]:
        """Delete the ledger branches in ``created`` that still point at ``at``.

        For a run that created its branches and then could not even measure its
        baseline: it leaves no ref behind that it created.  A branch that moved
        since (another run committed to it) is kept.  Returns the short names of
        the branches deleted.
        """
        updates = []
        for short in created:
            ref = f"refs/heads/{short}"
            if short in (self.dev_branch, self.stable_branch) and self.git.ref_value(ref) == at:
                updates.append(RefUpdate(ref, self.git.zero_oid, at))
        if not updates:
            return []
        try:
            self.git.update_refs(updates, "agentdescent: remove the branches of an aborted run")
        except RefUpdateFailed:
            return []  # moved meanwhile: someone else's now
        return [u.ref.removeprefix("refs/heads/") for u in updates]

    # ------------------------------------------------------------ internals

    def _with_cas(self, what: str, attempt: Callable[[int], _T]) -> _T:
        """Run ``attempt`` until its ref transaction applies; back off between tries.

        Writers in this process take turns through a lock per repository, so
        threads never spend the retry budget racing each other; the
        compare-and-swap is what protects against other processes.
        """
        lock_path: str | None = None
        for number in range(self.max_cas_retries + 1):
            try:
                with _writer_lock(self.git.common_dir):
                    return attempt(number + 1)
            except RefUpdateFailed as exc:
                if exc.kind == "other":
                    raise LedgerError(f"could not {what}: {exc}") from None
                lock_path = exc.lock_path if exc.kind == "lock" else None
            if 0 < number < self.max_cas_retries:
                # The first retry goes at once: having just lost, we hold the freshest
                # head and the winner is busy preparing its next change.  Further
                # losses mean real contention: back off with full jitter.
                time.sleep(self._rng.uniform(0.0, min(0.005 * 2**number, 0.25)))
        if lock_path is not None:
            raise LedgerError(
                f"could not {what}: the lock file {lock_path} is held. If no other agentdescent "
                f"or git process is running in this repository, remove it (rm '{lock_path}') "
                "and try again."
            )
        raise CasConflictError(
            f"could not {what}: other writers moved the branch on each of "
            f"{self.max_cas_retries + 1} attempts; raise max_cas_retries or reduce the number "
            "of concurrent writers"
        )

    def _resolve_base(self, base: str) -> str:
        sha = self.git.resolve(base)
        if sha is not None:
            return sha
        if base == "HEAD" and self.git.resolve("HEAD") is None:
            raise LedgerError(
                f"the repository {self.repo_path} has no commits yet, so there is no base to "
                "branch from; commit your files first (git add -A && git commit -m 'initial')"
            )
        raise LedgerError(
            f"base {base!r} does not name a commit in {self.repo_path}; pass a branch, tag or "
            "commit sha (default: HEAD)"
        )

    def _resolve_target(self, rev: str | int) -> str:
        if isinstance(rev, bool) or not isinstance(rev, (int, str)):
            raise LedgerError(f"expected a version number or a revision, got {rev!r}")
        if isinstance(rev, int):
            records = self.history("dev")
            for record in reversed(records):
                if record.version == rev:
                    return record.sha
            known = ", ".join(str(r.version) for r in records)
            raise LedgerError(
                f"there is no version {rev} on {self.dev_branch} (versions since its base: "
                f"{known})"
            )
        sha = self.git.resolve(rev)
        if sha is None:
            raise LedgerError(f"{rev!r} does not name a commit in {self.repo_path}")
        return sha

    def _refuse_checked_out(self) -> None:
        """Moving a branch someone has checked out would change that checkout.

        Looks at HEAD of the main working tree and of every linked worktree.
        """
        ours = (self.ref("dev"), self.ref("stable"))
        common = self.git.common_dir
        head_files = [os.path.join(self.git.git_dir, "HEAD"), os.path.join(common, "HEAD")]
        worktrees = os.path.join(common, "worktrees")
        if os.path.isdir(worktrees):
            head_files += [os.path.join(worktrees, name, "HEAD") for name in os.listdir(worktrees)]
        for head_file in dict.fromkeys(head_files):
            try:
                with open(head_file, encoding="utf-8") as handle:
                    content = handle.read().strip()
            except OSError:
                continue
            attached = content[4:].strip() if content.startswith("ref:") else None
            if attached in ours:
                assert attached is not None
                branch = attached.removeprefix("refs/heads/")
                where = os.path.dirname(head_file)
                raise LedgerError(
                    f"HEAD of {where} is on {branch}, a ledger branch; the ledger never moves "
                    "a branch that is checked out. Switch that checkout to your own branch "
                    "(git switch -), or use another branch prefix."
                )
