"""How a strategy's {key: value} state is stored as files on the ledger.

The ledger stores every artifact as files in a git tree.  A FileTree's keys
already are repo-relative paths, so its codec is the identity.  Every other
strategy (SingleSlot, AppendRules, KeyedRules, yours) keeps one file per key
under one folder, the key percent-encoded into the file name, so any key
round-trips and a reviewer can read each rule as its own file in the diff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable
from urllib.parse import quote, unquote

from agentdescent_core.artifacts.filetree import FileTree, TrustRegion


@runtime_checkable
class StateCodec(Protocol):
    """Translates between a strategy's key space and the ledger's file paths."""

    @property
    def tree(self) -> FileTree:
        """The FileTree the ledger validates and loads files with."""
        ...

    def to_files(self, ops: Mapping[str, str | None]) -> dict[str, str | None]: ...

    def from_files(self, files: Mapping[str, str]) -> dict[str, str]: ...


class FileTreeCodec:
    """Identity: the strategy is a FileTree and its keys are the paths."""

    def __init__(self, tree: FileTree) -> None:
        self._tree = tree

    @property
    def tree(self) -> FileTree:
        return self._tree

    def to_files(self, ops: Mapping[str, str | None]) -> dict[str, str | None]:
        return dict(ops)

    def from_files(self, files: Mapping[str, str]) -> dict[str, str]:
        return dict(files)


class KeyFileCodec:
    """One file per key, ``<root>/<percent-encoded key>.txt``."""

    SUFFIX = ".txt"

    def __init__(self, root: str = "artifact", *, max_keys: int = 10_000) -> None:
        # The trust region is the strategy's business (AggregatorConfig); the ledger
        # only has to hold whatever the aggregator accepted.
        self._tree = FileTree(
            [root], trust_region=TrustRegion(max_files_per_diff=max_keys,
                                             max_bytes_per_file=10_000_000),
        )
        self.root = self._tree.roots[0]

    @property
    def tree(self) -> FileTree:
        return self._tree

    def path_of(self, key: str) -> str:
        return f"{self.root}/{quote(key, safe='')}{self.SUFFIX}"

    def to_files(self, ops: Mapping[str, str | None]) -> dict[str, str | None]:
        return {self.path_of(key): value for key, value in ops.items()}

    def from_files(self, files: Mapping[str, str]) -> dict[str, str]:
        prefix = self.root + "/"
        state: dict[str, str] = {}
        for path, text in files.items():
            name = path.removeprefix(prefix)
            if path.startswith(prefix) and "/" not in name and name.endswith(self.SUFFIX):
                state[unquote(name[: -len(self.SUFFIX)])] = text
        return state


def codec_for(strategy: object, *, root: str = "artifact") -> StateCodec:
    """The codec a strategy's states are stored with."""
    if isinstance(strategy, FileTree):
        return FileTreeCodec(strategy)
    return KeyFileCodec(root)
