"""Refunds: getting money back for an order, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "refunds"


@pytest.mark.evolve
def test_refund_window() -> None:
    reply = answer(SKILL, "How long do I have to ask for a refund?")
    assert "Refunds are accepted within 30 days of delivery." in reply


@pytest.mark.evolve
def test_refund_method() -> None:
    reply = answer(SKILL, "Where does the money go when you pay me back?")
    assert "Money goes back to the card you paid with." in reply


@pytest.mark.evolve
def test_refund_timing() -> None:
    reply = answer(SKILL, "When will I see the refund on my statement?")
    assert "Your bank shows the refund within 5 working days." in reply


@pytest.mark.evolve
def test_refund_sale_items() -> None:
    reply = answer_in_subprocess(SKILL, "Can I get money back for clearance items?")
    assert "Clearance items are refunded like any other item." in reply


@pytest.mark.evolve
def test_refund_partial() -> None:
    reply = answer_in_subprocess(SKILL, "Can I get a partial payback for a damaged box?")
    assert "We offer a partial refund for damaged packaging." in reply


@pytest.mark.evolve
def test_refund_shipping_fee() -> None:
    reply = answer_in_subprocess(SKILL, "Do you refund the delivery charge?")
    assert "The delivery charge is refunded when the whole order comes back." in reply
