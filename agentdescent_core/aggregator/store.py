"""One artifact on the ledger, seen in its strategy's key space.

The ledger stores files; strategies think in keys (a rule id, a category, a
path).  The store is where the two meet, so the aggregator never handles
file paths of a non-FileTree strategy and the ledger never learns about
strategies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.strategies import Strategy
from agentdescent_core.codec import StateCodec
from agentdescent_core.governance import check_artifact_id, classify
from agentdescent_core.ledger.ledger import CommitResult, Ledger, PromoteResult
from agentdescent_core.ledger.message import Evidence

_CACHED_STATES = 8


class ArtifactStore:
    """The versions of one artifact (``artifact_id``) on a ledger's dev/stable branches.

    ``blast_radius`` (a share in [0, 1]) decides the artifact's layer through
    :func:`agentdescent_core.governance.classify`; reserved L0 names are refused.
    The ledger's branches must exist (``ledger.ensure_branches()``).
    """

    def __init__(
        self,
        ledger: Ledger,
        strategy: Strategy,
        codec: StateCodec,
        *,
        artifact_id: str = "artifact",
        blast_radius: float = 0.2,
    ) -> None:
        check_artifact_id(artifact_id)
        classify(blast_radius)  # refuses a non-number or one outside [0, 1]
        self.ledger = ledger
        self.strategy = strategy
        self.codec = codec
        self.artifact_id = artifact_id
        self.blast_radius = float(blast_radius)
        # A commit's state never changes, and the head is read by every firing, every
        # reward measurement and every snapshot; keep the last few states by sha.
        self._states: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._states_lock = threading.Lock()  # async workers snapshot while the merger reads

    def __repr__(self) -> str:
        return f"ArtifactStore({self.artifact_id!r}, {self.ledger!r})"

    def head(self) -> tuple[int, str, dict[str, str]]:
        """``(version, sha, state)`` of the dev head."""
        sha = self.ledger.head("dev")
        return self.ledger.version_of(sha), sha, self._state_of(sha)

    def state_at(self, rev_or_version: str | int) -> dict[str, str]:
        """The artifact state at a dev version number or a commit sha."""
        return self.codec.from_files(self.ledger.read_state(rev_or_version))

    def stable(self) -> tuple[int, str, dict[str, str]]:
        """``(version, sha, state)`` of the stable head."""
        sha = self.ledger.head("stable")
        return self.ledger.version_of(sha), sha, self._state_of(sha)

    def _state_of(self, sha: str) -> dict[str, str]:
        """A copy of the state at commit ``sha``, read from git once per sha."""
        with self._states_lock:
            state = self._states.get(sha)
            if state is not None:
                self._states.move_to_end(sha)
                return dict(state)
        state = self.state_at(sha)
        with self._states_lock:
            self._states[sha] = state
            if len(self._states) > _CACHED_STATES:
                self._states.popitem(last=False)
        return dict(state)

    def commit(self, diff: Diff, *, evidence: Evidence | None, expected_head: str) -> CommitResult:
        """Commit ``diff`` (in key space) on dev only if dev is still at ``expected_head``.

        Raises CasConflictError when dev moved.
        """
        files = self.codec.to_files(diff.ops)
        file_diff = Diff(
            files, target=diff.target, base_version=diff.base_version, author=diff.author,
            rationale=diff.rationale, diff_id=diff.diff_id,
        )
        return self.ledger.commit(file_diff, evidence=evidence, expected_head=expected_head)

    def promote(self) -> PromoteResult:
        """Move stable to the dev head."""
        return self.ledger.promote()

    def log(self) -> list[str]:
        """``"v3 <sha12> <subject>"`` for each dev version since the base, oldest first."""
        return [
            f"v{record.version} {record.sha[:12]} {record.subject}"
            for record in self.ledger.history("dev")
        ]
