"""One firing of a bucket: the merge pipeline from cards to (at most) one commit.

Kept apart from :mod:`.aggregator` (buckets, clock, promotion) so each stage
reads top to bottom: every stage either hands survivors on or ends the firing
with a :class:`MergeReport` whose reason carries the numbers it measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from agentdescent_core.aggregator.candidates import Candidate, rebase_ops
from agentdescent_core.aggregator.checks import (
    PairRun,
    check_ops,
    guard_regressions,
    run_acceptance,
    run_pairs,
    validate_card,
)
from agentdescent_core.aggregator.conflicts import dedupe, resolve_conflicts
from agentdescent_core.aggregator.fusion import fuse, tournament
from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.artifacts.strategies import contract_breaking
from agentdescent_core.errors import CasConflictError, ContractError, LedgerError
from agentdescent_core.evaluation.protocol import Disqualifying
from agentdescent_core.evidence import EvidenceCard, MergeOutcome, MergeReport
from agentdescent_core.ledger.message import Evidence
from agentdescent_core.staleness import StalenessAction, alpha_for
from agentdescent_core.stats.policies import Sequential
from agentdescent_core.stats.samples import AcceptanceDecision

if TYPE_CHECKING:
    from agentdescent_core.aggregator.aggregator import Aggregator


class _Accepted:
    """The acceptance verdict, and the smaller candidate to commit instead, if any."""

    def __init__(self, decision: AcceptanceDecision,
                 hitchhikers: tuple[Candidate, dict[str, str], AcceptanceDecision] | None = None
                 ) -> None:
        self.decision = decision
        self.hitchhikers = hitchhikers


class Firing:
    """The merge of one bucket's cards against the dev head read when it starts."""

    def __init__(self, agg: Aggregator, cards: Sequence[EvidenceCard], round: int, *,
                 trailers: Mapping[str, str] | None = None) -> None:
        self.agg = agg
        self.cards = list(cards)
        self.round = round
        self.trailers = dict(trailers or {})
        self.refile: list[EvidenceCard] = []
        self.textual = isinstance(agg.store.strategy, FileTree)
        self.eval_tasks = agg.verifier.split.eval_tasks
        self.version, self.sha, self.head = agg.store.head()
        self.evaluations_at_start = agg.verifier.evaluations
        self.notes: list[str] = []
        self.counts = {"considered": 0, "discarded_stale": 0, "conflicts_dropped": 0}
        self._base_states: dict[int, dict[str, str] | None] = {}
        self._parts: list[Candidate] = []

    # ------------------------------------------------------------ helpers

    def _score(self, state: Mapping[str, str], tasks: Sequence[str]) -> float:
        return self.agg.verifier.evaluate(state, tasks, self.agg.config.score_repeats).reward()

    def _report(self, category: MergeOutcome, reason: str, **fields: object) -> MergeReport:
        notes = "; ".join(self.notes)
        return MergeReport(
            artifact_id=self.agg.store.artifact_id,
            category=category.value,
            reason=f"{reason}" + (f" [{notes}]" if notes else ""),
            evaluations=self.agg.verifier.evaluations - self.evaluations_at_start,
            **self.counts,  # type: ignore[arg-type]
            **fields,  # type: ignore[arg-type]
        )

    def _base_state(self, version: int) -> dict[str, str] | None:
        if version not in self._base_states:
            try:
                self._base_states[version] = (
                    self.head if version == self.version else self.agg.store.state_at(version)
                )
            except LedgerError:
                self._base_states[version] = None  # before a carry: no common base to merge on
        return self._base_states[version]

    # ------------------------------------------------------------ stages

    def run(self) -> list[MergeReport]:
        reports: list[MergeReport] = []
        valid: list[EvidenceCard] = []
        for card in self.cards:
            refusal = validate_card(card, self.agg.store, self.agg.config)
            if refusal is None:
                valid.append(card)
                continue
            reports.append(MergeReport(
                artifact_id=card.artifact_id, category=refusal.category, reason=refusal.reason,
                diff=card.diff, considered=1,
            ))
        if valid:
            self.counts["considered"] = len(valid)
            reports.append(self._merge(valid))
        return reports

    def _merge(self, cards: list[EvidenceCard]) -> MergeReport:
        survivors = self._staleness(cards)
        if not survivors:
            return self._report(
                MergeOutcome.ALL_STALE,
                f"all {len(cards)} card(s) dropped by the {self.agg.staleness_policy.name} "
                f"staleness policy at head v{self.version}",
            )
        candidates = dedupe(survivors)
        candidates, dropped = resolve_conflicts(
            candidates, self.head, textual=self.textual, fallback_tasks=self.eval_tasks,
            score=lambda cand, tasks: self._score(cand.state(self.head), tasks),
        )
        self.counts["conflicts_dropped"] = len(dropped)
        self.notes.extend(d.describe() for d in dropped)
        winner = self.agg._tournament(dict(self.head), list(candidates))
        if not isinstance(winner, Candidate):
            raise ContractError(
                f"{type(self.agg).__name__}._tournament returned {type(winner).__name__}; it "
                "must return one of the candidates it was given (or what "
                "super()._tournament returned)"
            )
        return self._decide(winner)

    def _staleness(self, cards: list[EvidenceCard]) -> list[Candidate]:
        agg, kept = self.agg, []
        for card in map(self._mark_contract, cards):
            eta = max(0, self.version - card.base_version)
            alpha = alpha_for(
                agg.store.blast_radius, contract_breaking=card.contract_breaking,
                alpha_head=agg.config.alpha_head, alpha_tail=agg.config.alpha_tail,
            )
            action = self._action(eta, alpha, card.contract_breaking)
            breaking = ", contract-breaking" if card.contract_breaking else ""
            who = f"{card.worker} (eta={eta}, alpha={alpha}{breaking})"
            if action is StalenessAction.DISCARD:
                self.counts["discarded_stale"] += 1
                self.notes.append(f"{who} discarded as stale")
                continue
            ops = dict(card.diff.ops)
            if eta > 0:
                rebased, clashes = rebase_ops(
                    self._base_state(card.base_version), self.head, ops, textual=self.textual
                )
                if action is StalenessAction.REBASE:
                    holds, note = self._reverify(card, rebased, clashes)
                    self.notes.append(f"{who} {note}")
                    if not holds:
                        self.counts["discarded_stale"] += 1
                        continue
                ops = ops if clashes else rebased
            kept.append(Candidate((card,), ops))
        return kept

    def _mark_contract(self, card: EvidenceCard) -> EvidenceCard:
        """The card with ``contract_breaking`` set when its strategy says the diff breaks it.

        The strategy judges the diff against the state it was proposed on (the
        head when that version can no longer be read); a card already marked by
        whoever filed it stays marked.
        """
        if card.contract_breaking:
            return card
        base = self._base_state(card.base_version)
        state = self.head if base is None else base
        if not contract_breaking(self.agg.store.strategy, state, card.diff):
            return card
        return dataclasses.replace(card, contract_breaking=True)

    def _action(self, eta: int, alpha: int, contract_breaking: bool) -> StalenessAction:
        policy = self.agg.staleness_policy
        raw = policy.decide(eta, alpha, contract_breaking)
        try:
            return StalenessAction(raw)
        except ValueError:
            raise ContractError(
                f"staleness policy {policy!r} returned {raw!r}; decide() must return a "
                "StalenessAction (accept, rebase or discard)"
            ) from None

    def _reverify(self, card: EvidenceCard, ops: dict[str, str | None], clashes: list[str]
                  ) -> tuple[bool, str]:
        """Does the card's gain on its own tasks survive on the head?  And the note saying so."""
        if clashes:
            return False, f"dropped: its edits of {clashes[:3]} clash with the head's"
        tasks = card.tasks or self.eval_tasks
        before = self._score(self.head, tasks)
        after = self._score(Candidate((card,), ops).state(self.head), tasks)
        measured = f"({before:.3f} -> {after:.3f} on {len(tasks)} task(s))"
        if after > before:
            return True, f"rebased, gain holds {measured}"
        return False, f"dropped: gain gone on rebase {measured}"

    def _tournament(self, candidates: list[Candidate]) -> Candidate:
        entrants = list(candidates)
        if self.agg.config.fusion:
            fused = fuse(candidates, self.head, textual=self.textual)
            if fused is not None:
                refusal = check_ops(fused.ops, self.agg.store, self.agg.config)
                if refusal is None:
                    entrants.append(fused)
                    inside = {id(card) for card in fused.cards}
                    self._parts = [c for c in candidates
                                   if all(id(card) in inside for card in c.cards)]
                else:
                    self.notes.append(f"fusion left out: {refusal.reason}")
        if self.agg.config.tournament == "union-first" and len(entrants) > len(candidates):
            union = self._score(entrants[-1].state(self.head), self.eval_tasks)
            head = self._score(self.head, self.eval_tasks)
            if union > head:
                self.notes.append(
                    f"union first: {entrants[-1].label}={union:.3f} > head {head:.3f}; "
                    "parts not scored"
                )
                return entrants[-1]
        winner, scores = tournament(
            entrants, lambda cand: self._score(cand.state(self.head), self.eval_tasks)
        )
        if scores:
            table = ", ".join(f"{c.label}={s:.3f}" for c, s in scores)
            self.notes.append(f"tournament: {table}; {winner.label} goes on")
        return winner

    def _cheap_improves(self, winner: Candidate, state: Mapping[str, str]) -> bool:
        """The cheap layer's verdict: self-verification, or a few eval tasks."""
        n = self.agg.config.cheap_eval_tasks
        cards = winner.cards
        if n is None and all(c.before is not None and c.after is not None for c in cards):
            return all((c.after or 0.0) > (c.before or 0.0) for c in cards)
        tasks = self.eval_tasks[:n] if n is not None else (winner.tasks or self.eval_tasks)
        return self._score(state, tasks) > self._score(self.head, tasks)

    def _audit(self, winner: Candidate, state: Mapping[str, str]) -> MergeReport | None:
        agg = self.agg
        decision = agg.audit.gate(agg.store.blast_radius)
        self.notes.append(decision.reason)
        if not decision.audit:
            return None
        agg.audit.audits += 1
        if agg.oracle is not None:
            base, used_base = agg.oracle_score(self.head, self.sha)
            cand, used_cand = agg.oracle_score(state, None)
            agg.audit.spend(used_base + used_cand)
            what = "oracle"
        else:
            repeats = agg.config.audit_repeats
            base = agg.verifier.evaluate(self.head, self.eval_tasks, repeats).reward()
            cand = agg.verifier.evaluate(state, self.eval_tasks, repeats).reward()
            agg.audit.spend(1)
            what = f"full evaluation at {repeats} repeats"
        if cand >= base:
            self.notes.append(f"{what} agrees: {base:.3f} -> {cand:.3f}")
            return None
        agg.audit.vetoes += 1
        return self._report(
            MergeOutcome.ORACLE_REJECTED,
            f"{winner.label}: {what} scores it {cand:.3f}, below the head's {base:.3f}",
            diff=self._diff(winner), fused=winner.fused,
        )

    def _decide(self, winner: Candidate) -> MergeReport:
        agg, state = self.agg, winner.state(self.head)
        diff = self._diff(winner)
        if state == self.head:
            return self._report(MergeOutcome.BELOW_THRESHOLD,
                                f"{winner.label} changes nothing on v{self.version}",
                                diff=diff, fused=winner.fused)
        cheap = self._cheap_improves(winner, state)
        ruled_out = self._disqualified(winner, state, diff)
        if ruled_out is not None:
            return ruled_out
        vetoed = self._audit(winner, state)
        if vetoed is not None:
            return vetoed
        verdict = self._accept(winner, state)
        decision = verdict.decision
        if verdict.hitchhikers is not None:
            winner, state, decision = verdict.hitchhikers
            diff = self._diff(winner)
        trust = agg.audit.record(cheap, decision.reward_candidate > decision.reward_base)
        # Uncertainty is highest where P(improvement) is nearest 1/2.
        agg.audit.submit(winner.key, agg.store.blast_radius,
                         1.0 - abs(2.0 * decision.p_improvement - 1.0))
        self.notes.append(f"trust {trust:.2f} (cheap verdict {'up' if cheap else 'not up'})")
        measured = dict(
            diff=diff, fused=winner.fused, p_improvement=decision.p_improvement,
            reward_before=decision.reward_base, reward_after=decision.reward_candidate,
            flips=tuple(decision.flips),
            extra={"policy": decision.policy, "p_value": decision.p_value,
                   "trust": trust, "workers": winner.workers},
        )
        ruled_out = self._disqualified(winner, state, diff)
        if ruled_out is not None:
            return ruled_out
        if not decision.accept:
            return self._report(MergeOutcome.BELOW_THRESHOLD,
                                f"{winner.label}: {decision.reason}", **measured)
        broken = guard_regressions(agg.verifier, self.head, state, agg.verifier.split.guards,
                                   agg.config.repeats)
        if broken:
            listed = ", ".join(f"{g.task} {g.before:.2f} -> {g.after:.2f}" for g in broken[:5])
            return self._report(MergeOutcome.GUARD_FAILED,
                                f"{winner.label}: guard(s) regressed: {listed}", **measured)
        return self._commit(winner, diff, decision.reason, measured)

    def _accept(self, winner: Candidate, state: dict[str, str]) -> _Accepted:
        """The acceptance test's verdict; for an accepted union, without its hitchhikers.

        "Union first, no hitchhikers": a fused union that the test accepts may
        carry a part that did nothing (a useless note fused with a real fix).
        A part whose own tasks were paired and none came out better is such a
        part; the union without it is tested (its pairs reuse the base runs
        and, where the states agree, nothing else) and committed instead when
        it is accepted too, so the smaller candidate wins when the evidence
        does not separate them.
        """
        agg = self.agg
        policy = agg.acceptance_policy
        if not isinstance(policy, Sequential):
            return _Accepted(run_acceptance(agg.verifier, policy, self.head, state,
                                            self.eval_tasks, agg.config,
                                            version=self.version).decision)
        paired = run_pairs(agg.verifier, policy, self.head, state, self.eval_tasks)
        if not (paired.decision.accept and winner.fused and self._parts):
            return _Accepted(paired.decision)
        kept, dropped = self._supported(paired)
        if not dropped or not kept:
            return _Accepted(paired.decision)
        smaller = kept[0] if len(kept) == 1 else fuse(kept, self.head, textual=self.textual)
        if smaller is None:
            return _Accepted(paired.decision)
        small_state = smaller.state(self.head)
        second = run_pairs(agg.verifier, policy, self.head, small_state, self.eval_tasks)
        names = ", ".join(p.label for p in dropped)
        if not second.decision.accept:
            self.notes.append(f"kept the whole union: without {names} it is not accepted "
                              f"({second.decision.reason})")
            return _Accepted(paired.decision)
        self.notes.append(f"dropped {len(dropped)} part(s) the union's own pairs do not "
                          f"support: {names}")
        return _Accepted(paired.decision, (smaller, small_state, second.decision))

    def _supported(self, paired: PairRun) -> tuple[list[Candidate], list[Candidate]]:
        """The union's parts split into (kept, dropped) by the union's pairs on their tasks."""
        kept: list[Candidate] = []
        dropped: list[Candidate] = []
        for part in self._parts:
            judged = [t for t in part.tasks if t in paired.candidate.rewards]
            if judged and not any(paired.candidate.mean(t) > paired.base.mean(t)
                                  for t in judged):
                dropped.append(part)
            else:
                kept.append(part)
        return kept, dropped

    def _disqualified(self, winner: Candidate, state: Mapping[str, str], diff: Diff
                      ) -> MergeReport | None:
        """A report when the verifier ruled ``state`` out (e.g. its run touched a frozen file)."""
        verifier = self.agg.verifier
        if not isinstance(verifier, Disqualifying):
            return None
        refusal = verifier.disqualification(state)
        if refusal is None:
            return None
        return self._report(MergeOutcome(refusal.category),
                            f"{winner.label} disqualified: {refusal.message}",
                            diff=diff, fused=winner.fused)

    def _commit(self, winner: Candidate, diff: Diff, why: str, measured: dict[str, object]
                ) -> MergeReport:
        agg = self.agg
        evidence = Evidence(
            reward_before=measured["reward_before"],  # type: ignore[arg-type]
            reward_after=measured["reward_after"],  # type: ignore[arg-type]
            p_improvement=measured["p_improvement"],  # type: ignore[arg-type]
            extra={"Agentdescent-Round": str(self.round),
                   "Agentdescent-Cards": str(len(winner.cards)),
                   "Agentdescent-Fused": "yes" if winner.fused else "no",
                   **self.trailers},
        )
        try:
            result = agg.store.commit(diff, evidence=evidence, expected_head=self.sha)
        except CasConflictError as exc:
            self.refile = list(winner.cards)
            return self._report(
                MergeOutcome.CAS_CONFLICT,
                f"{winner.label} passed ({why}) but dev moved: {exc}; its cards are re-filed",
                **measured,
            )
        if not result.committed:
            return self._report(MergeOutcome.BELOW_THRESHOLD,
                                f"{winner.label} changes nothing on v{self.version}", **measured)
        return self._report(
            MergeOutcome.COMMITTED, f"{winner.label} committed as v{result.version}: {why}",
            version=result.version, sha=result.sha, **measured,
        )

    def _diff(self, winner: Candidate) -> Diff:
        rationale = "\n\n".join(
            dict.fromkeys(c.diff.rationale for c in winner.cards if c.diff.rationale)
        )
        return Diff(
            winner.ops, target=self.agg.store.artifact_id, base_version=self.version,
            author=", ".join(winner.workers), rationale=rationale,
        )
