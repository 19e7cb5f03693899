"""Billing: invoices, payment methods and charges, in-process and from the command line."""

from __future__ import annotations

import pytest
from agent import answer, answer_in_subprocess

SKILL = "billing"


@pytest.mark.evolve
def test_invoice() -> None:
    reply = answer(SKILL, "Where can I download my invoice?")
    assert "Download invoices from the Orders page." in reply


@pytest.mark.evolve
def test_payment_methods() -> None:
    reply = answer(SKILL, "Which payment methods do you accept?")
    assert "We accept cards, PayPal and bank transfer." in reply


@pytest.mark.evolve
def test_double_charge() -> None:
    reply = answer(SKILL, "Why was I charged twice?")
    assert "A double charge is a pending authorisation and disappears within 3 days." in reply


@pytest.mark.evolve
def test_vat_number() -> None:
    reply = answer_in_subprocess(SKILL, "Can you add my company VAT number?")
    assert "Add your VAT number in Account settings before ordering." in reply


@pytest.mark.evolve
def test_currency() -> None:
    reply = answer_in_subprocess(SKILL, "Can I pay in dollars?")
    assert "Prices are charged in euros." in reply


@pytest.mark.evolve
def test_failed_payment() -> None:
    reply = answer_in_subprocess(SKILL, "My payment was declined, what now?")
    assert "Try another card or contact your bank." in reply
