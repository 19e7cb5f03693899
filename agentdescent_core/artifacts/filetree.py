"""FileTree: a directory (or a few) as the evolving artifact, one state key per file.

The state is ``{posix repo-relative path: file text}``.  Two workers editing
different files therefore touch different keys and fuse; two editing the same
file collide and are resolved by score.

What goes into the state, read from disk (``load_disk``) or from a git tree
(``load_git``, the ledger's view), is the set of *evolvable* files under the
roots:

* frozen files (tests, conftest.py, anything the ``FrozenSet`` freezes) and
  files pytest/Python would execute on their own are left out: they stay where
  they are and are never rewritten;
* tool caches (``__pycache__``, ``*.pyc``, ``.DS_Store``, ...) are skipped so that
  a folder whose scripts have run loads the same as its clean checkout;
* everything else must be UTF-8 text within the limits, else loading fails with
  a RefusalError naming the file: binary files, symlinks (never followed),
  submodules or nested repositories, special files, too many or too large files.
  Refusing rather than skipping keeps the optimizer from silently working on a
  different folder than the one the user sees.

A root that does not exist loads as empty (the first accepted proposal creates
it); a root that is a single file is allowed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentdescent_core.artifacts.diff import Diff, apply_ops
from agentdescent_core.artifacts.paths import (
    case_collision,
    is_executable_config,
    is_inside,
    normalise_path,
    normalise_root,
    refuse,
    validate_file_path,
)
from agentdescent_core.artifacts.strategies import deletes_a_key
from agentdescent_core.errors import RefusalError
from agentdescent_core.governance import FrozenSet

if TYPE_CHECKING:
    import git

IGNORED_NAMES: frozenset[str] = frozenset(
    {"__pycache__", ".DS_Store", ".pytest_cache", ".mypy_cache", ".ruff_cache", "Thumbs.db"}
)
"""Names tools write next to sources; never part of an artifact, skipped when loading."""

IGNORED_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo")

_GIT_SYMLINK_MODE = 0o120000
_GIT_SUBMODULE_MODE = 0o160000
_HASH_DOMAIN = b"agentdescent-filetree-v1\x00"


@dataclass(frozen=True)
class FileTreeLimits:
    """What an artifact folder may hold at all (checked on every load)."""

    max_file_bytes: int = 256_000
    max_files: int = 2_000

    def __post_init__(self) -> None:
        _require_positive("FileTreeLimits.max_file_bytes", self.max_file_bytes)
        _require_positive("FileTreeLimits.max_files", self.max_files)


@dataclass(frozen=True)
class TrustRegion:
    """How big one proposal may be: a step size limit for a discrete optimizer."""

    max_files_per_diff: int = 20
    max_bytes_per_file: int = 64_000

    def __post_init__(self) -> None:
        _require_positive("TrustRegion.max_files_per_diff", self.max_files_per_diff)
        _require_positive("TrustRegion.max_bytes_per_file", self.max_bytes_per_file)


def _require_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def state_hash(state: Mapping[str, str]) -> str:
    """Hex sha256 of a ``{path: text}`` state, independent of insertion order.

    Every path and text is length-prefixed, so no choice of file names or
    contents can make two different states encode to the same bytes.
    """
    digest = hashlib.sha256(_HASH_DOMAIN)
    for path in sorted(state):
        for part in (path.encode("utf-8"), state[path].encode("utf-8")):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def render_tree(state: Mapping[str, str]) -> str:
    """Canonical text of a tree: files in path order, each under a ``==> path <==`` line.

    A file without a final newline gets one in the rendering (and says so), so
    every header starts a line; an empty state renders as an empty string.
    """
    blocks: list[str] = []
    for path in sorted(state):
        text = state[path]
        if text.endswith("\n") or not text:
            blocks.append(f"==> {path} <==\n{text}")
        else:
            blocks.append(f"==> {path} (no newline at end) <==\n{text}\n")
    return "\n".join(blocks)


def _is_ignored(name: str) -> bool:
    return name in IGNORED_NAMES or name.endswith(IGNORED_SUFFIXES)


class FileTree:
    """Strategy whose artifact is the files under one or more repo-relative roots."""

    def __init__(
        self,
        roots: Sequence[str],
        *,
        frozen: FrozenSet | None = None,
        limits: FileTreeLimits = FileTreeLimits(),
        trust_region: TrustRegion = TrustRegion(),
        repo_root: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(roots, str):
            roots = (roots,)
        normal = [normalise_root(r) for r in roots]
        if not normal:
            raise ValueError(
                "FileTree needs at least one artifact root, e.g. FileTree(['skills'])"
            )
        # A root inside another root adds nothing and would load its files twice.
        kept = [r for r in dict.fromkeys(normal) if not any(
            r != other and is_inside(r, (other,)) for other in normal
        )]
        self.roots: tuple[str, ...] = tuple(kept)
        self.frozen: FrozenSet = frozen if frozen is not None else FrozenSet(
            artifact_roots=self.roots
        )
        self.limits = limits
        self.trust_region = trust_region
        self.repo_root: Path | None = Path(repo_root) if repo_root is not None else None

    def __repr__(self) -> str:
        return f"FileTree(roots={list(self.roots)!r}, frozen={self.frozen!r})"

    # ------------------------------------------------------------------ paths

    def contains(self, path: str) -> bool:
        """True when ``path`` (any spelling) lies inside one of the roots."""
        try:
            normal = normalise_path(path)
        except RefusalError:
            return False
        return is_inside(normal, self.roots)

    def validate_path(self, path: str) -> str:
        """Normalised ``path`` if a proposal may write or delete it, else RefusalError."""
        normal = validate_file_path(path)
        if not is_inside(normal, self.roots):
            roots = ", ".join(repr(r) for r in self.roots)
            raise refuse(
                "invalid-proposal", "outside-artifact", path,
                f"is outside the artifact paths ({roots})",
                "only edit files under those paths",
            )
        self.frozen.check(normal)
        return normal

    def _evolvable(self, path: str) -> bool:
        return not is_executable_config(path) and not self.frozen.is_frozen(path)

    def _check_ops(self, ops: Mapping[str, str | None]) -> dict[str, str | None]:
        """Every per-op rule (paths, text, per-file size); no count limit."""
        if not isinstance(ops, Mapping):
            raise RefusalError(
                "invalid-proposal",
                "not-a-mapping",
                f"a FileTree proposal must map repo-relative paths to new text (or None to "
                f"delete), got {type(ops).__name__}",
            )
        max_bytes = min(self.trust_region.max_bytes_per_file, self.limits.max_file_bytes)
        checked: dict[str, str | None] = {}
        for raw_path, value in ops.items():
            path = self.validate_path(raw_path)
            if path in checked:
                raise refuse(
                    "invalid-proposal", "duplicate-path", raw_path,
                    "names the same file as another edit in this proposal",
                    "send one edit per file",
                )
            if value is not None:
                if not isinstance(value, str):
                    raise refuse(
                        "invalid-proposal", "not-text", raw_path,
                        f"was given a {type(value).__name__}, not text",
                        "send the full new file content as a string, or None to delete",
                    )
                if "\x00" in value:
                    raise refuse(
                        "invalid-proposal", "binary-file", raw_path,
                        "was given content with a NUL byte",
                        "artifact files must be text; remove the NUL",
                    )
                size = len(value.encode("utf-8"))
                if size > max_bytes:
                    raise refuse(
                        "oversized", "file-too-large", raw_path,
                        f"would be {size} bytes, more than the {max_bytes} allowed per file",
                        "make a smaller change or split the content over several files",
                    )
            checked[path] = value
        return checked

    def _check_count(self, ops: Mapping[str, str | None]) -> None:
        limit = self.trust_region.max_files_per_diff
        if len(ops) > limit:
            raise RefusalError(
                "oversized",
                "too-many-files",
                f"the proposal changes {len(ops)} files, more than the {limit} allowed in "
                f"one step; propose a smaller change touching at most {limit} files",
            )

    def validate_ops(self, ops: Mapping[str, str | None]) -> dict[str, str | None]:
        """Normalised ops (sorted by path) if every rule and the trust region hold."""
        if isinstance(ops, Mapping):
            self._check_count(ops)
        checked = self._check_ops(ops)
        return {path: checked[path] for path in sorted(checked)}

    # ------------------------------------------------------------------ loading

    def initial(self) -> dict[str, str]:
        """The artifact as it is on disk under ``repo_root``, or empty without one."""
        if self.repo_root is None:
            return {}
        return self.load_disk(self.repo_root)

    def load_disk(self, repo_root: str | os.PathLike[str]) -> dict[str, str]:
        """Read the evolvable files under the roots of the repository at ``repo_root``."""
        base = Path(repo_root)
        if not base.is_dir():
            raise FileNotFoundError(
                f"repository root {str(base)!r} is not a directory; pass the folder that "
                f"holds the artifact paths {list(self.roots)!r}"
            )
        state: dict[str, str] = {}
        for root in self.roots:
            for rel, full, st in self._disk_files(base, root):
                self._admit(state, rel, st.st_size, full.read_bytes)
        return {p: state[p] for p in sorted(state)}

    def _disk_files(
        self, base: Path, root: str
    ) -> Iterator[tuple[str, Path, os.stat_result]]:
        parts = root.split("/")
        current = base
        for i, part in enumerate(parts):
            current = current / part
            rel = "/".join(parts[: i + 1])
            try:
                st = os.lstat(current)
            except (FileNotFoundError, NotADirectoryError):
                return  # an absent root is an empty artifact
            if stat.S_ISLNK(st.st_mode):
                raise _symlink_error(rel)
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                return  # an ancestor is a file: the root cannot exist
        if stat.S_ISDIR(st.st_mode):
            yield from self._walk_disk(current, root)
        elif stat.S_ISREG(st.st_mode):
            yield root, current, st
        else:
            raise _special_error(root)

    def _walk_disk(self, folder: Path, rel: str) -> Iterator[tuple[str, Path, os.stat_result]]:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if _is_ignored(entry.name):
                continue
            child = f"{rel}/{entry.name}"
            if entry.name == ".git":
                raise _submodule_error(rel)
            if entry.is_symlink():
                raise _symlink_error(child)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                yield from self._walk_disk(Path(entry.path), child)
            elif stat.S_ISREG(st.st_mode):
                yield child, Path(entry.path), st
            else:
                raise _special_error(child)

    def load_git(self, tree: git.Tree) -> dict[str, str]:
        """Read the evolvable files under the roots from a GitPython tree (``commit.tree``)."""
        state: dict[str, str] = {}
        for root in self.roots:
            obj = _git_lookup(tree, root)
            if obj is None:
                continue
            for rel, blob in _walk_git(obj, root):
                self._admit(state, rel, blob.size, functools.partial(_read_blob, blob))
        return {p: state[p] for p in sorted(state)}

    def _admit(
        self, state: dict[str, str], rel: str, size: int, read: Callable[[], bytes]
    ) -> None:
        """Decode one file into ``state`` unless it is not evolvable; enforce the limits."""
        path = normalise_path(rel)  # file names on disk obey the same rules as proposals
        if not self._evolvable(path):
            return
        if size > self.limits.max_file_bytes:
            raise refuse(
                "oversized", "file-too-large", path,
                f"is {size} bytes, more than max_file_bytes={self.limits.max_file_bytes}",
                "shrink it, move it out of the artifact paths, or freeze it",
            )
        if len(state) >= self.limits.max_files:
            raise refuse(
                "oversized", "too-many-files", path,
                f"would make the artifact hold more than max_files={self.limits.max_files} "
                f"files",
                "evolve a smaller folder or raise the limit",
            )
        data: bytes = read()
        if b"\x00" in data:
            raise refuse(
                "invalid-proposal", "binary-file", path, "is a binary file",
                "move it out of the artifact paths or freeze it; artifacts are text",
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise refuse(
                "invalid-proposal", "not-utf8", path,
                f"is not valid UTF-8 (byte {exc.start})",
                "re-encode it as UTF-8, or move it out of the artifact paths",
            ) from None
        state[path] = text

    # ------------------------------------------------------------------ strategy

    def render(self, state: Mapping[str, str]) -> str:
        return render_tree(state)

    def to_diff(
        self,
        state: Mapping[str, str],
        proposal: Mapping[str, str | None],
        author: str,
        base_version: int,
        target: str = "artifact",
        *,
        rationale: str = "",
    ) -> Diff | None:
        """A Diff of the ops that change something, None when nothing would change.

        Unchanged rewrites and deletions of absent files are dropped before the
        trust region counts files, so a proposer that resends the whole folder
        is judged by what it actually changes.
        """
        checked = self._check_ops(proposal)
        ops = {
            path: value
            for path, value in sorted(checked.items())
            if (state.get(path) != value) and not (value is None and path not in state)
        }
        if not ops:
            return None
        self._check_count(ops)
        new_state = apply_ops(state, ops)
        self._check_layout(ops, new_state, state)
        return Diff(
            ops=ops, target=target, base_version=base_version, author=author,
            rationale=rationale,
        )

    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> bool:
        """True when the diff removes (or renames) a file ``state`` holds.

        The contract worth protecting is a file something else reads — a guard
        test, a script, another skill — but which files a test reads is not
        known here, so every removal counts: the conservative choice, since a
        removed file is what a rebase across versions cannot see breaking.  A
        rename is a removal plus a new file.  A subclass that knows better (a
        list of files its guards open) can narrow this by overriding it.
        """
        return deletes_a_key(state, diff)

    def _check_layout(self, ops: Mapping[str, str | None], new_state: Mapping[str, str],
                      state: Mapping[str, str]) -> None:
        """The result must be a valid tree: no file where a directory is, limits kept.

        Nor two names that differ only in case (``SKILL.md`` and ``skill.md``):
        a checkout on macOS or Windows would hold one file for both.
        """
        if len(new_state) > self.limits.max_files:
            raise RefusalError(
                "oversized",
                "too-many-files",
                f"the proposal would leave {len(new_state)} files in the artifact, more than "
                f"max_files={self.limits.max_files}; delete files or evolve a smaller folder",
            )
        written = [p for p, v in ops.items() if v is not None]
        clash_case = case_collision(new_state, written, state)
        if clash_case is not None:
            raise refuse(
                "invalid-proposal", "case-collision", clash_case[0],
                f"differs from {clash_case[1]!r} only in case, so the two are one file on a "
                f"case-insensitive file system (macOS, Windows)",
                "use one spelling: edit the existing file or choose a distinct name",
            )
        for path in written:
            parts = path.split("/")
            for i in range(1, len(parts)):
                ancestor = "/".join(parts[:i])
                if ancestor in new_state:
                    raise refuse(
                        "invalid-proposal", "path-conflict", path,
                        f"needs {ancestor!r} to be a directory, but it is a file",
                        f"delete {ancestor!r} in the same proposal or choose another path",
                    )
            prefix = path + "/"
            clash = next((p for p in new_state if p.startswith(prefix)), None)
            if clash is not None:
                raise refuse(
                    "invalid-proposal", "path-conflict", path,
                    f"is a directory holding {clash!r}",
                    "choose a file name that is not an existing directory",
                )


# ---------------------------------------------------------------------- git helpers


def _symlink_error(path: str) -> RefusalError:
    return refuse(
        "invalid-proposal", "symlink", path, "is a symbolic link, which is never followed",
        "replace it with a regular file or move it out of the artifact paths",
    )


def _special_error(path: str) -> RefusalError:
    return refuse(
        "invalid-proposal", "special-file", path, "is not a regular file or directory",
        "remove it from the artifact paths",
    )


def _submodule_error(path: str) -> RefusalError:
    return refuse(
        "invalid-proposal", "submodule", path,
        "is a git submodule or nested repository, which cannot be evolved as text",
        "move it out of the artifact paths or evolve its files in their own repository",
    )


def _git_lookup(tree: git.Tree, root: str) -> Any:
    """The object at ``root`` in ``tree``; None when absent; refuses symlinked ancestors."""
    obj: Any = tree
    parts = root.split("/")
    for i, part in enumerate(parts):
        rel = "/".join(parts[: i + 1])
        if obj.type != "tree":
            return None
        try:
            obj = obj[part]
        except KeyError:
            return None
        if obj.type == "blob" and obj.mode == _GIT_SYMLINK_MODE:
            raise _symlink_error(rel)
        if obj.type == "submodule" or obj.mode == _GIT_SUBMODULE_MODE:
            raise _submodule_error(rel)
    return obj


def _walk_git(obj: Any, rel: str) -> Iterator[tuple[str, Any]]:
    if obj.type == "blob":
        if obj.mode == _GIT_SYMLINK_MODE:
            raise _symlink_error(rel)
        yield rel, obj
        return
    if obj.type != "tree":
        raise _submodule_error(rel)
    # Names come from the entry's path: a submodule's ``.name`` is read from
    # .gitmodules, which need not exist.
    for name, item in sorted(((o.path.rsplit("/", 1)[-1], o) for o in obj), key=_first):
        if _is_ignored(name):
            continue
        child = f"{rel}/{name}"
        if item.type == "submodule" or item.mode == _GIT_SUBMODULE_MODE:
            raise _submodule_error(child)
        if item.type == "blob" and item.mode == _GIT_SYMLINK_MODE:
            raise _symlink_error(child)
        yield from _walk_git(item, child)


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


def _read_blob(blob: Any) -> bytes:
    data: bytes = blob.data_stream.read()
    return data
