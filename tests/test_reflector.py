"""The reflector prompt: what it shows, in which order, within which budget, from which template."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdescent_core.proposers.reflector import (
    PLACEHOLDERS,
    FailureInfo,
    PromptInputs,
    RejectedProposal,
    build_prompt,
    load_templates,
    order_files,
)

FILES = {
    "skills/support/SKILL.md": "---\nname: support\n---\nAnswer politely.\n",
    "skills/support/refunds.md": "Refunds take 30 days.\n",
    "skills/support/tone.txt": "warm\n",
    "skills/support/scripts/lookup.py": "def lookup(order):\n    return order\n",
    "skills/billing/README.md": "# Billing\n",
}

FAILURE = FailureInfo(
    nodeid="tests/test_bot.py::test_tone",
    message="AssertionError: tone.txt says 'warm' but the answer was cold\nassert 'warm' in 'cold'",
    output="captured stdout: asked about tone",
    source="def test_tone(agent):\n    assert 'warm' in agent.ask('hi')\n",
)


def inputs(**changes: object) -> PromptInputs:
    base: dict[str, object] = {"files": FILES, "roots": ("skills",), "failures": [FAILURE]}
    base.update(changes)
    return PromptInputs(**base)  # type: ignore[arg-type]


def test_the_prompt_carries_the_failure_the_protocol_and_the_rules() -> None:
    system, user = build_prompt(inputs(frozen="tests and skills/*/LICENSE"))
    assert "assert 'warm' in 'cold'" in user
    assert "captured stdout: asked about tone" in user
    assert "def test_tone(agent):" in user
    assert "tests/test_bot.py::test_tone" in user
    assert "Editable artifact roots: skills" in user
    assert "Frozen (edits refused): tests and skills/*/LICENSE" in user
    assert '"search"' in system
    assert '"delete": true' in system
    assert "general rules" in system.lower()
    assert "never copy a test's" in system.lower()


def test_files_named_by_a_failure_come_first_then_skill_md_then_markdown() -> None:
    shown, listed = order_files(FILES, [FAILURE])
    assert shown == ["skills/support/tone.txt", "skills/support/SKILL.md",
                     "skills/billing/README.md", "skills/support/refunds.md"]
    assert listed == ["skills/support/scripts/lookup.py"]
    _system, user = build_prompt(inputs())
    assert user.index("### skills/support/tone.txt") < user.index("### skills/support/SKILL.md")
    assert "### skills/support/scripts/lookup.py" not in user
    size = len(FILES["skills/support/scripts/lookup.py"].encode())
    assert f"- skills/support/scripts/lookup.py ({size} bytes)" in user


def test_the_budget_moves_files_that_do_not_fit_into_the_listing() -> None:
    big = "x" * 5_000
    files = {**FILES, "skills/support/SKILL.md": big}
    system, user = build_prompt(inputs(files=files, budget=5_000))
    assert big not in user
    assert "- skills/support/SKILL.md (5000 bytes) — not shown: too long" in user
    assert "Refunds take 30 days." in user  # the smaller files still fit
    _roomy_system, roomy = build_prompt(inputs(files=files, budget=60_000))
    assert big in roomy
    assert len(system) + len(user) <= 5_000 + 200


def test_rejected_proposals_are_shown_with_their_reasons() -> None:
    rejected = [RejectedProposal("edited skills/support/SKILL.md:\n  +Always say warm",
                                 "below-threshold: P(improvement) 0.41 < 0.95")]
    _system, user = build_prompt(inputs(rejected=rejected))
    assert "+Always say warm" in user
    assert "rejected because: below-threshold: P(improvement) 0.41 < 0.95" in user
    _system, none = build_prompt(inputs())
    assert "(none yet)" in none


def test_long_messages_and_outputs_are_clipped() -> None:
    failure = FailureInfo("t::x", message="m" * 10_000, output="o" * 10_000, source="s")
    _system, user = build_prompt(inputs(failures=[failure]))
    assert "m" * 2_000 in user
    assert "m" * 2_001 not in user
    assert "more characters cut" in user


def test_a_file_template_replaces_the_user_template(tmp_path: Path) -> None:
    template = tmp_path / "prompt.txt"
    template.write_text("FAILS:\n${failures}\nFILES:\n${files}\nLIST:\n${listing}\n$$5 budget\n")
    templates = load_templates(template)
    system, user = build_prompt(inputs(), templates)
    assert user.startswith("FAILS:\n### tests/test_bot.py::test_tone")
    assert "$5 budget" in user
    assert system == load_templates().system  # the packaged system template stays


def test_a_folder_template_may_replace_the_system_template(tmp_path: Path) -> None:
    (tmp_path / "system.txt").write_text("You edit skills under ${roots}.")
    system, user = build_prompt(inputs(), load_templates(tmp_path))
    assert system == "You edit skills under skills."
    assert "## Failing tests" in user


@pytest.mark.parametrize(("text", "expected"), [
    ("${failures} ${nodeids}", r"unknown placeholder\(s\) \$\{nodeids\}"),
    ("cost: $ 5", "stray '\\$'"),
])
def test_a_bad_template_is_an_error_that_says_what_is_available(
        tmp_path: Path, text: str, expected: str) -> None:
    template = tmp_path / "bad.txt"
    template.write_text(text)
    with pytest.raises(ValueError, match=expected) as info:
        load_templates(template)
    assert str(template) in str(info.value)
    if "unknown" in expected:
        assert all(f"${{{name}}}" in str(info.value) for name in PLACEHOLDERS)


def test_a_missing_template_or_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_templates(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match=r"neither system\.txt nor user\.txt"):
        load_templates(tmp_path)


def test_the_packaged_templates_use_only_known_placeholders() -> None:
    templates = load_templates()
    templates.check()
    assert "${failures}" in templates.user
    assert "${rejected}" in templates.user
