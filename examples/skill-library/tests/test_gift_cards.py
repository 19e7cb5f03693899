"""Gift cards: gift cards and vouchers, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "gift-cards"


@pytest.mark.evolve
def test_gift_card_balance() -> None:
    reply = answer(SKILL, "How do I check my gift card balance?")
    assert "Check the balance on the Gift cards page." in reply


@pytest.mark.evolve
def test_gift_card_expiry() -> None:
    reply = answer(SKILL, "Do vouchers expire?")
    assert "Gift cards are valid for three years." in reply


@pytest.mark.evolve
def test_gift_card_combine() -> None:
    reply = answer(SKILL, "Can I combine two gift cards?")
    assert "Up to three gift cards can pay for one order." in reply


@pytest.mark.evolve
def test_gift_card_lost() -> None:
    reply = answer_in_subprocess(SKILL, "I lost my voucher code")
    assert "Lost codes can be resent to the buyer's email address." in reply


@pytest.mark.evolve
def test_gift_card_refund() -> None:
    reply = answer_in_subprocess(SKILL, "Can a gift card be exchanged for cash?")
    assert "Gift cards cannot be exchanged for cash." in reply


@pytest.mark.evolve
def test_gift_card_delivery() -> None:
    reply = answer_in_subprocess(SKILL, "When does the recipient get the e-gift?")
    assert "E-gift cards are emailed on the date you choose." in reply
