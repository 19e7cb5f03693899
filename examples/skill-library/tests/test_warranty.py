"""Warranty: repairs and guarantees of products, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "warranty"


@pytest.mark.evolve
def test_warranty_length() -> None:
    reply = answer(SKILL, "How long is the guarantee?")
    assert "Every product has a two-year warranty." in reply


@pytest.mark.evolve
def test_warranty_claim() -> None:
    reply = answer(SKILL, "How do I claim a repair?")
    assert "Start a repair claim from the Orders page." in reply


@pytest.mark.evolve
def test_warranty_receipt() -> None:
    reply = answer(SKILL, "Do I need my receipt for a warranty claim?")
    assert "Your order number is your proof of purchase." in reply


@pytest.mark.evolve
def test_warranty_accident() -> None:
    reply = answer_in_subprocess(SKILL, "Does the warranty cover accidental drops?")
    assert "Accidental damage is not covered by the warranty." in reply


@pytest.mark.evolve
def test_warranty_replacement() -> None:
    reply = answer_in_subprocess(SKILL, "Will you replace it or fix it?")
    assert "We repair first and replace when a repair is not possible." in reply


@pytest.mark.evolve
def test_warranty_extension() -> None:
    reply = answer_in_subprocess(SKILL, "Can I buy extended protection?")
    assert "Extended protection can be added within 30 days of purchase." in reply
