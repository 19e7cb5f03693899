"""The greeter's behaviour, as a team would test it: each marked test is a task."""

from __future__ import annotations

import pytest
from agent import SKILL, greet


@pytest.mark.evolve
def test_says_hello() -> None:
    assert greet("say hello to Ada", "Ada") == "Hello, Ada!"


@pytest.mark.evolve
def test_says_goodbye() -> None:
    assert greet("say goodbye to Ada", "Ada") == "Goodbye, Ada."


@pytest.mark.evolve(weight=2.0)
def test_formal_greeting() -> None:
    assert greet("a formal greeting for Dr. Lovelace", "Dr. Lovelace") == (
        "Good day, Dr. Lovelace."
    )


@pytest.mark.evolve_guard
def test_skill_has_frontmatter() -> None:
    text = SKILL.read_text(encoding="utf-8")
    assert text.startswith("---\nname: greeter\n")
