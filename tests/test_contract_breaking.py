"""Contract-breaking cards: the strategies' ``breaks_contract`` hook and what the policies do.

A diff that removes what other versions may rely on (a KeyedRules category
cleared, a FileTree file removed or renamed) is marked contract-breaking by the
aggregator, which then gives it a staleness tolerance of 0: Guarded discards it
as soon as it is stale, Reflective discards it instead of rebasing, Full keeps
it.  The aggregator-level tests run on real scratch ledgers (``test_aggregator``'s
worlds); the last ones run ``evolve()`` end to end with a lagging worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from test_aggregator import NEEDS, POISON, World, only, world_builder

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts import AppendRules, Diff, FileTree, KeyedRules, SingleSlot
from agentdescent_core.artifacts.strategies import contract_breaking
from agentdescent_core.errors import ContractError
from agentdescent_core.evidence import EvidenceCard
from agentdescent_core.loop import EvolutionResult, ProposalSite, evolve
from agentdescent_core.staleness import Full, Guarded, Reflective, StalenessPolicy
from agentdescent_core.tasks import Task

GOOD = "cite sources\nanswer in French\n"
SKILL_FILES = {"skills/main.md": GOOD, "skills/legacy.md": f"{POISON}\n"}


@pytest.fixture
def worlds() -> Iterator[Callable[..., World]]:
    yield from world_builder()


# ---------------------------------------------------------------- the hook of each strategy


def test_keyed_rules_clearing_a_category_breaks_the_contract_rewriting_does_not() -> None:
    rules = KeyedRules(["route", "fmt"])
    state = {"route": "send billing to finance", "fmt": "answer in JSON"}
    cleared = rules.to_diff(state, {"fmt": None}, "w0", 0)
    rewritten = rules.to_diff(state, {"fmt": "answer in YAML"}, "w0", 0)
    added = rules.to_diff({"route": "x"}, {"fmt": "answer in JSON"}, "w0", 0)
    assert cleared is not None
    assert rewritten is not None
    assert added is not None
    assert rules.breaks_contract(state, cleared) is True
    assert rules.breaks_contract(state, rewritten) is False
    assert rules.breaks_contract({"route": "x"}, added) is False


def test_file_tree_removing_or_renaming_a_file_breaks_the_contract() -> None:
    tree = FileTree(["skills"])
    state = dict(SKILL_FILES)
    removed = tree.to_diff(state, {"skills/legacy.md": None}, "w0", 0)
    renamed = tree.to_diff(
        state, {"skills/legacy.md": None, "skills/old.md": SKILL_FILES["skills/legacy.md"]},
        "w0", 0,
    )
    edited = tree.to_diff(state, {"skills/main.md": GOOD + "be brief\n"}, "w0", 0)
    created = tree.to_diff(state, {"skills/new.md": "new skill\n"}, "w0", 0)
    assert removed is not None
    assert renamed is not None
    assert edited is not None
    assert created is not None
    assert tree.breaks_contract(state, removed) is True
    assert tree.breaks_contract(state, renamed) is True
    assert tree.breaks_contract(state, edited) is False
    assert tree.breaks_contract(state, created) is False


def test_single_slot_and_append_rules_never_break_a_contract() -> None:
    slot = SingleSlot("be terse")
    replaced = slot.to_diff(slot.initial(), "be verbose", "w0", 0)
    rules = AppendRules(["cite sources"])
    appended = rules.to_diff(rules.initial(), ["answer in French"], "w0", 0)
    assert replaced is not None
    assert appended is not None
    assert contract_breaking(slot, slot.initial(), replaced) is False
    assert contract_breaking(rules, rules.initial(), appended) is False


class Bare:
    """A strategy without the optional hook: it never breaks a contract."""

    def initial(self) -> dict[str, str]:
        return {}

    def render(self, state: Mapping[str, str]) -> str:
        return ""

    def to_diff(self, state: Mapping[str, str], proposal: Any, author: str,
                base_version: int, target: str = "artifact") -> Diff | None:
        return None


class Vague(Bare):
    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> object:
        return "maybe"


def test_a_strategy_without_the_hook_never_breaks_and_a_vague_answer_is_an_error() -> None:
    deletion = Diff({"k": None})
    assert contract_breaking(Bare(), {"k": "v"}, deletion) is False
    with pytest.raises(ContractError, match=r"Vague\.breaks_contract.*'maybe'.*True or False"):
        contract_breaking(Vague(), {"k": "v"}, deletion)


# ---------------------------------------------------------------- in the aggregator


def file_world(worlds: Callable[..., World], policy: StalenessPolicy,
               strategy: FileTree | None = None) -> World:
    return worlds(NEEDS, policy=policy, strategy=strategy or FileTree(["skills"]),
                  files=SKILL_FILES)


def advance(w: World, n: int) -> None:
    """Move dev ``n`` versions on, touching a file no card below touches."""
    for i in range(n):
        w.commit_directly({"skills/notes.md": f"note {i}\n"})


def proposed(w: World, ops: Mapping[str, str | None], base: int) -> EvidenceCard:
    """A card as a worker files it: the strategy's own diff against version ``base``."""
    diff = w.strategy.to_diff(w.store.state_at(base), ops, "w0", base, w.store.artifact_id)
    assert diff is not None
    return EvidenceCard(diff=diff, worker="w0", round=1, tasks=("t0", "t3"))


REMOVE_LEGACY: dict[str, str | None] = {"skills/legacy.md": None}
RETIRE_LEGACY: dict[str, str | None] = {"skills/legacy.md": "retired\n"}


def test_guarded_gives_a_stale_file_removal_alpha_zero(worlds: Callable[..., World]):
    w = file_world(worlds, Guarded())
    advance(w, 1)
    report = only(w.agg.step([proposed(w, REMOVE_LEGACY, base=0)], round=1))
    assert report.category == "all-stale"
    assert report.discarded_stale == 1
    assert "eta=1, alpha=0, contract-breaking" in report.reason
    assert w.verifier.evaluations == 0  # discarded before any re-verification
    assert "skills/legacy.md" in w.agg.head()[1]


def test_guarded_rebases_the_same_stale_card_when_it_only_edits(worlds: Callable[..., World]):
    w = file_world(worlds, Guarded())
    advance(w, 1)
    report = only(w.agg.step([proposed(w, RETIRE_LEGACY, base=0)], round=1))
    assert report.category == "committed", report.reason
    assert "eta=1, alpha=1)" in report.reason
    assert "rebased, gain holds" in report.reason
    head = w.agg.head()[1]
    assert head["skills/legacy.md"] == "retired\n"
    assert head["skills/notes.md"] == "note 0\n"


def test_a_fresh_removal_is_judged_like_any_fresh_card(worlds: Callable[..., World]):
    w = file_world(worlds, Guarded())
    report = only(w.agg.step([proposed(w, REMOVE_LEGACY, base=0)], round=1))
    assert report.category == "committed", report.reason
    assert "skills/legacy.md" not in w.agg.head()[1]


def test_reflective_discards_a_stale_removal_instead_of_rebasing(
    worlds: Callable[..., World],
):
    w = file_world(worlds, Reflective())
    advance(w, 3)
    report = only(w.agg.step([proposed(w, REMOVE_LEGACY, base=0)], round=1))
    assert report.category == "all-stale"
    assert "eta=3, alpha=0, contract-breaking) discarded as stale" in report.reason
    assert "rebased" not in report.reason
    assert w.verifier.evaluations == 0


def test_reflective_rebases_a_stale_edit_whatever_the_lag(worlds: Callable[..., World]):
    w = file_world(worlds, Reflective())
    advance(w, 3)
    report = only(w.agg.step([proposed(w, RETIRE_LEGACY, base=0)], round=1))
    assert report.category == "committed", report.reason
    assert "eta=3, alpha=1) rebased, gain holds" in report.reason


def test_full_keeps_a_stale_removal(worlds: Callable[..., World]):
    w = file_world(worlds, Full())
    advance(w, 2)
    report = only(w.agg.step([proposed(w, REMOVE_LEGACY, base=0)], round=1))
    assert report.category == "committed", report.reason
    head = w.agg.head()[1]
    assert "skills/legacy.md" not in head
    assert head["skills/notes.md"] == "note 1\n"


def test_keyed_rules_cleared_category_is_discarded_when_stale(worlds: Callable[..., World]):
    rules = KeyedRules(["main", "legacy", "notes"],
                       initial={"main": GOOD, "legacy": POISON})
    w = worlds(NEEDS, policy=Guarded(), strategy=rules)
    w.commit_directly({"notes": "note 0"})
    report = only(w.agg.step([proposed(w, {"legacy": None}, base=0)], round=1))
    assert report.category == "all-stale"
    assert "alpha=0, contract-breaking" in report.reason
    report = only(w.agg.step([proposed(w, {"legacy": "retired"}, base=0)], round=2))
    assert report.category == "committed", report.reason
    assert w.agg.head()[1]["legacy"] == "retired"


class GuardedFiles(FileTree):
    """A FileTree that knows which files its guard tests read: only removing those breaks."""

    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> bool:
        return any(diff.ops.get(path, "") is None for path in ("skills/main.md",))


def test_a_strategy_can_narrow_what_breaks_its_contract(worlds: Callable[..., World]):
    w = file_world(worlds, Guarded(), strategy=GuardedFiles(["skills"]))
    advance(w, 1)
    report = only(w.agg.step([proposed(w, REMOVE_LEGACY, base=0)], round=1))
    assert report.category == "committed", report.reason
    assert "contract-breaking" not in report.reason


def test_a_card_marked_by_its_filer_stays_marked(worlds: Callable[..., World]):
    w = file_world(worlds, Guarded())
    advance(w, 1)
    card = proposed(w, RETIRE_LEGACY, base=0)
    marked = EvidenceCard(diff=card.diff, worker="w0", round=1, tasks=card.tasks,
                          contract_breaking=True)
    report = only(w.agg.step([marked], round=1))
    assert report.category == "all-stale"
    assert "alpha=0, contract-breaking" in report.reason


# ---------------------------------------------------------------- evolve() end to end

# Half the tasks need the "fmt" category; the other half fail while the legacy
# category tells the agent to answer in Roman numerals.  Round 1 learns "fmt"
# (v1).  With refresh_interval=2 the only worker still reads v0 in round 2, and
# proposes to deal with the legacy category from there: stale by one version.
LEGACY = "Answer in Roman numerals."
TASKS = [Task(f"{kind}-{i}", f"{kind} question {i}", {"kind": kind})
         for i in range(8) for kind in ("fmt", "plain")]


def run(rendered: str, task: Task) -> str:
    if task.meta["kind"] == "fmt":
        return "ok" if "Use FMT." in rendered else "no"
    return "no" if LEGACY in rendered else "ok"


def reward(task: Task, output: str) -> float:
    return 1.0 if output == "ok" else 0.0


def evolve_lagging(policy: str, legacy_edit: str | None) -> EvolutionResult:
    def propose(rendered: str, task: Task, output: str, score: float, *,
                site: ProposalSite) -> dict[str, str | None] | None:
        if site.round == 1:
            return {"fmt": "Use FMT."}
        assert site.version == 0, "the round-2 proposal must be stale"
        return {"legacy": legacy_edit} if task.meta["kind"] == "plain" else None

    propose.wants_site = True  # type: ignore[attr-defined]
    result = evolve(
        TASKS, reward, run=run, propose=propose,
        strategy=KeyedRules(["fmt", "legacy"], initial={"legacy": LEGACY}),
        staleness_policy=policy, refresh_interval=2, rounds=2, n_workers=1,
        held_out_frac=0.5, agg_config=AggregatorConfig(repeats=1, baseline_repeats=3),
    )
    assert result.error is None, result.error
    assert result.history[0].merged == 1, result.history[0].messages
    return result


@pytest.mark.parametrize("policy", ["guarded", "reflective"])
def test_evolve_discards_a_stale_cleared_category(policy: str) -> None:
    result = evolve_lagging(policy, legacy_edit=None)
    second = result.history[1]
    assert second.reasons == {"all-stale": 1}
    assert second.discarded_stale == 1
    assert "eta=1, alpha=0, contract-breaking" in second.messages[0]
    assert result.state["legacy"] == LEGACY
    assert result.version == 1


@pytest.mark.parametrize("policy", ["guarded", "reflective"])
def test_evolve_rebases_a_stale_rewrite_of_the_same_category(policy: str) -> None:
    result = evolve_lagging(policy, legacy_edit="Answer in digits.")
    second = result.history[1]
    assert second.reasons == {"committed": 1}, second.messages
    assert "eta=1, alpha=1) rebased, gain holds" in second.messages[0]
    assert result.state == {"fmt": "Use FMT.", "legacy": "Answer in digits."}
    assert result.final_reward == 1.0


def test_evolve_under_full_keeps_a_stale_cleared_category() -> None:
    result = evolve_lagging("full", legacy_edit=None)
    assert result.history[1].reasons == {"committed": 1}, result.history[1].messages
    assert result.state == {"fmt": "Use FMT."}
    assert result.final_reward == 1.0
