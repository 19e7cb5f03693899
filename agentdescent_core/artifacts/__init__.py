"""Artifacts: what evolves, as a flat {key: text} state, and how proposals become Diffs.

``FrozenSet`` (from :mod:`agentdescent_core.governance`) is named here too: it
is what a :class:`FileTree` is given to say which files may not evolve.
"""

from __future__ import annotations

from agentdescent_core.artifacts.diff import Diff, apply_ops, diff_id_for
from agentdescent_core.artifacts.filetree import (
    FileTree,
    FileTreeLimits,
    TrustRegion,
    render_tree,
    state_hash,
)
from agentdescent_core.artifacts.strategies import (
    AppendRules,
    KeyedRules,
    SingleSlot,
    Strategy,
    rule_key,
)
from agentdescent_core.governance import FrozenSet

__all__ = [
    "AppendRules",
    "Diff",
    "FileTree",
    "FileTreeLimits",
    "FrozenSet",
    "KeyedRules",
    "SingleSlot",
    "Strategy",
    "TrustRegion",
    "apply_ops",
    "diff_id_for",
    "render_tree",
    "rule_key",
    "state_hash",
]
