"""The unit of change: a content-addressed set of key → value operations."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def diff_id_for(target: str, ops: Mapping[str, str | None]) -> str:
    """Content address of a change: same target and same ops give the same id.

    Author and base version are deliberately left out, so two workers that
    propose the identical edit produce duplicates, not a conflict.
    """
    payload = json.dumps(
        {"target": target, "ops": {k: ops[k] for k in sorted(ops)}},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Diff:
    """A proposed change to one artifact.

    ``ops`` maps a state key (for a FileTree: a posix repo-relative path) to its
    new value, or to ``None`` to delete the key.  ``base_version`` is the ledger
    version the proposal was made against; it is what staleness is measured
    from.  ``rationale`` is the proposer's explanation, carried into commit
    messages and reports.
    """

    ops: Mapping[str, str | None]
    target: str = "artifact"
    base_version: int = 0
    author: str = "unknown"
    rationale: str = ""
    diff_id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        frozen_ops = MappingProxyType(dict(self.ops))
        object.__setattr__(self, "ops", frozen_ops)
        if not self.diff_id:
            object.__setattr__(self, "diff_id", diff_id_for(self.target, frozen_ops))

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self.ops)

    def apply(self, state: Mapping[str, str]) -> dict[str, str]:
        """Return a new state with this diff's ops applied (the input is not changed)."""
        return apply_ops(state, self.ops)


def apply_ops(state: Mapping[str, str], ops: Mapping[str, str | None]) -> dict[str, str]:
    """Apply key → value-or-None ops to a state; deleting a missing key is a no-op."""
    new_state = dict(state)
    for key, value in ops.items():
        if value is None:
            new_state.pop(key, None)
        else:
            new_state[key] = value
    return new_state
