"""The aggregator's merge categories, on real scratch ledgers and a rule-checking verifier.

``RuleVerifier`` is a real (deterministic) implementation of the Verifier
protocol: a task passes when the artifact's text contains the phrase the task
needs, and a guard passes unless the text contains the phrase that breaks it.
The other ``test_aggregator_*`` modules import these helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentdescent_core.aggregator import (
    Aggregator,
    AggregatorConfig,
    AggregatorProtocol,
    ArtifactStore,
    AuditScheduler,
)
from agentdescent_core.artifacts import AppendRules, Diff, FileTree, KeyedRules, Strategy
from agentdescent_core.artifacts.filetree import state_hash
from agentdescent_core.artifacts.strategies import canonical_rule, rule_key
from agentdescent_core.codec import codec_for
from agentdescent_core.errors import BackendError, RefusalError
from agentdescent_core.evaluation.protocol import Disqualifying, TaskSplit
from agentdescent_core.evidence import MERGE_CATEGORIES, EvidenceCard, MergeReport
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger import Ledger
from agentdescent_core.staleness import StalenessPolicy
from agentdescent_core.stats import TaskSamples

POISON = "POISON"


class RuleVerifier:
    """Task t scores 1.0 when the artifact text contains ``needs[t]`` (and no POISON)."""

    def __init__(
        self,
        needs: Mapping[str, str],
        *,
        held_out: Sequence[str] = (),
        guards: Mapping[str, str] | None = None,
        on_evaluate: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        self.needs = dict(needs)
        self.guard_breakers = dict(guards or {})
        train = tuple(t for t in needs if t not in held_out)
        self._split = TaskSplit(train=train, held_out=tuple(held_out),
                                guards=tuple(self.guard_breakers))
        self.on_evaluate = on_evaluate
        self._rows: dict[tuple[str, str], list[float]] = {}
        self._evaluations = 0
        self.states_seen: list[str] = []

    @property
    def split(self) -> TaskSplit:
        return self._split

    @property
    def evaluations(self) -> int:
        return self._evaluations

    def reward(self, state: Mapping[str, str], task: str) -> float:
        text = "\n".join(state[key] for key in sorted(state))
        if task in self.guard_breakers:
            return 0.0 if self.guard_breakers[task] in text else 1.0
        return 1.0 if self.needs[task] in text and POISON not in text else 0.0

    def evaluate(self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
                 ) -> TaskSamples:
        if self.on_evaluate is not None:
            self.on_evaluate(state)
        digest = state_hash(state)
        self.states_seen.append(digest)
        rewards: dict[str, list[float]] = {}
        for task in task_ids:
            row = self._rows.setdefault((digest, task), [])
            while len(row) < repeats:
                row.append(self.reward(state, task))
                self._evaluations += 1
            rewards[task] = row[:repeats]
        return TaskSamples(rewards)


@dataclass
class World:
    """A scratch ledger, its store, a verifier and an aggregator over them."""

    ledger: Ledger
    store: ArtifactStore
    verifier: RuleVerifier
    agg: Aggregator
    strategy: Strategy
    cards_made: int = field(default=0)

    def card(self, ops: Mapping[str, str | None], *, base: int | None = None,
             worker: str = "w0", tasks: Sequence[str] = (), target: str | None = None,
             **extra: object) -> EvidenceCard:
        version = self.store.head()[0] if base is None else base
        self.cards_made += 1
        diff = Diff(ops, target=target or self.store.artifact_id, base_version=version,
                    author=worker, rationale=f"proposal {self.cards_made}")
        return EvidenceCard(diff=diff, worker=worker, round=0, tasks=tuple(tasks),
                            **extra)  # type: ignore[arg-type]

    def rule(self, text: str, **kw: object) -> EvidenceCard:
        """An AppendRules card, stored the way AppendRules.to_diff stores rules."""
        return self.card({rule_key(text): canonical_rule(text)}, **kw)  # type: ignore[arg-type]

    def commit_directly(self, ops: Mapping[str, str | None]) -> None:
        """Move dev as another process would (no aggregator involved)."""
        self.store.commit(Diff(ops, target=self.store.artifact_id), evidence=None,
                          expected_head=self.ledger.head("dev"))


def make_world(
    needs: Mapping[str, str],
    *,
    strategy: Strategy | None = None,
    files: Mapping[str, str] | None = None,
    config: AggregatorConfig | None = None,
    policy: StalenessPolicy | None = None,
    blast_radius: float = 0.2,
    **verifier_kw: object,
) -> World:
    strategy = strategy if strategy is not None else AppendRules()
    codec = codec_for(strategy)
    if files is None:
        files = {p: t for p, t in codec.to_files(strategy.initial()).items() if t is not None}
    ledger = Ledger.scratch(files, codec.tree)
    store = ArtifactStore(ledger, strategy, codec, blast_radius=blast_radius)
    verifier = RuleVerifier(needs, **verifier_kw)  # type: ignore[arg-type]
    cfg = config or AggregatorConfig()
    agg = Aggregator(store, verifier, None, cfg, policy)
    return World(ledger, store, verifier, agg, strategy)


def world_builder() -> Iterator[Callable[..., World]]:
    """Yields a World factory; closes every ledger it made afterwards (fixture body)."""
    made: list[World] = []

    def build(needs: Mapping[str, str], **kw: object) -> World:
        world = make_world(needs, **kw)  # type: ignore[arg-type]
        made.append(world)
        return world

    yield build
    for world in made:
        world.ledger.close()


@pytest.fixture
def worlds() -> Iterator[Callable[..., World]]:
    yield from world_builder()


NEEDS = {f"t{i}": "cite sources" if i < 3 else "answer in French" for i in range(6)}


def only(reports: Sequence[MergeReport]) -> MergeReport:
    assert len(reports) == 1, [r.reason for r in reports]
    return reports[0]


# ---------------------------------------------------------------- committed / below-threshold


def test_a_fixing_rule_is_committed_with_its_measured_evidence(worlds: Callable[..., World]):
    w = worlds(NEEDS)
    assert isinstance(w.agg, AggregatorProtocol)
    report = only(w.agg.step([w.rule("Always cite sources.", tasks=("t0",))], round=1))
    assert report.category == "committed"
    assert report.version == 1
    assert report.sha == w.ledger.head("dev")
    assert report.reward_before == 0.0
    assert report.reward_after == 0.5
    assert "0.000 -> 0.500" in report.reason
    # the default (betting) policy says in words how strong the evidence was
    assert "needs 20x" in report.reason
    # 2.2x after the screen, 7.4x after a second win each, 20.6x after two third wins:
    # the third test's third pair is never bought
    assert ("after 11 pairs: 2 tests better in 3 of 3 pairs each, 1 test better in 2 of 2 "
            "pairs; none worse") in report.reason
    assert report.extra["policy"] == "betting"
    assert {f.nodeid for f in report.flips} == {"t0", "t1", "t2"}
    assert report.evaluations > 0
    assert report.considered == 1
    version, state = w.agg.head()
    assert version == 1
    assert "Always cite sources." in state.values()
    assert w.agg.head_reward() == 0.5
    log = w.store.log()
    assert len(log) == 2
    assert log[1].startswith("v1 ")
    trailers = dict(w.ledger.history()[-1].trailers)
    assert trailers["Agentdescent-Reward-After"] == "0.5"


def test_a_rule_that_fixes_nothing_is_below_threshold(worlds: Callable[..., World]):
    w = worlds(NEEDS)
    report = only(w.agg.step([w.rule("Be cheerful.")], round=1))
    assert report.category == "below-threshold"
    assert report.reward_before == report.reward_after == 0.0
    assert "0.000 -> 0.000" in report.reason
    assert w.agg.head()[0] == 0


# ---------------------------------------------------------------- refusals before any evaluation


def test_oversized_cards_are_refused_by_the_trust_region(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(trust_region_ops=2, trust_region_chars=50))
    many = w.card({rule_key(f"r{i}"): f"r{i}" for i in range(3)})
    long = w.rule("cite sources " * 10)
    reports = w.agg.step([many, long], round=1)
    assert [r.category for r in reports] == ["oversized", "oversized"]
    assert "3 keys" in reports[0].reason
    assert "trust_region_ops=2" in reports[0].reason
    assert "129 characters" in reports[1].reason
    assert w.verifier.evaluations == 0


def test_invalid_and_frozen_file_edits_are_refused_with_their_category(
    worlds: Callable[..., World],
):
    tree = FileTree(["skills"], frozen=FrozenSet(["skills/locked.md"]))
    files = {"skills/a.md": "hello\n", "skills/locked.md": "keep\n", "README.md": "x\n"}
    w = worlds(NEEDS, strategy=tree, files=files)
    reports = w.agg.step([
        w.card({"README.md": "cite sources\n"}),
        w.card({"skills/locked.md": "cite sources\n"}),
        w.card({"skills/conftest.py": "x = 1\n"}),
    ], round=1)
    assert [r.category for r in reports] == [
        "invalid-proposal", "frozen-violation", "invalid-proposal"]
    assert "README.md" in reports[0].reason
    assert "outside-artifact" in reports[0].reason
    assert "frozen-path" in reports[1].reason
    assert "executable-config" in reports[2].reason
    assert w.agg.head()[0] == 0


def test_keyed_rules_refuse_a_category_they_do_not_have(worlds: Callable[..., World]):
    w = worlds(NEEDS, strategy=KeyedRules(["style", "sources"]))
    report = only(w.agg.step([w.card({"tone": "cite sources"})], round=1))
    assert report.category == "invalid-proposal"
    assert "tone" in report.reason


def test_unknown_artifact_and_section_violation(worlds: Callable[..., World]):
    w = worlds(NEEDS, strategy=KeyedRules(["style", "sources"]))
    elsewhere = w.card({"sources": "cite sources"}, target="other-artifact")
    outside = w.card({"style": "answer in French"}, allowed_keys=frozenset({"sources"}))
    reports = w.agg.step([elsewhere, outside], round=1)
    assert [r.category for r in reports] == ["unknown-artifact", "section-violation"]
    assert "'other-artifact'" in reports[0].reason
    assert "['style']" in reports[1].reason
    assert w.agg.pending == 0
    assert w.verifier.evaluations == 0


def test_every_category_named_here_is_in_the_vocabulary():
    assert set(MERGE_CATEGORIES) >= {
        "committed", "below-threshold", "all-stale", "oversized", "invalid-proposal",
        "frozen-violation", "guard-failed", "cas-conflict", "oracle-rejected",
        "unknown-artifact", "section-violation"}


# ---------------------------------------------------------------- guards


def test_a_candidate_breaking_a_guard_is_refused(worlds: Callable[..., World]):
    w = worlds(NEEDS, guards={"g_polite": "rude"})
    report = only(w.agg.step([w.rule("cite sources, be rude")], round=1))
    assert report.category == "guard-failed"
    assert "g_polite 1.00 -> 0.00" in report.reason
    assert report.reward_after == 0.5  # it did improve the eval tasks
    assert w.agg.head()[0] == 0
    ok = only(w.agg.step([w.rule("cite sources, kindly")], round=2))
    assert ok.category == "committed"


# ---------------------------------------------------------------- compare-and-swap


def test_a_concurrent_commit_during_evaluation_is_a_cas_conflict_and_refiles(
    worlds: Callable[..., World],
):
    holder: dict[str, World] = {}
    fired: list[bool] = []

    def rival_commits(state: Mapping[str, str]) -> None:
        # The first time the candidate is measured, another writer moves dev.
        if not fired and any("cite sources" in v for v in state.values()):
            fired.append(True)
            holder["w"].commit_directly({rule_key("Unrelated note."): "Unrelated note."})

    w = worlds(NEEDS, on_evaluate=rival_commits)
    holder["w"] = w
    card = w.rule("Always cite sources.", tasks=("t0",))
    report = only(w.agg.step([card], round=1))
    assert report.category == "cas-conflict"
    assert "dev moved" in report.reason
    assert "0.000 -> 0.500" in report.reason
    assert w.agg.pending == 1  # re-filed
    assert w.agg.head()[0] == 1  # the rival's version
    again = only(w.agg.flush(round=2))
    assert again.category == "committed"
    assert again.version == 2
    assert "eta=1" in again.reason
    assert "gain holds" in again.reason
    assert w.agg.pending == 0


# ---------------------------------------------------------------- audit


def test_l1_candidate_is_vetoed_by_a_disagreeing_oracle(worlds: Callable[..., World]):
    w = worlds(NEEDS, blast_radius=0.6)
    w.agg.oracle = lambda state: 1.0 / (1 + len(state))  # prefers fewer rules
    report = only(w.agg.step([w.rule("Always cite sources.")], round=1))
    assert report.category == "oracle-rejected"
    assert "oracle scores it 0.500, below the head's 1.000" in report.reason
    assert w.agg.audit.oracle_calls_used == 2
    assert w.agg.audit.vetoes == 1
    # the base's oracle score is cached per head
    only(w.agg.step([w.rule("Answer in French please: answer in French.")], round=2))
    assert w.agg.audit.oracle_calls_used == 3


def test_l1_audit_without_oracle_is_a_full_evaluation_within_budget(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS, blast_radius=0.6, config=AggregatorConfig(oracle_budget=1))
    first = only(w.agg.step([w.rule("Always cite sources.")], round=1))
    assert first.category == "committed"
    assert "full evaluation" in first.reason
    second = only(w.agg.step([w.rule("answer in French")], round=2))
    assert second.category == "committed"
    assert "budget is spent (1/1)" in second.reason
    assert w.agg.audit.audits == 1


def test_trust_is_measured_on_every_merge_and_low_trust_forces_an_audit(
    worlds: Callable[..., World],
):
    w = worlds(NEEDS)  # L2: no audit while trust holds
    w.agg.oracle = lambda state: 0.0
    boast = w.rule("Be cheerful.", before=0.0, after=1.0)  # self-verify claims a gain
    report = only(w.agg.step([boast], round=1))
    assert report.category == "below-threshold"
    assert w.agg.audit.measured == 1
    assert w.agg.audit.trust == 0.0
    assert "trust 0.00" in report.reason
    honest = only(w.agg.step([w.rule("cite sources", before=0.0, after=1.0)], round=2))
    assert honest.category == "committed"
    assert "trust 0.00 (0/1) is below the floor 0.80" in honest.reason
    assert w.agg.audit.audits == 1
    assert w.agg.audit.trust == 0.5


def test_audit_scheduler_ranks_by_radius_uncertainty_and_trust():
    audit = AuditScheduler(oracle_budget=3, collect=True)
    assert audit.submit("small", 0.1, 0.5) < audit.submit("big", 0.9, 0.5)
    assert audit.queue[0][2] == "big"
    audit.record(True, False)
    assert audit.trust == 0.0
    assert audit.gate(0.1).audit
    audit.spend(3)
    assert not audit.gate(0.1).audit
    assert "spent" in audit.gate(0.1).reason


# ---------------------------------------------------------------- buckets


def test_bucket_fires_at_batch_size_or_after_t_max_rounds(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(batch_size=3, t_max=2))
    assert w.agg.step([w.rule("cite sources")], round=1) == []
    assert w.agg.step([], round=2) == []
    report = only(w.agg.step([], round=3))
    assert report.category == "committed"
    cards = [w.rule(t) for t in ("a rule", "b rule", "answer in French")]
    report = only(w.agg.step(cards, round=4))
    assert report.considered == 3
    assert report.category == "committed"


def test_flush_fires_whatever_waits_and_config_is_checked(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(batch_size=5, t_max=9))
    w.agg.step([w.rule("cite sources")], round=1)
    assert only(w.agg.flush(round=1)).category == "committed"
    assert w.agg.flush(round=1) == []
    with pytest.raises(ValueError, match="batch_size"):
        AggregatorConfig(batch_size=0)
    with pytest.raises(ValueError, match="acceptance"):
        AggregatorConfig(acceptance="median")


# ---------------------------------------------------------------- robustness


def test_a_candidate_that_changes_nothing_costs_no_evaluation(worlds: Callable[..., World]):
    w = worlds(NEEDS)
    w.agg.step([w.rule("cite sources")], round=1)
    before = w.verifier.evaluations
    report = only(w.agg.step([w.rule("cite sources")], round=2))
    assert report.category == "below-threshold"
    assert "changes nothing on v1" in report.reason
    assert w.verifier.evaluations == before


def test_a_failing_evaluation_hands_the_cards_back_to_the_caller(
    worlds: Callable[..., World],
):
    failures = [True]

    def flaky_backend(state: Mapping[str, str]) -> None:
        if failures:
            failures.pop()
            raise BackendError("the agent backend is down; retry later")

    w = worlds(NEEDS, on_evaluate=flaky_backend)
    card = w.rule("cite sources")
    with pytest.raises(BackendError):
        w.agg.step([card], round=1)
    assert w.agg.pending == 0  # not kept twice: the caller retries with its cards
    assert w.agg.head()[0] == 0
    assert only(w.agg.step([card], round=1)).category == "committed"


def test_cas_conflict_refiles_only_the_cards_that_were_going_to_commit(
    worlds: Callable[..., World],
):
    holder: dict[str, World] = {}

    def rival_commits(state: Mapping[str, str]) -> None:
        if any("cite sources" in v for v in state.values()) and holder["w"].agg.head()[0] == 0:
            holder["w"].commit_directly({rule_key("Unrelated note."): "Unrelated note."})

    w = worlds(NEEDS, on_evaluate=rival_commits, config=AggregatorConfig(batch_size=3))
    holder["w"] = w
    cards = [w.rule("cite sources"), w.rule("x" * 70_000), w.rule("cite sources")]
    reports = w.agg.step(cards, round=1)
    assert [r.category for r in reports] == ["oversized", "cas-conflict"]
    assert w.agg.pending == 2  # the two duplicate cards, not the refused one


def test_acceptance_policy_is_selectable(worlds: Callable[..., World]):
    w = worlds(NEEDS, config=AggregatorConfig(acceptance="beta"))
    report = only(w.agg.step([w.rule("cite sources")], round=1))
    assert report.category == "committed"
    assert report.extra["policy"] == "beta"
    assert "1-delta" in report.reason


def test_commits_land_in_a_user_repository_without_touching_the_checkout(user_repo: Any):
    tree = FileTree(["skills"])
    ledger = Ledger(user_repo.path, tree)
    try:
        ledger.ensure_branches()
        before = user_repo.snapshot()
        store = ArtifactStore(ledger, tree, codec_for(tree), artifact_id="skills")
        verifier = RuleVerifier({"greets": "Say hello in French"})
        agg = Aggregator(store, verifier, None, AggregatorConfig())
        _v, _sha, state = store.head()
        text = state["skills/greet/SKILL.md"].replace("Say hello.", "Say hello in French.")
        diff = Diff({"skills/greet/SKILL.md": text}, target="skills", base_version=0)
        report = only(agg.step([EvidenceCard(diff=diff, worker="w0", round=1)], round=1))
        assert report.category == "committed"
        assert user_repo.snapshot() == before
        changed = user_repo.git("diff", "--name-only", "HEAD", "agentdescent/dev")
        assert changed.strip() == "skills/greet/SKILL.md"
        assert agg.finish(clean=True) is not None
        assert ledger.head("stable") == ledger.head("dev")
    finally:
        ledger.close()


# ---------------------------------------------------------------- disqualification


class TamperAwareVerifier(RuleVerifier):
    """Like the sandboxed verifier: a state whose run touched a frozen file is ruled out."""

    def disqualification(self, state: Mapping[str, str]) -> RefusalError | None:
        if any("TAMPER" in text for text in state.values()):
            return RefusalError("frozen-violation", "frozen-modified",
                                "the run modified tests/test_x.py (frozen)", "tests/test_x.py")
        return None


def test_a_disqualified_candidate_is_reported_with_the_refusal_category():
    ledger = Ledger.scratch({"artifact/rules.txt": "base\n"},
                            FileTree(["artifact"]))
    try:
        strategy = FileTree(["artifact"])
        store = ArtifactStore(ledger, strategy, codec_for(strategy))
        verifier = TamperAwareVerifier({"t0": "cite sources", "t1": "cite sources"})
        assert isinstance(verifier, Disqualifying)
        agg = Aggregator(store, verifier, None, AggregatorConfig(), None)
        # The candidate would win on its scores; the disqualification still rules it out.
        card = EvidenceCard(
            diff=Diff({"artifact/rules.txt": "cite sources TAMPER\n"}, target="artifact"),
            worker="w0", round=0, tasks=("t0",),
        )
        report = only(agg.step([card], round=1))
        assert report.category == "frozen-violation"
        assert "tests/test_x.py" in report.reason
        assert ledger.head("dev") == ledger.head("stable")  # nothing committed
        clean = EvidenceCard(
            diff=Diff({"artifact/rules.txt": "cite sources\n"}, target="artifact"),
            worker="w0", round=0, tasks=("t0",),
        )
        assert only(agg.step([clean], round=2)).category == "committed"
    finally:
        ledger.close()
