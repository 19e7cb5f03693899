"""Scratch mode: a ledger on a throwaway repository, removed afterwards.

Used for dry runs and for ``evolve()`` without a ``repo_path``: the same Ledger
code runs, but on a bare repository in a temporary directory whose only commit
(on ``main``, version 0) holds the given files.  The repository is bare because
nothing ever needs a checkout: states are read through the ledger.  It is
created with no system/global configuration and no templates (so no sample
hooks), and deleted by :meth:`ScratchLedger.close` or at the end of a ``with``
block.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping

import git

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.artifacts.paths import normalise_path
from agentdescent_core.errors import LedgerError
from agentdescent_core.ledger.branches import BranchesResult
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.ledger.plumbing import RefUpdate

SCRATCH_BASE_BRANCH = "main"


class ScratchLedger(Ledger):
    """A :class:`Ledger` whose repository exists only until :meth:`close`."""

    def __init__(
        self,
        files: Mapping[str, str],
        tree: FileTree,
        *,
        prefix: str = "agentdescent/",
        identity: tuple[str, str] | None = None,
        max_cas_retries: int = 8,
    ) -> None:
        checked = _checked_files(files)
        self.directory = tempfile.mkdtemp(prefix="agentdescent-scratch-")
        self._removed = False
        try:
            _init_bare(self.directory)
            super().__init__(
                self.directory, tree, prefix=prefix, identity=identity,
                max_cas_retries=max_cas_retries,
            )
            self.base_commit = self._write_base(checked)
            self.branches: BranchesResult = self.ensure_branches(self.base_commit)
        except BaseException:
            self._remove()
            raise

    def _write_base(self, files: Mapping[str, str]) -> str:
        ops: dict[str, str | None] = {p: files[p] for p in sorted(files)}
        tree_sha = self.git.build_tree(None, ops, self.git.write_blobs(ops))
        sha = self.git.commit_tree(tree_sha, [], "scratch base for an agentdescent run\n")
        branch = f"refs/heads/{SCRATCH_BASE_BRANCH}"
        self.git.update_refs([RefUpdate(branch, sha, None)], "agentdescent: scratch base")
        self.git.run("symbolic-ref", "HEAD", branch)
        return sha

    def close(self) -> None:
        """Close the ledger and delete the repository (safe to call twice)."""
        super().close()
        self._remove()

    def __enter__(self) -> ScratchLedger:
        return self

    def _remove(self) -> None:
        if not self._removed:
            self._removed = True
            shutil.rmtree(self.directory, ignore_errors=True)


def _checked_files(files: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(files, Mapping):
        raise LedgerError(f"scratch files must map paths to text, got {type(files).__name__}")
    checked: dict[str, str] = {}
    for raw, text in files.items():
        path = normalise_path(raw)
        if not isinstance(text, str):
            raise LedgerError(f"scratch file {raw!r} must be text, got {type(text).__name__}")
        if path in checked:
            raise LedgerError(f"scratch files name {path!r} twice")
        checked[path] = text
    return checked


def _init_bare(directory: str) -> None:
    """``git init --bare`` with no user configuration and no template files.

    ``GIT_DIR`` is pinned because git init honours an inherited one (a pre-commit
    hook exports it) over its argument.
    """
    with tempfile.TemporaryDirectory(prefix="agentdescent-templates-") as templates:
        env = {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TEMPLATE_DIR": templates,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_DIR": directory,
        }
        git.Git(directory).execute(["git", "init", "--bare", "--quiet", directory], env=env)
