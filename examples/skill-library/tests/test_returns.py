"""Returns: sending items back, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "returns"


@pytest.mark.evolve
def test_return_label() -> None:
    reply = answer(SKILL, "How do I print a return label?")
    assert "Print your free return label from the Orders page." in reply


@pytest.mark.evolve
def test_return_window() -> None:
    reply = answer(SKILL, "How many days do I have to send something back?")
    assert "Send items back within 30 days of delivery." in reply


@pytest.mark.evolve
def test_return_condition() -> None:
    reply = answer(SKILL, "Must the packaging be unopened?")
    assert "Items may be opened but must be unused." in reply


@pytest.mark.evolve
def test_return_dropoff() -> None:
    reply = answer_in_subprocess(SKILL, "Where can I drop off my parcel?")
    assert "Drop the parcel at any post office." in reply


@pytest.mark.evolve
def test_exchange() -> None:
    reply = answer_in_subprocess(SKILL, "Can I swap a shirt for another size?")
    assert "Exchanges for another size are free." in reply


@pytest.mark.evolve
def test_return_status() -> None:
    reply = answer_in_subprocess(SKILL, "Has my return arrived at your warehouse?")
    assert "We email you as soon as your return reaches the warehouse." in reply
