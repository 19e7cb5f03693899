"""Accounts: signing in, passwords and profile settings, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "accounts"


@pytest.mark.evolve
def test_password_reset() -> None:
    reply = answer(SKILL, "I forgot my password")
    assert "Reset your password from the sign-in page." in reply


@pytest.mark.evolve
def test_change_email() -> None:
    reply = answer(SKILL, "How do I change my email address?")
    assert "Change your email address under Account settings." in reply


@pytest.mark.evolve
def test_two_factor() -> None:
    reply = answer(SKILL, "Can I turn on two-factor authentication?")
    assert "Turn on two-factor authentication under Security." in reply


@pytest.mark.evolve
def test_locked_out() -> None:
    reply = answer_in_subprocess(SKILL, "My account is locked, what happened?")
    assert "An account locks after five wrong passwords and unlocks after an hour." in reply


@pytest.mark.evolve
def test_close_account() -> None:
    reply = answer_in_subprocess(SKILL, "How do I close my account?")
    assert "Close your account under Account settings." in reply


@pytest.mark.evolve
def test_guest_checkout() -> None:
    reply = answer_in_subprocess(SKILL, "Can I order without registering?")
    assert "Guest checkout needs only an email address." in reply
