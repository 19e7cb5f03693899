"""Artifacts: what evolves, as a flat {key: text} state, and how proposals become Diffs."""

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

__all__ = [
    "AppendRules",
    "Diff",
    "FileTree",
    "FileTreeLimits",
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
