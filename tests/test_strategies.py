from __future__ import annotations

import pytest

from agentdescent_core.artifacts import (
    AppendRules,
    Diff,
    KeyedRules,
    SingleSlot,
    Strategy,
    apply_ops,
    rule_key,
)
from agentdescent_core.artifacts.strategies import SLOT_KEY, canonical_rule
from agentdescent_core.errors import RefusalError


@pytest.mark.parametrize(
    "strategy", [SingleSlot("x"), AppendRules(), KeyedRules(["route", "fmt"])]
)
def test_every_strategy_satisfies_the_protocol(strategy):
    assert isinstance(strategy, Strategy)


def test_an_object_without_to_diff_is_not_a_strategy():
    class Half:
        def initial(self) -> dict[str, str]:
            return {}

        def render(self, state: object) -> str:
            return ""

    assert not isinstance(Half(), Strategy)


# ---------------------------------------------------------------- SingleSlot


def test_single_slot_initial_and_render():
    slot = SingleSlot(initial_value="You are helpful.")
    state = slot.initial()
    assert state == {SLOT_KEY: "You are helpful."}
    assert slot.render(state) == "You are helpful."
    assert slot.render({}) == ""


def test_single_slot_replaces_value():
    slot = SingleSlot("old")
    diff = slot.to_diff(slot.initial(), "new", author="w1", base_version=3, target="prompt")
    assert isinstance(diff, Diff)
    assert dict(diff.ops) == {SLOT_KEY: "new"}
    assert (diff.author, diff.base_version, diff.target) == ("w1", 3, "prompt")
    assert slot.render(diff.apply(slot.initial())) == "new"


def test_single_slot_identical_value_is_none():
    slot = SingleSlot("same")
    assert slot.to_diff(slot.initial(), "same", "w", 0, "prompt") is None
    # whitespace is content for a prompt: a changed newline is a change
    assert slot.to_diff(slot.initial(), "same\n", "w", 0, "prompt") is not None


@pytest.mark.parametrize(
    ("proposal", "code"), [(None, "not-text"), (3, "not-text"), ("", "empty-proposal"),
                           ("  \n", "empty-proposal")]
)
def test_single_slot_refusals(proposal, code):
    with pytest.raises(RefusalError) as info:
        SingleSlot("x").to_diff({SLOT_KEY: "x"}, proposal, "w", 0, "prompt")
    assert (info.value.category, info.value.code) == ("invalid-proposal", code)


def test_single_slot_every_proposal_collides():
    slot = SingleSlot("x")
    one = slot.to_diff(slot.initial(), "a", "w1", 0, "p")
    two = slot.to_diff(slot.initial(), "b", "w2", 0, "p")
    assert one is not None
    assert two is not None
    assert one.keys == two.keys


def test_single_slot_initial_must_be_text():
    with pytest.raises(TypeError, match="initial_value"):
        SingleSlot(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- AppendRules


def test_rule_key_is_content_addressed_and_whitespace_blind():
    assert rule_key("Always cite sources.") == rule_key("  Always \t cite sources. ")
    assert rule_key("Always cite sources.") != rule_key("Always cite\nsources.")
    assert rule_key("Always cite sources.") != rule_key("always cite sources.")
    assert rule_key("x").startswith("rule-")
    assert len(rule_key("x")) == len("rule-") + 16


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("  Check units.  ", "Check units."),
        ("Check\t  units.", "Check units."),
        ("Line one.  \n   Line two.", "Line one.\nLine two."),
        ("A.\n\n\n\nB.", "A.\n\nB."),
        ("A.\r\nB.", "A.\nB."),
    ],
)
def test_canonical_rule(raw, canonical):
    assert canonical_rule(raw) == canonical
    assert rule_key(raw) == rule_key(canonical)


def test_append_rules_key_is_the_hash_of_the_stored_value():
    diff = AppendRules().to_diff({}, ["  One\n\n\ntwo  ", "Three   four"], "w", 0, "rules")
    assert diff is not None
    for key, value in diff.ops.items():
        assert value is not None
        assert key == rule_key(value)
        assert value == canonical_rule(value)


def test_append_rules_adds_rule_under_its_key():
    rules = AppendRules()
    diff = rules.to_diff(rules.initial(), "  Check units.  ", "w1", 2, "rules")
    assert diff is not None
    assert dict(diff.ops) == {rule_key("Check units."): "Check units."}


@pytest.mark.parametrize(
    "proposal", ["Check units.", "Check   units.", ["Check units.", " Check units. "]]
)
def test_append_rules_dedupes_identical_rules(proposal):
    state = AppendRules(["Check units."]).initial()
    assert AppendRules().to_diff(state, proposal, "w", 0, "rules") is None


def test_append_rules_dedupes_within_one_proposal():
    diff = AppendRules().to_diff({}, ["A.", "B.", "A."], "w", 0, "rules")
    assert diff is not None
    assert sorted(v or "" for v in diff.ops.values()) == ["A.", "B."]


def test_two_workers_with_same_lesson_produce_the_same_diff_id():
    rules = AppendRules()
    one = rules.to_diff({}, "Prefer JSON output.", "w1", 0, "rules")
    two = rules.to_diff({}, "Prefer  JSON output.\n", "w2", 4, "rules")
    three = rules.to_diff({}, "Be brief.", "w3", 0, "rules")
    assert one is not None
    assert two is not None
    assert three is not None
    assert one.diff_id == two.diff_id
    assert one.keys.isdisjoint(three.keys)


def test_append_rules_only_appends_new_rules():
    state = AppendRules(["Old."]).initial()
    diff = AppendRules().to_diff(state, ["Old.", "New."], "w", 0, "rules")
    assert diff is not None
    assert list(diff.ops.values()) == ["New."]
    assert None not in diff.ops.values()


def test_append_rules_render_is_deterministic_and_multiline_safe():
    rules = AppendRules()
    state = apply_ops({}, {rule_key("A rule."): "A rule.", rule_key("Two\nlines"): "Two\nlines"})
    reversed_state = dict(reversed(list(state.items())))
    text = rules.render(state)
    assert text == rules.render(reversed_state)
    ordered = sorted(state)
    first, second = (state[k] for k in ordered)
    assert text.startswith(f"1. {first.splitlines()[0]}")
    assert "   lines" in text
    assert f"2. {second.splitlines()[0]}" in text
    assert rules.render({}) == ""


@pytest.mark.parametrize(
    ("proposal", "code"),
    [(None, "not-text"), ({"a": "b"}, "not-text"), ([1], "not-text"), ("   ", "empty-proposal"),
     (["ok", ""], "empty-proposal")],
)
def test_append_rules_refusals(proposal, code):
    with pytest.raises(RefusalError) as info:
        AppendRules().to_diff({}, proposal, "w", 0, "rules")
    assert info.value.code == code


def test_append_rules_bad_initial():
    with pytest.raises(ValueError, match="non-empty"):
        AppendRules(["ok", " "])


# ---------------------------------------------------------------- KeyedRules


def test_keyed_rules_sets_categories():
    keyed = KeyedRules(["route", "fmt"], initial={"fmt": "Use JSON."})
    diff = keyed.to_diff(keyed.initial(), {"fmt": "Use YAML.", "route": "Send math to calc."},
                         "w1", 1, "policy")
    assert diff is not None
    assert list(diff.ops.items()) == [("route", "Send math to calc."), ("fmt", "Use YAML.")]
    assert diff.target == "policy"


def test_keyed_rules_same_category_collides_different_fuse():
    keyed = KeyedRules(["route", "fmt"])
    one = keyed.to_diff({}, {"route": "A"}, "w1", 0, "p")
    two = keyed.to_diff({}, {"route": "B"}, "w2", 0, "p")
    three = keyed.to_diff({}, {"fmt": "C"}, "w3", 0, "p")
    assert one is not None
    assert two is not None
    assert three is not None
    assert one.keys == two.keys
    assert one.keys.isdisjoint(three.keys)


@pytest.mark.parametrize(
    "proposal",
    [{}, {"fmt": "Use JSON."}, {"route": None}, {"fmt": "Use JSON.", "route": None}],
)
def test_keyed_rules_none_when_nothing_changes(proposal):
    keyed = KeyedRules(["route", "fmt"], initial={"fmt": "Use JSON."})
    assert keyed.to_diff(keyed.initial(), proposal, "w", 0, "p") is None


def test_keyed_rules_none_clears_a_category():
    keyed = KeyedRules(["route", "fmt"], initial={"fmt": "Use JSON."})
    diff = keyed.to_diff(keyed.initial(), {"fmt": None}, "w", 0, "p")
    assert diff is not None
    assert diff.apply(keyed.initial()) == {}


@pytest.mark.parametrize("category", ["tone", "ROUTE", "", 3])
def test_keyed_rules_unknown_category_refused(category):
    with pytest.raises(RefusalError) as info:
        KeyedRules(["route", "fmt"]).to_diff({}, {category: "x"}, "w", 0, "p")
    assert (info.value.category, info.value.code) == ("invalid-proposal", "unknown-category")
    assert "'route'" in info.value.message


@pytest.mark.parametrize(
    ("proposal", "code"),
    [("text", "not-a-mapping"), (["route"], "not-a-mapping"), ({"route": 5}, "not-text"),
     ({"route": "  "}, "empty-proposal")],
)
def test_keyed_rules_other_refusals(proposal, code):
    with pytest.raises(RefusalError) as info:
        KeyedRules(["route"]).to_diff({}, proposal, "w", 0, "p")
    assert info.value.code == code


def test_keyed_rules_render_in_declared_order():
    keyed = KeyedRules(["route", "fmt"])
    state = {"fmt": "F", "stray": "S", "route": "R"}
    assert keyed.render(state) == "## route\nR\n\n## fmt\nF\n\n## stray\nS"
    assert keyed.render({"fmt": "F"}) == "## fmt\nF"


@pytest.mark.parametrize(
    ("categories", "error"),
    [([], ValueError), (["a", "a"], ValueError), ([""], ValueError), ([" a"], ValueError),
     ("route", TypeError)],
)
def test_keyed_rules_bad_categories(categories, error):
    with pytest.raises(error):
        KeyedRules(categories)


def test_keyed_rules_bad_initial_category():
    with pytest.raises(RefusalError, match="not one of"):
        KeyedRules(["a"], initial={"b": "x"})
