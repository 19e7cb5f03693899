"""Shipping: delivery times, costs and tracking, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "shipping"


@pytest.mark.evolve
def test_delivery_time() -> None:
    reply = answer(SKILL, "How long does standard delivery take?")
    assert "Standard delivery takes 3 to 5 working days." in reply


@pytest.mark.evolve
def test_tracking() -> None:
    reply = answer(SKILL, "How can I follow my parcel?")
    assert "Track your parcel with the link in your shipping email." in reply


@pytest.mark.evolve
def test_free_shipping() -> None:
    reply = answer(SKILL, "Is shipping free over a certain amount?")
    assert "Shipping is free on orders over 50 euros." in reply


@pytest.mark.evolve
def test_express() -> None:
    reply = answer_in_subprocess(SKILL, "Do you have an express option?")
    assert "Express orders arrive the next working day." in reply


@pytest.mark.evolve
def test_abroad() -> None:
    reply = answer_in_subprocess(SKILL, "Do you ship internationally?")
    assert "We ship to every country in the European Union." in reply


@pytest.mark.evolve
def test_address_change() -> None:
    reply = answer_in_subprocess(SKILL, "Can I change the destination after ordering?")
    assert "Change the delivery address until the order is packed." in reply
