"""Object-level git on the user's repository: blobs, trees, commits, atomic ref updates.

Everything here is git *plumbing* run through GitPython with the isolated
environment of :mod:`.gitenv`.  Nothing reads or writes the working tree, the
index (``.git/index``), ``HEAD`` or a ref the caller did not name:

- blobs are written with ``git hash-object -w --no-filters`` (exact bytes, no
  line-ending or attribute conversion);
- new trees are written object by object from the parent tree (:mod:`.objects`),
  never through an index.  GitPython's ``IndexFile.from_tree`` in particular is
  avoided: it moves the user's ``.git/index`` aside while it works;
- commits are written as objects too, unsigned, with our identity and a UTF-8
  message.  GitPython's ``Commit.create_from_tree`` is avoided because it reads
  the user's global configuration through its own parser
  (``i18n.commitEncoding``, identity), which the isolated environment cannot
  reach;
- refs move only through ``git update-ref --stdin``: one transaction holding
  every update with its expected old value, so a set of refs moves atomically
  and only if nobody moved them first (compare-and-swap, done by git itself).

No command here runs a filter driver, a hook or a transport, even one a
candidate planted in ``.git/config`` under ``local``: blobs are hashed with
``--no-filters``, objects are read by GitPython's ``cat-file --batch`` (no
conversion), ``rev-parse``/``symbolic-ref``/``merge-base`` touch no file
content, the ``reference-transaction`` hook of ``update-ref`` is off
(``core.hooksPath`` = ``os.devnull``) and ``protocol.allow=never`` forbids
fetching (:mod:`.gitenv`).  So the filter overrides of
:func:`.gitenv.with_neutral_filters` are not needed here (the workspace's
``git status`` does need them).

GitPython's object database keeps long-running ``git cat-file`` processes that
must not be shared between threads, so each thread gets its own ``Repo``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from agentdescent_core.errors import LedgerError, RefUpdateFailed as RefUpdateFailed
from agentdescent_core.ledger.gitenv import (
    DEFAULT_IDENTITY,
    isolated_env,
    validate_identity,
)
from agentdescent_core.ledger.objects import apply_ops_to_tree, write_commit

_LOCK_RE = re.compile(r"Unable to create '([^']+\.lock)': File exists")
_CLASH_RE = re.compile(r"'([^']+)' exists; cannot create '([^']+)'")


@dataclass(frozen=True)
class RefUpdate:
    """Move ``ref`` to ``new`` provided it is still at ``old`` (None: must not exist)."""

    ref: str
    new: str
    old: str | None


class GitRepo:
    """One user repository, opened for plumbing with the isolated git environment."""

    def __init__(self, path: str | os.PathLike[str], identity: tuple[str, str] | None) -> None:
        self.identity = validate_identity(identity or DEFAULT_IDENTITY)
        self.path = os.path.abspath(os.fspath(path))
        probe = _open_repo(self.path)
        self.bare = probe.bare
        self.git_dir = os.path.abspath(probe.git_dir)
        self.common_dir = os.path.abspath(probe.common_dir)
        self.work_tree = None if self.bare else os.path.abspath(str(probe.working_tree_dir))
        probe.close()
        self._tmp = tempfile.mkdtemp(prefix="agentdescent-ledger-")
        # Removed even if close() is never called (at garbage collection or exit).
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        # No filter-driver overrides (gitenv.with_neutral_filters): no command run
        # here converts a file (see the module docstring), so none would apply.
        self.env = isolated_env(
            git_dir=self.git_dir,
            common_dir=self.common_dir,
            work_tree=self.work_tree,
            private_index=os.path.join(self._tmp, "no-index"),
            identity=self.identity,
        )
        self._local = threading.local()
        self._opened: list[git.Repo] = []
        self._lock = threading.Lock()
        self._closed = False
        _, fmt, _ = self.run("rev-parse", "--show-object-format", allow_fail=True)
        if fmt.strip() not in ("", "sha1"):
            self.close()
            raise LedgerError(
                f"{self.path} uses {fmt.strip()} object ids; the ledger (through GitPython) "
                "supports SHA-1 repositories only"
            )
        self.zero_oid = "0" * 40

    # ------------------------------------------------------------ lifecycle

    @property
    def repo(self) -> git.Repo:
        """This thread's GitPython Repo (object reads go through it)."""
        repo: git.Repo | None = getattr(self._local, "repo", None)
        if repo is None:
            if self._closed:
                raise LedgerError("the ledger was closed; open a new Ledger to keep working")
            repo = git.Repo(self.path)
            repo.git.update_environment(**self.env)
            with self._lock:
                self._opened.append(repo)
            self._local.repo = repo
        return repo

    def close(self) -> None:
        """Stop GitPython's helper processes and remove our temporary files."""
        self._closed = True
        with self._lock:
            opened, self._opened = self._opened, []
        for repo in opened:
            repo.close()
        self._local = threading.local()
        self._cleanup()

    @contextmanager
    def tempdir(self) -> Iterator[str]:
        """A private scratch directory for one operation (thread-safe, removed after)."""
        path = os.path.join(self._tmp, uuid.uuid4().hex)
        os.mkdir(path)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------ running git

    def run(
        self,
        *args: str,
        allow_fail: bool = False,
        env: Mapping[str, str] | None = None,
        stdin_path: str | None = None,
    ) -> tuple[int, str, str]:
        """Run ``git <args>``; return (status, stdout, stderr), raising unless ``allow_fail``."""
        kwargs: dict[str, Any] = {
            "with_extended_output": True,
            "with_exceptions": False,
            "env": dict(env) if env else None,
        }
        handle = open(stdin_path, "rb") if stdin_path else None  # noqa: SIM115
        try:
            if handle is not None:
                kwargs["istream"] = handle
            status, out, err = self.repo.git.execute(["git", *args], **kwargs)
        finally:
            if handle is not None:
                handle.close()
        assert isinstance(status, int)
        assert isinstance(out, str)
        assert isinstance(err, str)
        if status != 0 and not allow_fail:
            raise GitCommandError(["git", *args], status, err, out)
        return status, out, err

    # ------------------------------------------------------------ reading

    def resolve(self, rev: str) -> str | None:
        """Full sha of the commit ``rev`` names, or None when it names none."""
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", "--end-of-options",
                                  f"{rev}^{{commit}}", allow_fail=True)
        return out.strip() if status == 0 and out.strip() else None

    def ref_value(self, ref: str) -> str | None:
        """The commit a full ref name (``refs/heads/...``) points at, or None.

        Read in-process first (a loose ref file or ``packed-refs``; git replaces
        them by atomic rename, so a read sees the old or the new value, never a
        torn one), which keeps the compare-and-swap window short; anything
        unusual (a missing ref, a reftable repository) is asked of git.
        """
        try:
            sha = str(git.Reference(self.repo, ref, check_path=False).object.hexsha)
        except (ValueError, OSError, TypeError, AttributeError):
            return self.resolve(ref)
        return sha if len(sha) == len(self.zero_oid) else self.resolve(ref)

    def head_symref(self) -> str | None:
        """The ref HEAD is attached to, or None for a detached (or missing) HEAD."""
        status, out, _ = self.run("symbolic-ref", "--quiet", "HEAD", allow_fail=True)
        return out.strip() if status == 0 else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        status, _, err = self.run("merge-base", "--is-ancestor", ancestor, descendant,
                                  allow_fail=True)
        if status not in (0, 1):
            raise LedgerError(f"git merge-base --is-ancestor failed: {err.strip()}")
        return status == 0

    def merge_base(self, a: str, b: str) -> str | None:
        status, out, _ = self.run("merge-base", a, b, allow_fail=True)
        return out.split()[0] if status == 0 and out.strip() else None

    def is_shallow(self) -> bool:
        _, out, _ = self.run("rev-parse", "--is-shallow-repository", allow_fail=True)
        return out.strip() == "true"

    def commit(self, sha: str) -> git.Commit:
        return self.repo.commit(sha)

    def message(self, sha: str) -> str:
        raw = self.repo.commit(sha).message
        return raw if isinstance(raw, str) else raw.decode("utf-8", "replace")

    def tree_sha(self, commit_sha: str) -> str:
        return str(self.repo.commit(commit_sha).tree.hexsha)

    # ------------------------------------------------------------ writing objects

    def write_blobs(self, ops: Mapping[str, str | None]) -> dict[str, str]:
        """Store every written text of ``ops`` as a blob; return {path: blob sha}.

        Bytes are the UTF-8 encoding of the text exactly (``--no-filters``: no
        line-ending or attribute conversion).  One git process for all blobs.
        """
        written = [(path, text) for path, text in ops.items() if text is not None]
        if not written:
            return {}
        with self.tempdir() as work:
            listing = os.path.join(work, "paths")
            with open(listing, "w", encoding="utf-8") as out:
                for i, (_, text) in enumerate(written):
                    blob_path = os.path.join(work, f"blob{i}")
                    with open(blob_path, "wb") as handle:
                        handle.write(text.encode("utf-8"))
                    out.write(blob_path + "\n")
            _, stdout, _ = self.run("hash-object", "-w", "--no-filters", "--stdin-paths",
                                    stdin_path=listing)
        shas = stdout.split()
        if len(shas) != len(written):
            raise LedgerError(f"git hash-object returned {len(shas)} ids for {len(written)} blobs")
        return {path: sha for (path, _), sha in zip(written, shas, strict=True)}

    def build_tree(self, parent_commit: str | None, ops: Mapping[str, str | None],
                   blobs: Mapping[str, str]) -> str:
        """Tree id of ``parent_commit``'s tree (None: empty) with ``ops`` applied.

        ``blobs`` maps each written path to its blob id (from :meth:`write_blobs`).
        See :mod:`.objects` for the rules (modes kept, file/directory clashes refused).
        """
        parent_tree = self.tree_sha(parent_commit) if parent_commit else None
        return apply_ops_to_tree(self.repo, parent_tree, ops, blobs)

    def commit_tree(self, tree: str, parents: Sequence[str], message: str) -> str:
        """Write a commit object (unsigned, our identity); no ref moves."""
        return write_commit(self.repo, tree, parents, message, self.identity)

    # ------------------------------------------------------------ refs

    def update_refs(self, updates: Sequence[RefUpdate], reason: str) -> None:
        """Apply all ``updates`` atomically, each only if its ref is still at ``old``."""
        with self.tempdir() as work:
            script = os.path.join(work, "updates")
            with open(script, "w", encoding="utf-8") as handle:
                for upd in updates:
                    handle.write(f"update {upd.ref} {upd.new} {upd.old or self.zero_oid}\n")
            # Under the journal's lock, so a tamper check never sees half a transaction.
            from agentdescent_core.sandbox import journal

            with journal.LOCK:
                status, _, err = self.run("update-ref", "-m", reason, "--stdin",
                                          stdin_path=script, allow_fail=True)
                if status == 0:
                    journal.refs_moved(self.common_dir, [
                        journal.RefMove(upd.ref, upd.old, upd.new) for upd in updates])
        if status == 0:
            return
        lock = _LOCK_RE.search(err)
        if lock:
            raise RefUpdateFailed("lock", err.strip(), lock_path=lock.group(1))
        if "but expected" in err or "reference already exists" in err:
            raise RefUpdateFailed("race", err.strip())
        clash = _CLASH_RE.search(err)
        if clash:
            raise RefUpdateFailed(
                "other",
                f"the branch {clash.group(1).removeprefix('refs/heads/')!r} exists, so git "
                f"cannot create {clash.group(2).removeprefix('refs/heads/')!r} below it; "
                "rename that branch or choose another branch prefix (--evolve-branch-prefix)",
            )
        for upd in updates:
            if self.ref_value(upd.ref) != upd.old:
                raise RefUpdateFailed("race", f"{upd.ref} moved: {err.strip()}")
        raise RefUpdateFailed("other", err.strip())

    def lock_path_of(self, ref: str) -> str:
        return os.path.join(self.common_dir, *ref.split("/")) + ".lock"


def _open_repo(path: str) -> git.Repo:
    """Open the repository whose top directory (or bare git dir) is ``path``."""
    if not os.path.isdir(path):
        raise LedgerError(
            f"{path} does not exist or is not a directory; pass the top directory of "
            "your git repository"
        )
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        try:
            outer = git.Repo(path, search_parent_directories=True)
        except (InvalidGitRepositoryError, NoSuchPathError):
            raise LedgerError(
                f"{path} is not a git repository; agentdescent records versions as commits "
                f"in your repository, so create one first: cd {path} && git init && "
                "git add -A && git commit -m 'initial commit'"
            ) from None
        top = outer.working_tree_dir or outer.git_dir
        outer.close()
        raise LedgerError(
            f"{path} is inside the git repository {top}, not its top directory; pass "
            f"{top} (artifact paths are relative to the repository top)"
        ) from None
    if not repo.bare and repo.working_tree_dir is not None:
        top = os.path.realpath(str(repo.working_tree_dir))
        if top != os.path.realpath(path):
            repo.close()
            raise LedgerError(
                f"{path} is inside the git repository {top}, not its top directory; pass {top}"
            )
    return repo
