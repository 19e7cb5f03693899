"""Loyalty: the loyalty points programme, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "loyalty"


@pytest.mark.evolve
def test_earn_points() -> None:
    reply = answer(SKILL, "How do I earn points?")
    assert "You earn one point for every euro spent." in reply


@pytest.mark.evolve
def test_redeem_points() -> None:
    reply = answer(SKILL, "How can I redeem my points?")
    assert "Redeem 100 points for 5 euros at checkout." in reply


@pytest.mark.evolve
def test_points_expiry() -> None:
    reply = answer(SKILL, "Do my points expire?")
    assert "Points expire after 12 months without a purchase." in reply


@pytest.mark.evolve
def test_member_tiers() -> None:
    reply = answer_in_subprocess(SKILL, "What are the membership tiers?")
    assert "Silver starts at 500 points and Gold at 2000 points." in reply


@pytest.mark.evolve
def test_birthday_bonus() -> None:
    reply = answer_in_subprocess(SKILL, "Do I get a birthday present?")
    assert "Members get 50 bonus points on their birthday." in reply


@pytest.mark.evolve
def test_join_programme() -> None:
    reply = answer_in_subprocess(SKILL, "How do I join the loyalty programme?")
    assert "Every account is a member automatically." in reply
