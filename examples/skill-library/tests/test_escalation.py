"""Escalation: when and how a human takes over, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "escalation"


@pytest.mark.evolve
def test_human_agent() -> None:
    reply = answer(SKILL, "Can I talk to a human?")
    assert "A human agent will reply within one working day." in reply


@pytest.mark.evolve
def test_complaint() -> None:
    reply = answer(SKILL, "I want to file a formal complaint")
    assert "Formal complaints are answered within 14 days." in reply


@pytest.mark.evolve
def test_urgent() -> None:
    reply = answer(SKILL, "This is urgent, my order is for tomorrow")
    assert "Urgent requests are answered within two hours." in reply


@pytest.mark.evolve
def test_phone() -> None:
    reply = answer_in_subprocess(SKILL, "Is there a telephone number?")
    assert "Call us on weekdays between 9 and 17." in reply


@pytest.mark.evolve
def test_manager() -> None:
    reply = answer_in_subprocess(SKILL, "Let me speak to your supervisor")
    assert "A team lead will call you back within one working day." in reply


@pytest.mark.evolve
def test_legal() -> None:
    reply = answer_in_subprocess(SKILL, "I will contact my lawyer")
    assert "Legal questions go to our legal team by email." in reply
