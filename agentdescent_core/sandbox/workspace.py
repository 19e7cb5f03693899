"""Workspaces: a worker's private copy of the repository, reset between candidates.

Each evaluation worker owns one :class:`Workspace`, created once from a ledger
commit and reused for every candidate it evaluates.  Three promises hold:

* **The user's repository is only read.**  The copy is made with ``git
  read-tree`` into a private index file (kept in the workspace's own state
  directory) and ``git checkout-index`` into the workspace, with the isolated
  git environment of :mod:`agentdescent_core.ledger.gitenv`; the user's working
  tree, ``.git/index`` and ``HEAD`` are never touched, and their uncommitted
  files never reach a candidate (:func:`dirty_paths` lets the caller warn).
  What is read from the user's repository, and how, is :mod:`.userrepo`.
* **A reset costs what changed, not what exists** (:mod:`.reset`, the base
  of :class:`Workspace` that holds :meth:`Workspace.reset`).
* **Frozen paths are checked, not trusted** (:mod:`.frozencheck`, which holds
  :meth:`Workspace.check`, :meth:`Workspace.writes` and the result types).

This module creates the copy (the committed files, plus the git-ignored files
plain ``pytest`` would import), hands out scratch directories for runs and
removes everything at :meth:`Workspace.close`.  The names of the other three
modules that callers use are importable from here too.

A workspace is used by one thread at a time (an internal lock serialises
callers that forget).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path

import git
from git.exc import GitCommandError

from agentdescent_core.artifacts.filetree import IGNORED_NAMES, IGNORED_SUFFIXES, FileTree
from agentdescent_core.artifacts.paths import is_inside, normalise_path
from agentdescent_core.errors import RefusalError, WorkspaceError as WorkspaceError
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger.gitenv import isolated_env, objects_only_env, with_neutral_filters
from agentdescent_core.sandbox.frozencheck import (
    MAX_PROTECTED_FILES as MAX_PROTECTED_FILES,
    VIOLATION_KINDS as VIOLATION_KINDS,
    FrozenCheck as FrozenCheck,
    ResetStats as ResetStats,
    Violation as Violation,
)
from agentdescent_core.sandbox.reset import _ResettableCopy
from agentdescent_core.sandbox.snapshot import (
    Content,
    Known,
    content_of,
    digest_bytes,
    ensure_dirs,
    is_cache,
    remove_path,
    remove_tree,
    scan,
    write_file,
)
from agentdescent_core.sandbox.userrepo import (
    _DIR_MODE,
    _FILE_MODE,
    _holds_secret,
    _ls_files,
    _open_repo,
    _read_plain_file,
    dirty_paths as dirty_paths,
    uncommitted_changes as uncommitted_changes,
)

_GITLINK_MODE = "160000"
_HASH_DOMAIN = b"agentdescent-frozen-tree-v1\x00"
_IGNORED_DOMAIN = b"agentdescent-ignored-files-v1\x00"

IGNORED_IMPORTABLE_SUFFIXES: tuple[str, ...] = (".py", ".pyi", ".so", ".pyd")
"""Kinds of git-ignored files copied from the working tree: what ``import`` loads.

A hatch-vcs / setuptools-scm ``_version.py`` and a compiled extension built in
place (``pip install -e .``, ``build_ext --inplace``) are ignored by git but
imported by plain ``pytest``; without them the copy does not import.
"""
MAX_IGNORED_FILE_BYTES = 64 * 1024 * 1024
"""A larger ignored file is not copied (:attr:`Workspace.ignored_skipped` names it)."""
MAX_IGNORED_BYTES = 256 * 1024 * 1024
"""At most this much of ignored files in all is copied (kept in memory to restore them)."""

# Never copied even when importable: environments, caches, build output.
_IGNORED_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules",
                                "build", "dist", "venv", "virtualenv"})
# A name that says it holds a secret is never copied: secrets must not reach a candidate.
_SECRET_NAME_PARTS = ("secret", "credential", "password", "passwd", "token", "apikey",
                      "api_key", "local_settings", "settings_local")


class Workspace(_ResettableCopy):
    """A private copy of the repository at one commit; see the module docstring.

    Build one with :meth:`create`; the constructor is not public.
    """

    root: Path
    state_dir: Path
    commit: str
    frozen_tree_hash: str
    repo: str
    tree: FileTree
    frozen: FrozenSet
    _container: str
    _finalizer: weakref.finalize[..., Workspace]

    def __init__(self, *, _token: object = None) -> None:
        if _token is not _CREATE_TOKEN:
            raise TypeError("use Workspace.create(repo, commit, tree=..., frozen=...)")

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(
        cls,
        repo: str | os.PathLike[str],
        commit: str,
        *,
        tree: FileTree,
        frozen: FrozenSet,
        parent: str | os.PathLike[str] | None = None,
    ) -> Workspace:
        """Copy the committed tree at ``commit`` of ``repo`` into a new private directory.

        The directory is created under ``parent`` (default: the system temporary
        directory) with the prefix ``agentdescent-ws-``; it holds the copy
        (:attr:`root`, named like the repository) and the state directory.
        ``parent`` may not lie inside the repository's working tree: the copy
        must stay out of the user's files, and sandboxes hide the repository.
        """
        if not isinstance(commit, str) or not commit.strip() or commit.startswith("-"):
            raise ValueError(
                f"commit must name a commit of the repository (a sha, branch or tag), "
                f"got {commit!r}"
            )
        repo_path = os.path.abspath(os.fspath(repo))
        git_dir, common_dir, work_tree = _open_repo(repo_path)
        base_parent = os.path.realpath(os.fspath(parent) if parent is not None
                                       else tempfile.gettempdir())
        if work_tree is not None and _is_within(base_parent, os.path.realpath(work_tree)):
            raise ValueError(
                f"workspace parent {base_parent!r} lies inside the repository {work_tree!r}; "
                f"choose a directory outside it (the default, the system temporary "
                f"directory, is)"
            )
        os.makedirs(base_parent, exist_ok=True)
        container = tempfile.mkdtemp(prefix="agentdescent-ws-", dir=base_parent)
        self = cls(_token=_CREATE_TOKEN)
        self._container = container
        self._finalizer = weakref.finalize(self, shutil.rmtree, container, True)
        try:
            self._setup(repo_path, git_dir, common_dir, work_tree, commit, tree, frozen)
        except BaseException:
            self.close()
            raise
        return self

    def _setup(
        self,
        repo_path: str,
        git_dir: str,
        common_dir: str,
        work_tree: str | None,
        commit: str,
        tree: FileTree,
        frozen: FrozenSet,
    ) -> None:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(work_tree or repo_path))
        name = name.strip(".") or "repo"
        self.repo = repo_path
        self.tree = tree
        self.frozen = frozen
        self.root = Path(self._container) / name
        self.state_dir = Path(self._container) / "state"
        for sub in ("pycache", "pytest-cache", "runs"):
            (self.state_dir / sub).mkdir(parents=True, mode=0o700)
        self.root.mkdir(mode=_DIR_MODE)
        self._root = str(self.root)
        self._roots = tree.roots
        self._lock = threading.RLock()
        self._run_counter = 0
        self._git_env = isolated_env(
            git_dir=git_dir,
            common_dir=common_dir,
            work_tree=self._root,
            private_index=str(self.state_dir / "index"),
        )
        self.commit = self._git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}",
                                what=f"resolve commit {commit!r}").strip()
        # From here on only objects are needed: git reads none of the user's config,
        # attributes or hooks, so no filter a candidate planted there can run.
        self._git_env = objects_only_env(
            common_dir=common_dir, shadow_dir=str(self.state_dir / "git"), work_tree=self._root,
            private_index=str(self.state_dir / "index"),
            object_format="sha256" if len(self.commit) == 64 else "sha1",
        )
        self._git("read-tree", self.commit, what=f"read the tree of {self.commit}")
        self._git("checkout-index", "--all", "--force", what="copy the committed files")
        entries = _ls_files(self._git("ls-files", "--stage", "-z", what="list the commit"))
        for path, (mode, _sha) in entries.items():
            if mode == _GITLINK_MODE:  # a submodule: git leaves an empty directory
                ensure_dirs(self._root, path, _DIR_MODE)
        self._ignored: dict[str, bytes] = {}
        self.ignored_skipped: list[tuple[str, str]] = []
        if work_tree is not None:
            self._copy_ignored(git_dir, common_dir, work_tree, entries)
        self.frozen_tree_hash = self._frozen_hash(entries)
        self._create_missing_roots()
        self._take_base()

    def _frozen_hash(self, entries: Mapping[str, tuple[str, str]]) -> str:
        digest = hashlib.sha256(_HASH_DOMAIN)
        for path in sorted(entries):
            if not self._is_frozen(path):
                continue
            mode, sha = entries[path]
            for part in (path.encode("utf-8"), mode.encode(), sha.encode()):
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
        if self._ignored:  # absent otherwise, so a repository without any keeps its hash
            digest.update(_IGNORED_DOMAIN)
            for path in sorted(self._ignored):
                for part in (path.encode("utf-8"), digest_bytes(self._ignored[path])):
                    digest.update(len(part).to_bytes(8, "big"))
                    digest.update(part)
        return digest.hexdigest()

    @property
    def ignored_files(self) -> list[str]:
        """The git-ignored files copied from the user's working tree (frozen), sorted."""
        return sorted(self._ignored)

    def ignored_content(self) -> dict[str, bytes]:
        """The copied git-ignored files and their bytes (what a cluster worker needs too)."""
        return dict(self._ignored)

    def _copy_ignored(self, git_dir: str, common_dir: str, work_tree: str,
                      entries: Mapping[str, tuple[str, str]]) -> None:
        """Copy the ignored files plain ``pytest`` would import from the working tree.

        Why: a generated ``_version.py`` or an extension module built in place is
        ignored by git, so the commit lacks it and ``import pkg`` fails in the
        copy although it works in the user's tree.  Which: files (not wholly
        ignored directories such as ``.venv/`` or ``build/``, which git reports
        as directories) whose suffix is in :data:`IGNORED_IMPORTABLE_SUFFIXES`,
        outside the artifact roots and every dot-directory, environment, cache
        or build folder, whose name does not start with a dot or say it holds a
        secret, and whose text holds no recognisable credential; at most
        :data:`MAX_IGNORED_FILE_BYTES` each and :data:`MAX_IGNORED_BYTES` in
        all.  The working tree and the user's index are only read (git runs with
        optional locks off and every filter emptied).  What is left out and why
        is in :attr:`ignored_skipped`.  The copies are frozen like committed
        files, and restored from memory after a run changed one.
        """
        env = isolated_env(git_dir=git_dir, common_dir=common_dir, work_tree=work_tree,
                           private_index=os.path.join(git_dir, "index"))
        runner = git.Git(work_tree)
        runner.update_environment(**with_neutral_filters(env, work_tree))
        try:
            out = runner.execute(
                ["git", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
                 "ls-files", "--others", "--ignored", "--exclude-standard", "--directory",
                 "-z"], strip_newline_in_stdout=False, stdout_as_string=False)
        except GitCommandError as exc:
            raise WorkspaceError(
                f"could not list the ignored files of {work_tree!r} for the workspace: "
                f"{str(exc.stderr or exc).strip()}; check that git can read that repository"
            ) from None
        # A name that is not UTF-8 keeps its bytes as surrogates, which normalise_path refuses.
        raw = out if isinstance(out, bytes) else str(out).encode("utf-8", "surrogateescape")
        listed = raw.decode("utf-8", "surrogateescape")
        total = 0
        for path in sorted(p for p in listed.split("\0") if p and not p.endswith("/")):
            why = self._ignored_refusal(path, entries)
            data: bytes | None = None
            mode = _FILE_MODE
            if why is None:
                try:
                    data, mode = _read_plain_file(work_tree, path, MAX_IGNORED_FILE_BYTES)
                except OSError as exc:
                    why = f"cannot be read ({exc.strerror or exc})"
                if data is None and why is None:
                    why = (f"is not a regular file or is larger than "
                           f"{MAX_IGNORED_FILE_BYTES // (1024 * 1024)} MB")
            if data is not None and why is None:
                if total + len(data) > MAX_IGNORED_BYTES:
                    why = f"would exceed {MAX_IGNORED_BYTES // (1024 * 1024)} MB of ignored files"
                elif path.endswith((".py", ".pyi")) and _holds_secret(path, data):
                    why = "holds what looks like a credential"
            if why is not None or data is None:
                self.ignored_skipped.append((path, why or "unreadable"))
                continue
            ensure_dirs(self._root, path.rpartition("/")[0], _DIR_MODE)
            write_file(os.path.join(self._root, path), data, mode)
            self._ignored[path] = data
            total += len(data)

    def _ignored_refusal(self, path: str, entries: Mapping[str, tuple[str, str]]) -> str | None:
        """Why the ignored file ``path`` is not copied, or None to copy it."""
        try:
            normal = normalise_path(path)
        except RefusalError:
            return "has a name the workspace cannot hold"
        if normal != path:
            return "has a name the workspace cannot hold"
        parts = path.split("/")
        name = parts[-1].casefold()
        if not name.endswith(IGNORED_IMPORTABLE_SUFFIXES):
            return "is not a Python module or extension"
        if any(part.startswith(".") for part in parts):
            return "is a dotfile or lies in a dot-directory"
        if any(part in _IGNORED_SKIP_DIRS or part.endswith((".egg-info", ".dist-info"))
               for part in parts[:-1]):
            return "lies in an environment, cache or build folder"
        if any(word in name for word in _SECRET_NAME_PARTS):
            return "has a name that says it holds a secret"
        if is_inside(path, self._roots):
            return "lies inside the artifact roots (the candidate's state decides those)"
        if path in entries or any("/".join(parts[:i]) in entries for i in range(1, len(parts))):
            return "conflicts with a committed path"
        return None

    def _create_missing_roots(self) -> None:
        """An artifact root absent from the commit becomes an empty directory.

        Sandboxes bind the roots writable, so each must exist; the candidate's
        files fill it in at reset.
        """
        for root in self._roots:
            full = os.path.join(self._root, root)
            if os.path.lexists(full):
                continue
            parts = root.split("/")
            ancestors = (os.path.join(self._root, *parts[:i]) for i in range(1, len(parts)))
            if any(os.path.islink(a) or (os.path.lexists(a) and not os.path.isdir(a))
                   for a in ancestors):
                continue  # an ancestor is a file or link: the root cannot exist here
            ensure_dirs(self._root, root, _DIR_MODE)

    def _take_base(self) -> None:
        """Record what the fresh copy holds: the content every reset returns to."""
        sigs = scan(self._root)
        self._base: dict[str, Content] = {}
        self._known: dict[str, Known] = {}
        for path, sig in sigs.items():
            content = content_of(os.path.join(self._root, path), sig)
            self._base[path] = content
            self._known[path] = Known(content, sig)
        self._cache_in_base = {p for p, c in self._base.items() if c.kind == "dir" and is_cache(p)}
        # Files the artifact state governs: regular files in the roots that the
        # FileTree would load (not frozen, not a tool cache or executable config).
        self._managed = frozenset(
            p for p, c in self._base.items()
            if c.kind == "file" and self._is_managed(p)
        )
        self._overrides: dict[str, Content | None] = {}
        self._digests: dict[str, tuple[str, Content]] = {}
        # Known exactly, but nothing stops a caller from running before the first
        # reset, so that reset scans like any other.
        self._changed: set[str] | None = None

    def _is_managed(self, path: str) -> bool:
        if not is_inside(path, self._roots) or self._is_frozen(path):
            return False
        return not any(
            part in IGNORED_NAMES or part.endswith(IGNORED_SUFFIXES) for part in path.split("/")
        )

    def writable_paths(self) -> list[Path]:
        """Absolute paths of the artifact roots inside :attr:`root` (the candidate's own paths)."""
        return [self.root / root for root in self._roots]

    # ------------------------------------------------------------------ runs

    def new_run_scratch(self) -> Path:
        """A fresh, empty directory for one run under ``state_dir/runs`` (older ones removed).

        Also marks the workspace as possibly changed: the next :meth:`reset`
        scans unless :meth:`check` ran after this call.
        """
        with self._lock:
            self._check_open()
            runs = self.state_dir / "runs"
            for old in os.listdir(runs):
                remove_path(os.path.join(runs, old))
            self._run_counter += 1
            scratch = runs / f"run-{self._run_counter}"
            scratch.mkdir(mode=0o700)
            self._changed = None
            return scratch

    def close(self) -> None:
        """Remove the copy and the state directory (idempotent)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            self._finalize_now()
            return
        with lock:
            self._finalize_now()

    def _finalize_now(self) -> None:
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None and finalizer.alive:
            finalizer.detach()
            if os.path.lexists(self._container):
                remove_tree(self._container)
        self._closed = True

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace(root={str(self.root)!r}, commit={self.commit[:12]!r})"


_CREATE_TOKEN = object()


def _is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)

