"""The reference aggregator: per-artifact buckets, one merge pipeline per firing.

One firing, in order (each stage can end it with a stable category):

1. validate every card (unknown-artifact, section-violation, oversized,
   invalid-proposal, frozen-violation) -- refused cards get their own report;
2. staleness filter: ``eta = head_version - base_version`` per card, the policy
   decides; a rebase re-applies the ops to the head (3-way per text file) and
   keeps the card only if its gain on its own tasks still holds (all-stale);
3. conflict resolution and fusion (:mod:`.conflicts`, :mod:`.fusion`);
4. audit gate (oracle-rejected), acceptance test (below-threshold), guards
   (guard-failed);
5. compare-and-swap commit against the head read at step 2 (cas-conflict: the
   cards go back into the bucket for the next firing).

Every merge decision runs on the caller's thread, under one lock, so at most
one candidate of this artifact is ever in evaluation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from agentdescent_core.aggregator.audit import AuditScheduler
from agentdescent_core.aggregator.candidates import Candidate
from agentdescent_core.aggregator.checks import guard_regressions
from agentdescent_core.aggregator.config import AggregatorConfig
from agentdescent_core.aggregator.hooks import check_overrides
from agentdescent_core.aggregator.pipeline import Firing
from agentdescent_core.aggregator.store import ArtifactStore
from agentdescent_core.errors import ContractError
from agentdescent_core.evaluation.protocol import Disqualifying, Selective, Verifier
from agentdescent_core.evidence import EvidenceCard, MergeOutcome, MergeReport
from agentdescent_core.ledger.ledger import PromoteResult
from agentdescent_core.staleness import StalenessPolicy, get_policy
from agentdescent_core.stats.policies import AcceptancePolicy, policy_for

Oracle = Callable[[Mapping[str, str]], float]


@runtime_checkable
class AggregatorProtocol(Protocol):
    """What the evolve loops need from an aggregator (``aggregator_factory=``)."""

    def step(self, cards: Sequence[EvidenceCard], round: int, *,
             trailers: Mapping[str, str] | None = None) -> list[MergeReport]:
        """File ``cards`` into their buckets and fire every bucket that is ready.

        ``trailers`` go into the message of every commit this step makes (the
        durable run names its run and generation there); a driver passes them
        only when it has some, so an aggregator without the keyword still works.
        """
        ...

    def flush(self, round: int) -> list[MergeReport]:
        """Fire every non-empty bucket now."""
        ...

    def finish(self, *, clean: bool) -> PromoteResult | None:
        """End of run: promote dev to stable when the run finished cleanly."""
        ...

    def head(self) -> tuple[int, dict[str, str]]:
        """``(version, state)`` of the dev head."""
        ...

    def head_reward(self) -> float:
        """Eval-task reward of the dev head."""
        ...


class Aggregator:
    """The reference merge pipeline for one artifact (see the module docstring).

    ``audit`` defaults to a scheduler built from the config's oracle budget and
    trust floor; ``staleness_policy`` to Guarded; ``acceptance_policy`` to the
    config's ``acceptance`` policy at the config's ``repeats``.  ``oracle``
    scores a state (higher is better); without one the audit is a full
    evaluation of the eval tasks at ``config.audit_repeats``.

    Attributes for reports: ``promotions`` (every PromoteResult that moved
    stable), ``audit`` (trust, oracle calls used).

    A subclass may override the protocol methods and :meth:`_tournament`; a
    method named after another merge stage raises ContractError when the
    subclass is built (see :mod:`.hooks`), because the engine would never call it.
    """

    def __init__(
        self,
        store: ArtifactStore,
        verifier: Verifier,
        audit: AuditScheduler | None,
        config: AggregatorConfig,
        staleness_policy: StalenessPolicy | None = None,
        *,
        acceptance_policy: AcceptancePolicy | None = None,
        oracle: Oracle | None = None,
    ) -> None:
        check_overrides(type(self), Aggregator)
        self.store = store
        self.verifier = verifier
        self.config = config
        self.audit = audit if audit is not None else AuditScheduler(
            oracle_budget=config.oracle_budget, trust_floor=config.trust_floor
        )
        self.staleness_policy = staleness_policy or get_policy()
        if acceptance_policy is None:
            acceptance_policy = policy_for(config.acceptance, config.repeats,
                                           base_delta=config.base_delta)
        self.acceptance_policy = acceptance_policy
        self.oracle = oracle
        self.promotions: list[PromoteResult] = []
        self._bucket: list[tuple[int, EvidenceCard]] = []
        self._lock = threading.RLock()
        self._last_change_round: int | None = None
        self._clock_head: str | None = None
        self._checked_round: int | None = None
        self._oracle_cache: dict[str, float] = {}
        self._firing: Firing | None = None  # the firing in progress, for _tournament

    def __repr__(self) -> str:
        return (f"Aggregator({self.store.artifact_id!r}, policy={self.staleness_policy!r}, "
                f"pending={len(self._bucket)})")

    @property
    def pending(self) -> int:
        """Cards waiting in the bucket."""
        return len(self._bucket)

    # ------------------------------------------------------------ protocol

    def step(self, cards: Sequence[EvidenceCard], round: int, *,
             trailers: Mapping[str, str] | None = None) -> list[MergeReport]:
        with self._lock:
            reports: list[MergeReport] = []
            for card in cards:
                if card.artifact_id != self.store.artifact_id:
                    reports.append(self._unknown(card))
                else:
                    self._bucket.append((round, card))
            if self._ready(round):
                reports.extend(self._fire(round, trailers or {}))
            self._tick(round, reports)
            return reports

    def flush(self, round: int) -> list[MergeReport]:
        with self._lock:
            reports = self._fire(round, {}) if self._bucket else []
            self._tick(round, reports)
            return reports

    def finish(self, *, clean: bool) -> PromoteResult | None:
        with self._lock:
            if not clean or not self._guards_hold():
                return None
            return self._promote()

    def head(self) -> tuple[int, dict[str, str]]:
        version, _sha, state = self.store.head()
        return version, state

    def head_reward(self) -> float:
        _version, _sha, state = self.store.head()
        tasks = self.verifier.split.eval_tasks
        return self.verifier.evaluate(state, tasks, self.config.base_repeats).reward()

    # ------------------------------------------------------------ buckets

    def _ready(self, round: int) -> bool:
        if not self._bucket:
            return False
        if len(self._bucket) >= self.config.batch_size:
            return True
        oldest = min(filed for filed, _card in self._bucket)
        return round - oldest >= self.config.t_max

    def _fire(self, round: int, trailers: Mapping[str, str]) -> list[MergeReport]:
        filed, self._bucket = self._bucket, []
        firing = Firing(self, [card for _r, card in filed], round, trailers=trailers)
        # An exception (BackendError, LedgerError, ContractError) leaves the firing's
        # cards with the caller, who may step them again; keeping them here as well
        # would file them twice.
        self._firing = firing
        try:
            reports = firing.run()
        finally:
            self._firing = None
        if firing.refile:
            keep = {id(card) for card in firing.refile}
            self._bucket = [(r, c) for r, c in filed if id(c) in keep] + self._bucket
        return reports

    def _unknown(self, card: EvidenceCard) -> MergeReport:
        return MergeReport(
            artifact_id=card.artifact_id,
            category=MergeOutcome.UNKNOWN_ARTIFACT.value,
            reason=(f"card from {card.worker} targets artifact {card.artifact_id!r}; this "
                    f"aggregator holds only {self.store.artifact_id!r}"),
            diff=card.diff,
            considered=1,
        )

    # ------------------------------------------------------------ hooks

    def _tournament(self, artifact: Mapping[str, str], candidates: list[Candidate]
                    ) -> Candidate:
        """Pick the candidate that goes on to the audit and the acceptance test.

        The override point for "which proposal, or which union of them, is
        worth testing": ``artifact`` is the dev head's state (read-only) and
        ``candidates`` the proposals left after staleness and conflicts.  The
        default adds their fused union (``config.fusion``) and scores the
        entrants as ``config.tournament`` says.  An override returns one of
        ``candidates``, or what ``super()._tournament`` returned for a subset
        of them; narrowing to one candidate means it is never fused.
        """
        if self._firing is None:
            raise ContractError(
                f"{type(self).__name__}._tournament was called outside a merge; the engine "
                "calls it while a bucket fires (from step or flush)"
            )
        return self._firing._tournament(list(candidates))

    # ------------------------------------------------------------ promotion

    def _tick(self, round: int, reports: Sequence[MergeReport]) -> None:
        """Advance the promotion clock: K rounds without a dev change, guards holding.

        Any move of dev counts as a change, this aggregator's commits and
        anyone else's, so the clock restarts whenever the head is new.
        """
        sha = self.store.ledger.head("dev")
        if sha != self._clock_head or any(report.committed for report in reports):
            self._clock_head = sha
            self._last_change_round = round
            return
        if self._checked_round == round or self._last_change_round is None:
            return
        self._checked_round = round
        if round - self._last_change_round < self.config.promote_after:
            return
        if self._guards_hold():
            self._promote()

    def _guards_hold(self) -> bool:
        guards = self.verifier.split.guards
        if not guards:
            return True
        _v, _s, stable = self.store.stable()
        _v, _s, dev = self.store.head()
        return not guard_regressions(self.verifier, stable, dev, guards, self.config.repeats)

    def _promote(self) -> PromoteResult | None:
        if self.store.ledger.head("dev") == self.store.ledger.head("stable"):
            return None
        if isinstance(self.verifier, Selective):
            # Before stable moves, the evidence dev kept without running is run for real;
            # a head those runs rule out (a frozen file written, tamper) is not promoted.
            _v, _s, dev = self.store.head()
            self.verifier.confirm(dev)
            if isinstance(self.verifier, Disqualifying) \
                    and self.verifier.disqualification(dev) is not None:
                return None
        result = self.store.promote()
        if result.moved:
            self.promotions.append(result)
        return result

    # ------------------------------------------------------------ oracle

    def oracle_score(self, state: Mapping[str, str], cache_key: str | None) -> tuple[float, int]:
        """The oracle's score of ``state`` and the calls it cost (0 on a cache hit)."""
        assert self.oracle is not None
        if cache_key is not None and cache_key in self._oracle_cache:
            return self._oracle_cache[cache_key], 0
        value = float(self.oracle(state))
        if cache_key is not None:
            self._oracle_cache[cache_key] = value
        return value, 1
