"""Workspaces: a worker's private copy of the repository, reset between candidates.

Each evaluation worker owns one :class:`Workspace`, created once from a ledger
commit and reused for every candidate it evaluates.  Three promises hold:

* **The user's repository is only read.**  The copy is made with ``git
  read-tree`` into a private index file (kept in the workspace's own state
  directory) and ``git checkout-index`` into the workspace, with the isolated
  git environment of :mod:`agentdescent_core.ledger.gitenv`; the user's working
  tree, ``.git/index`` and ``HEAD`` are never touched, and their uncommitted
  files never reach a candidate (:func:`dirty_paths` lets the caller warn).
* **A reset costs what changed, not what exists.**  The workspace remembers
  what every path holds and the ``lstat`` signature it had then
  (:mod:`.snapshot`).  :meth:`Workspace.check` scans the signatures after a run
  and reads only files whose signature moved; :meth:`Workspace.reset` then
  rewrites the paths that scan found changed plus the artifact files whose
  wanted content differs from what it last wrote.  Without a check since the
  last run the reset scans by itself, so it never trusts a stale picture.
* **Frozen paths are checked, not trusted.**  Every path the ``FrozenSet``
  freezes (everything outside the artifact roots, plus conftest.py, test
  modules and config inside them) that a run modified, added, removed or
  replaced is a violation; the next reset restores it from the commit.  Under
  the ``local`` backend nothing stops the write, so this check is the defence.

Caches never leak: ``__pycache__``/``.pytest_cache``/``*.pyc`` found anywhere in
the workspace are removed at the next reset (they are not violations), and the
state directory's ``pycache/`` and ``pytest-cache/`` are emptied at every reset.
Those two are writable to the child, so whatever one candidate's run left there
is untrusted: a ``.pyc`` planted under a ``PYTHONPYCACHEPREFIX`` with the source's
mtime and size is loaded instead of the frozen test it claims to be.  Emptying
them also settles stale bytecode (a rewrite of the same size in the same
second).  A child therefore gains nothing from ``PYTHONPYCACHEPREFIX``, and the
evaluation runs it with ``PYTHONDONTWRITEBYTECODE=1`` and no prefix instead
(:mod:`agentdescent_core.evaluation.child`): it reads the interpreter's own
read-only bytecode and compiles only the workspace's code.

A workspace is used by one thread at a time (an internal lock serialises
callers that forget).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from agentdescent_core.artifacts.filetree import IGNORED_NAMES, IGNORED_SUFFIXES, FileTree
from agentdescent_core.artifacts.paths import (
    is_executable_config,
    is_inside,
    normalise_path,
    shown_path,
)
from agentdescent_core.errors import RefusalError, WorkspaceError as WorkspaceError
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger.gitenv import isolated_env, objects_only_env, with_neutral_filters
from agentdescent_core.sandbox.snapshot import (
    Content,
    Known,
    Sig,
    content_of,
    digest_bytes,
    ensure_dirs,
    is_cache,
    kind_of,
    make_dir,
    real_parents,
    remove_path,
    remove_tree,
    scan,
    signature,
    write_file,
)
from agentdescent_core.sandbox.spec import WorkspaceWrites

VIOLATION_KINDS: tuple[str, ...] = ("modified", "added", "removed", "type-changed")

_FILE_MODE = 0o644
_EXEC_MODE = 0o755
_DIR_MODE = 0o755
_GITLINK_MODE = "160000"
_SHOWN_PATHS = 5
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
MAX_PROTECTED_FILES = 64
"""Frozen files a sandbox binds read-only one by one; the rest are verified after the run.

Small on purpose: bwrap re-reads the mount table for every bind, so the setup
cost grows with the square of the count (about 6 s for 1,000 files, 25 ms for 64).
"""

# Never copied even when importable: environments, caches, build output.
_IGNORED_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules",
                                "build", "dist", "venv", "virtualenv"})
# A name that says it holds a secret is never copied: secrets must not reach a candidate.
_SECRET_NAME_PARTS = ("secret", "credential", "password", "passwd", "token", "apikey",
                      "api_key", "local_settings", "settings_local")
# Files a new entry may not be (outside the artifact roots): Python or pytest would load
# them by themselves, so one a run creates could change how later tests are judged.
_LOADABLE_SUFFIXES = (".py", ".pyw", ".pyi", ".so", ".pyd", ".pth", ".pyc", ".pyo")
_PYTEST_CONFIG_NAMES = frozenset({".pytest.ini", "pytest.toml", ".pytest.toml"})


@dataclass(frozen=True)
class ResetStats:
    """What one :meth:`Workspace.reset` did.

    ``written``: artifact files written from the state; ``restored``: paths put
    back as the commit has them (files, links, directories, permissions);
    ``removed``: paths deleted (stale artifact files, files a run added, caches).
    """

    written: int
    restored: int
    removed: int
    seconds: float


@dataclass(frozen=True)
class Violation:
    """A frozen path a run changed; ``kind`` is one of :data:`VIOLATION_KINDS`.

    ``path`` is the name as the disk has it (a candidate's script may have
    created one that is not UTF-8: it then holds surrogate escapes, and is what
    ``os`` calls need); ``shown`` is the escaped form for every message.
    """

    path: str
    kind: str

    @property
    def shown(self) -> str:
        return shown_path(self.path)


@dataclass(frozen=True)
class FrozenCheck:
    """The result of :meth:`Workspace.check` after a run.

    ``violations``: frozen paths the run changed (sorted by path); ``drift``:
    non-frozen paths it changed, i.e. artifact files the candidate's own code
    wrote (informational; the next reset undoes them too); ``written``: new
    files and directories the run created outside the artifact roots that
    neither Python nor pytest would load (what tests legitimately leave, such
    as an ``out.txt``; allowed, and removed by the next reset).
    """

    violations: list[Violation]
    drift: list[str]
    seconds: float
    written: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def violations_error(self) -> RefusalError:
        """The ``frozen-violation`` refusal that disqualifies the candidate.

        Raises ValueError when there is nothing to report (check ``ok`` first).
        """
        if not self.violations:
            raise ValueError("the run changed no frozen path; there is no violation to report")
        shown = ", ".join(f"{v.shown} ({v.kind})" for v in self.violations[:_SHOWN_PATHS])
        more = len(self.violations) - _SHOWN_PATHS
        if more > 0:
            shown += f" and {more} more"
        count = len(self.violations)
        return RefusalError(
            "frozen-violation",
            "frozen-modified",
            f"the run changed {count} frozen path{'s' if count != 1 else ''}: "
            f"{shown}; tests, conftest.py, config and every committed file outside the "
            f"artifact paths must stay as committed, and no new Python module, conftest.py "
            f"or pytest config may appear, so the candidate is disqualified (the workspace "
            f"is restored before the next run). If this happens with the unchanged artifact, "
            f"the tests themselves do it: let them write new data files or into pytest's "
            f"tmp_path instead of changing committed files; otherwise keep the candidate's "
            f"scripts from writing outside the artifact folder",
            path=self.violations[0].shown,
        )


class Workspace:
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

    def _git(self, *args: str, what: str) -> str:
        runner = git.Git(self._root)
        runner.update_environment(**self._git_env)
        try:
            out = runner.execute(["git", *args], strip_newline_in_stdout=False)
        except GitCommandError as exc:
            stderr = str(exc.stderr or "").strip() or str(exc)
            raise WorkspaceError(
                f"could not {what} for the workspace of {self.repo!r}: git {args[0]} failed: "
                f"{stderr}; check that the commit exists in that repository"
            ) from None
        return out if isinstance(out, str) else str(out)

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

    # ------------------------------------------------------------------ paths

    def _is_frozen(self, path: str) -> bool:
        return (
            not is_inside(path, self._roots)
            or is_executable_config(path)
            or self.frozen.is_frozen(path)
        )

    def _is_managed(self, path: str) -> bool:
        if not is_inside(path, self._roots) or self._is_frozen(path):
            return False
        return not any(
            part in IGNORED_NAMES or part.endswith(IGNORED_SUFFIXES) for part in path.split("/")
        )

    def writable_paths(self) -> list[Path]:
        """Absolute paths of the artifact roots inside :attr:`root` (the candidate's own paths)."""
        return [self.root / root for root in self._roots]

    def writes(self) -> WorkspaceWrites:
        """What a sandbox lets tests write: the whole copy, minus its frozen files.

        Plain ``pytest`` lets a test write into the repository (an ``out.txt``, a
        ``tmp/`` folder), so ``bwrap`` and ``docker`` bind :attr:`root`
        read-write and then bind each frozen file of the base (committed files
        outside the artifact roots and the tests, conftest.py and config inside
        them, plus the copied ignored files) read-only on top, so rewriting,
        deleting or replacing one fails as it would on a read-only tree.  At most
        :data:`MAX_PROTECTED_FILES` are bound — ``conftest.py`` and config
        first, then test modules, then other Python files, then the rest — and
        every other frozen file is verified by :meth:`check` after the run
        (detected and restored, as under ``local``).  What a run creates is
        judged by :meth:`check` and removed by the next :meth:`reset`.
        """
        with self._lock:
            frozen = [p for p, c in self._base.items()
                      if c.kind == "file" and self._is_frozen(p) and not is_cache(p)]
            frozen.sort(key=lambda p: (_protect_rank(p), p.count("/"), p))
            return WorkspaceWrites(
                root=self.root,
                protected=tuple(self.root / p for p in frozen[:MAX_PROTECTED_FILES]),
            )

    @property
    def pycache_prefix(self) -> Path:
        """A bytecode directory for the child; emptied at every reset (see the module doc)."""
        return self.state_dir / "pycache"

    @property
    def pytest_cache_dir(self) -> Path:
        """Where the child's pytest cache belongs (``-o cache_dir=...``); emptied at every reset."""
        return self.state_dir / "pytest-cache"

    # ------------------------------------------------------------------ reset

    def reset(self, state: Mapping[str, str]) -> ResetStats:
        """Make :attr:`root` the commit tree with the artifact files replaced by ``state``.

        ``state`` is a FileTree state (``{repo-relative posix path: text}``) and
        is exact: artifact files of the commit it lacks are removed.  Its keys
        must be evolvable paths inside the artifact roots; a frozen key is
        refused (``frozen-violation``) before anything is written.
        """
        started = time.perf_counter()
        with self._lock:
            self._check_open()
            wanted = self._overrides_for(state)
            if self._changed is None:
                self._changed = self._diff_disk()
            changed = self._changed
            candidates = set(self._overrides) | set(wanted) | changed
            removals: list[str] = []
            dirs: list[str] = []
            writes: list[str] = []
            restores: list[str] = []
            for path in candidates:
                want = wanted[path] if path in wanted else self._base.get(path)
                if path not in changed:
                    have = self._known.get(path)
                    if (have.content if have is not None else None) == want:
                        continue
                if want is None:
                    removals.append(path)
                elif want.kind == "dir":
                    dirs.append(path)
                elif path in state:
                    writes.append(path)  # from the state's text, even when it equals the commit's
                else:
                    restores.append(path)
            try:
                removed = self._apply_removals(removals)
                restored = self._apply_dirs(dirs, wanted)
                written = self._apply_writes(writes, state, wanted)
                restored += self._apply_restores(restores)
            except BaseException:
                # Half done: keep every path either state touched a candidate of
                # the next reset, and make that reset scan the disk again.
                self._overrides = {**self._overrides, **wanted}
                self._changed = None
                raise
            self._overrides = wanted
            self._changed = None  # whatever happens next (a run) must be scanned
            removed += self._empty_state_caches()
            return ResetStats(written, restored, removed, time.perf_counter() - started)

    def _overrides_for(self, state: Mapping[str, str]) -> dict[str, Content | None]:
        """Where ``state`` makes the wanted tree differ from the commit's."""
        wanted: dict[str, Content | None] = {}
        digests: dict[str, tuple[str, Content]] = {}
        for path, text in state.items():
            self._check_state_key(path, text)
            base = self._base.get(path)
            cached = self._digests.get(path)
            if cached is not None and (cached[0] is text or cached[0] == text):
                content = cached[1]  # comparing text is cheaper than hashing it again
            else:
                mode = base.mode if base is not None and base.kind == "file" else _FILE_MODE
                content = Content("file", mode, digest_bytes(text.encode("utf-8")))
            digests[path] = (text, content)
            if content != base:
                wanted[path] = content
            if base is not None and base.kind != "file":
                raise _path_conflict(path, f"is a {base.kind} in the commit")
            parent = path.rpartition("/")[0]
            while parent and parent not in wanted:
                base_parent = self._base.get(parent)
                if base_parent is not None and base_parent.kind == "dir":
                    break
                if base_parent is not None and not (
                    parent in self._managed and parent not in state
                ):
                    raise _path_conflict(path, f"needs {parent!r} to be a directory")
                wanted[parent] = Content("dir", _DIR_MODE)
                parent = parent.rpartition("/")[0]
        for path in self._managed:
            if path not in state:
                wanted[path] = None
        self._digests = digests
        return wanted

    def _check_state_key(self, path: str, text: object) -> None:
        if not isinstance(path, str) or not isinstance(text, str):
            raise TypeError(
                f"a workspace state maps repo-relative paths to text, got "
                f"{path!r}: {type(text).__name__}"
            )
        try:
            normal = normalise_path(path)
        except RefusalError:
            normal = None
        if normal != path or not is_inside(path, self._roots):
            raise ValueError(
                f"state path {path!r} is not a normalised path inside the artifact roots "
                f"{list(self._roots)!r}; pass the FileTree state of this workspace's tree"
            )
        if self._is_frozen(path) or is_cache(path):
            raise RefusalError(
                "frozen-violation",
                "frozen-path",
                f"state path {path!r} is frozen (a test, conftest.py, config or cache file) "
                f"and cannot be written by a candidate; drop it from the state",
                path=path,
            )

    def _apply_removals(self, paths: list[str]) -> int:
        count = 0
        for path in sorted(paths, key=_depth, reverse=True):
            if real_parents(self._root, path) and remove_path(os.path.join(self._root, path)):
                count += 1
            self._forget(path)
        return count

    def _forget(self, path: str) -> None:
        known = self._known.pop(path, None)
        if known is not None and known.content.kind == "dir":
            prefix = path + "/"
            for child in [p for p in self._known if p.startswith(prefix)]:
                del self._known[child]

    def _apply_dirs(self, paths: list[str], wanted: Mapping[str, Content | None]) -> int:
        """Make directories; returns how many were the commit's (restored)."""
        restored = 0
        for path in sorted(paths, key=_depth):
            restored += path not in wanted
            want = wanted[path] if path in wanted else self._base.get(path)
            assert want is not None
            parent = path.rpartition("/")[0]
            self._record_created(ensure_dirs(self._root, parent, _DIR_MODE))
            if make_dir(os.path.join(self._root, path), want.mode):
                self._forget(path)  # it was a file or link
            self._record(path, want)
        return restored

    def _apply_writes(
        self, paths: list[str], state: Mapping[str, str], wanted: Mapping[str, Content | None]
    ) -> int:
        for path in sorted(paths):
            want = wanted[path] if path in wanted else self._base.get(path)
            assert want is not None
            self._record_created(ensure_dirs(self._root, path.rpartition("/")[0], _DIR_MODE))
            full = os.path.join(self._root, path)
            self._forget(path)  # it may have been a directory
            write_file(full, state[path].encode("utf-8"), want.mode)
            self._record(path, want)
        return len(paths)

    def _apply_restores(self, paths: list[str]) -> int:
        """Put files and links back from the commit, through the private index."""
        if not paths:
            return 0
        for path in paths:
            self._record_created(ensure_dirs(self._root, path.rpartition("/")[0], _DIR_MODE))
            self._forget(path)
            remove_path(os.path.join(self._root, path))
        ignored = sorted(p for p in paths if p in self._ignored)
        for path in ignored:  # not in the index: from the bytes read at creation
            write_file(os.path.join(self._root, path), self._ignored[path], self._base[path].mode)
            self._record(path, self._base[path])
        ordered = sorted(p for p in paths if p not in self._ignored)
        for start in range(0, len(ordered), 500):
            self._git("checkout-index", "--force", "--", *ordered[start:start + 500],
                      what="restore files from the commit")
        for path in ordered:
            want = self._base[path]
            full = os.path.join(self._root, path)
            if want.kind == "file":
                os.chmod(full, want.mode)  # independent of the umask git used
            self._record(path, want)
        return len(paths)

    def _record(self, path: str, content: Content) -> None:
        self._known[path] = Known(content, signature(os.lstat(os.path.join(self._root, path))))

    def _record_created(self, created: Iterable[str]) -> None:
        for path in created:
            base = self._base.get(path)
            content = base if base is not None and base.kind == "dir" else Content("dir", _DIR_MODE)
            if content.mode != _DIR_MODE:
                os.chmod(os.path.join(self._root, path), content.mode)
            self._record(path, content)

    def _empty_state_caches(self) -> int:
        """Empty ``pycache/`` and ``pytest-cache/``: the last run could write both."""
        count = 0
        for folder in (self.pycache_prefix, self.pytest_cache_dir):
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                folder.mkdir(mode=0o700)
                continue
            for name in names:
                count += remove_path(os.path.join(folder, name))  # links: unlinked only
        return count

    # ------------------------------------------------------------------ check

    def _diff_disk(self) -> set[str]:
        """Paths whose disk entry differs from what is known (a full signature scan)."""
        found = scan(self._root, self._cache_in_base)
        changed: set[str] = set()
        known = self._known
        added = 0
        for path, sig in found.items():
            entry = known.get(path)
            if entry is None:
                changed.add(path)
                added += 1
            elif entry.sig != sig:
                if self._same_content(path, entry, sig):
                    entry.sig = sig  # touched, not changed
                else:
                    changed.add(path)
        if len(found) - added != len(known):  # some known path is gone
            changed.update(p for p in known if p not in found)
        self._last_scan_kinds = {p: kind_of(found[p]) for p in changed if p in found}
        return changed

    def _same_content(self, path: str, entry: Known, sig: Sig) -> bool:
        old = entry.content
        if kind_of(sig) != old.kind:
            return False
        if old.kind == "file" and sig[1] != entry.sig[1]:
            return False  # size differs: no need to read it
        try:
            return content_of(os.path.join(self._root, path), sig) == old
        except OSError:
            return False

    def check(self) -> FrozenCheck:
        """Compare the workspace with what the last reset left, after a run.

        Frozen paths that changed are violations; changed non-frozen paths are
        drift; caches are neither (the next reset removes them).  The scan is
        kept, so the following :meth:`reset` does not repeat it.
        """
        started = time.perf_counter()
        with self._lock:
            self._check_open()
            changed = self._diff_disk()
            self._changed = changed
            kinds = self._last_scan_kinds
            violations: list[Violation] = []
            drift: list[str] = []
            written: list[str] = []
            for path in sorted(changed):
                if is_cache(path):
                    continue
                known = self._known.get(path)
                now = kinds.get(path)
                if known is None:
                    kind = "added"
                elif now is None:
                    kind = "removed"
                elif now != known.content.kind:
                    kind = "type-changed"
                else:
                    kind = "modified"
                if not self._is_frozen(path):
                    drift.append(path)
                elif kind == "added" and self._harmless_new(path, now):
                    written.append(path)
                else:
                    violations.append(Violation(path, kind))
            return FrozenCheck(violations, drift, time.perf_counter() - started, written)

    def _harmless_new(self, path: str, kind: str | None) -> bool:
        """May a run leave the new frozen-side ``path`` (of disk kind ``kind``)?

        Yes for a file, directory or socket outside the artifact roots that
        neither Python nor pytest would load by itself: tests write such files
        into the repository under plain ``pytest`` too, and the next reset
        removes them.  No for a symbolic link (it could give a candidate's code
        a module name), a Python module, extension, ``.pth``, ``conftest.py`` or
        pytest config, and for anything the ``FrozenSet`` freezes inside the
        roots: one of those could change how a later test is judged.
        """
        if kind is None or kind == "link" or _loadable(path):
            return False
        return not is_inside(path, self._roots)

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

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def _check_open(self) -> None:
        if self.closed:
            raise WorkspaceError(
                f"the workspace {str(self.root)!r} was closed; create a new one with "
                f"Workspace.create"
            )

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace(root={str(self.root)!r}, commit={self.commit[:12]!r})"


_CREATE_TOKEN = object()


def _path_conflict(path: str, problem: str) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "path-conflict",
        f"state path {path!r} {problem}, which the commit keeps; choose another path",
        path=path,
    )


def _depth(path: str) -> int:
    return path.count("/")


def _loadable(path: str) -> bool:
    """Would Python or pytest load ``path`` by itself (a module, extension, config)?"""
    name = path.rsplit("/", 1)[-1].casefold()
    return (is_executable_config(path) or name in _PYTEST_CONFIG_NAMES
            or name.endswith(_LOADABLE_SUFFIXES))


def _protect_rank(path: str) -> int:
    """Which frozen files a sandbox binds read-only first: the judge's own files."""
    name = path.rsplit("/", 1)[-1].casefold()
    if is_executable_config(path) or name in _PYTEST_CONFIG_NAMES:
        return 0
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return 1
    return 2 if _loadable(path) else 3


def _read_plain_file(base: str, rel: str, limit: int) -> tuple[bytes | None, int]:
    """``(bytes, mode)`` of the regular file ``base/rel``; ``(None, 0)`` if it is not one.

    Never follows a symbolic link (in ``rel``'s parents either: those must be
    real directories), and reads nothing larger than ``limit`` bytes.
    """
    if not real_parents(base, rel):
        return None, 0
    fd = os.open(os.path.join(base, rel), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None, 0
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                return None, 0
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), _EXEC_MODE if st.st_mode & 0o111 else _FILE_MODE


def _holds_secret(path: str, data: bytes) -> bool:
    """Does the text of ``path`` hold a token, a private key or a secret variable's value?"""
    from agentdescent_core.proposers.guardrails import _scan_secrets

    return bool(_scan_secrets(path, data.decode("utf-8", "replace"), os.environ, ""))


def _is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _ls_files(output: str) -> dict[str, tuple[str, str]]:
    """``{path: (mode, sha)}`` from ``git ls-files --stage -z``."""
    entries: dict[str, tuple[str, str]] = {}
    for record in output.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, sha, _stage = meta.split(" ")
        entries[path] = (mode, sha)
    return entries


def _open_repo(path: str) -> tuple[str, str, str | None]:
    """``(git_dir, common_dir, working tree or None)`` of the repository at ``path``."""
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise WorkspaceError(
            f"{path!r} is not a git repository; workspaces copy a commit of the user's "
            f"repository, so pass its root"
        ) from None
    try:
        work_tree = None if repo.bare else os.path.abspath(str(repo.working_tree_dir))
        return os.path.abspath(repo.git_dir), os.path.abspath(repo.common_dir), work_tree
    finally:
        repo.close()


def dirty_paths(repo: str | os.PathLike[str], paths: Sequence[str] = ()) -> list[str]:
    """Uncommitted changes under ``paths`` (everything when empty), sorted.

    See :func:`uncommitted_changes`, which also says which paths git tracks.
    """
    return sorted(uncommitted_changes(repo, paths))


def uncommitted_changes(repo: str | os.PathLike[str], paths: Sequence[str] = ()
                        ) -> dict[str, bool]:
    """Uncommitted changes under ``paths`` (everything when empty): path -> tracked.

    Modified, staged, deleted (tracked: True) and untracked-but-not-ignored
    (False) files, as repo-relative posix paths.  Read-only: git runs with optional locks off, so
    not even the index's stat cache is refreshed.  The caller warns once — a
    workspace copies the commit, so these changes are not what gets evaluated.
    """
    repo_path = os.path.abspath(os.fspath(repo))
    git_dir, common_dir, work_tree = _open_repo(repo_path)
    if work_tree is None:
        return {}
    # The user's own index, read only (GIT_OPTIONAL_LOCKS=0 keeps git from
    # writing back its refreshed stat cache).
    env = isolated_env(
        git_dir=git_dir, common_dir=common_dir, work_tree=work_tree,
        private_index=os.path.join(git_dir, "index"),
    )
    env = with_neutral_filters(env, work_tree)  # status cleans stat-dirty files
    runner = git.Git(work_tree)
    runner.update_environment(**env)
    args = ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
            "--ignore-submodules=none", "--", *(paths or ["."])]
    try:
        out = runner.execute(args, strip_newline_in_stdout=False)
    except GitCommandError as exc:
        raise WorkspaceError(
            f"could not list uncommitted changes of {work_tree!r}: "
            f"{str(exc.stderr or exc).strip()}"
        ) from None
    text = out if isinstance(out, str) else str(out)
    return {record[3:].rstrip("/"): not record.startswith("??")
            for record in text.split("\0") if len(record) > 3}
