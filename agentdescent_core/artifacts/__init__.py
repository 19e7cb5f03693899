"""Artifacts: what evolves, as a flat {key: text} state, and how proposals become Diffs.

``FrozenSet`` (from :mod:`agentdescent_core.governance`) is named here too: it
is what a :class:`FileTree` is given to say which files may not evolve.  The
names load on first use (:mod:`agentdescent_core.lazy`): the child runs import
``artifacts.diff`` and must not pay for ``FileTree`` and pathspec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Diff": "agentdescent_core.artifacts.diff",
    "apply_ops": "agentdescent_core.artifacts.diff",
    "diff_id_for": "agentdescent_core.artifacts.diff",
    "FileTree": "agentdescent_core.artifacts.filetree",
    "FileTreeLimits": "agentdescent_core.artifacts.filetree",
    "TrustRegion": "agentdescent_core.artifacts.filetree",
    "render_tree": "agentdescent_core.artifacts.filetree",
    "state_hash": "agentdescent_core.artifacts.filetree",
    "AppendRules": "agentdescent_core.artifacts.strategies",
    "KeyedRules": "agentdescent_core.artifacts.strategies",
    "SingleSlot": "agentdescent_core.artifacts.strategies",
    "Strategy": "agentdescent_core.artifacts.strategies",
    "rule_key": "agentdescent_core.artifacts.strategies",
    "FrozenSet": "agentdescent_core.governance",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from agentdescent_core.artifacts.diff import (
        Diff as Diff,
        apply_ops as apply_ops,
        diff_id_for as diff_id_for,
    )
    from agentdescent_core.artifacts.filetree import (
        FileTree as FileTree,
        FileTreeLimits as FileTreeLimits,
        TrustRegion as TrustRegion,
        render_tree as render_tree,
        state_hash as state_hash,
    )
    from agentdescent_core.artifacts.strategies import (
        AppendRules as AppendRules,
        KeyedRules as KeyedRules,
        SingleSlot as SingleSlot,
        Strategy as Strategy,
        rule_key as rule_key,
    )
    from agentdescent_core.governance import FrozenSet as FrozenSet
