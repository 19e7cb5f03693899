"""Reading the user's repository for a workspace, never writing it.

Used when a :class:`~agentdescent_core.sandbox.workspace.Workspace` is created
(where the repository's git directories and working tree are, the commit's
file list, the git-ignored files it copies from the working tree) and by the
evaluation, which warns once about uncommitted changes (:func:`dirty_paths`,
:func:`uncommitted_changes`): a workspace copies the commit, so the user's
uncommitted files never reach a candidate.

Git runs with the isolated environment of
:mod:`agentdescent_core.ledger.gitenv` and optional locks off, so the user's
working tree, ``.git/index`` and ``HEAD`` are never touched, not even the
index's stat cache.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from agentdescent_core.errors import WorkspaceError
from agentdescent_core.ledger.gitenv import isolated_env, with_neutral_filters
from agentdescent_core.sandbox.snapshot import real_parents

# The modes git records (and a workspace gives its files and directories).
_FILE_MODE = 0o644
_EXEC_MODE = 0o755
_DIR_MODE = 0o755


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
