"""Privacy: personal data and how it is used, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "privacy"


@pytest.mark.evolve
def test_data_export() -> None:
    reply = answer(SKILL, "Can I download all my personal data?")
    assert "Request a copy of your data from Account settings." in reply


@pytest.mark.evolve
def test_data_deletion() -> None:
    reply = answer(SKILL, "How do I delete my information?")
    assert "Deleting your account erases your data within 30 days." in reply


@pytest.mark.evolve
def test_newsletter() -> None:
    reply = answer(SKILL, "How do I unsubscribe from the newsletter?")
    assert "Unsubscribe with the link at the bottom of every newsletter." in reply


@pytest.mark.evolve
def test_cookies() -> None:
    reply = answer_in_subprocess(SKILL, "What cookies do you use?")
    assert "We use cookies only to keep you signed in." in reply


@pytest.mark.evolve
def test_third_parties() -> None:
    reply = answer_in_subprocess(SKILL, "Do you sell my data to advertisers?")
    assert "We never sell your data." in reply


@pytest.mark.evolve
def test_data_location() -> None:
    reply = answer_in_subprocess(SKILL, "Where are my records stored?")
    assert "Your data is stored in the European Union." in reply
