"""What the support bot must do, as a team would test it.

Every test marked ``evolve`` is a task of ``pytest --evolve skills/``: its
pass/fail is the reward.  The ``holdout=True`` ones are paraphrases the
proposer never sees; they pass only if what it learned from the others is a
general rule rather than a memorised answer.  The guard at the end must keep
passing for any edit of the skills to be accepted.
"""

from __future__ import annotations

import re

import pytest
from agent import SKILLS, answer, load_playbook

REFUND_WINDOW = "Refunds are accepted within 30 days of delivery."
TRACKING = "Track your parcel with the link in your shipping email."
HANDOVER = "A human agent will reply within one working day."


# -------------------------------------------------------------- what it knows

@pytest.mark.evolve
def test_delivery_time() -> None:
    assert "Standard delivery takes 3 to 5 working days." in answer("How long does delivery take?")


@pytest.mark.evolve
def test_sign_in_help() -> None:
    assert "Sign in with the email address you used at checkout." in answer(
        "I can't sign in to my account"
    )


@pytest.mark.evolve
@pytest.mark.parametrize("question", ["How do I get a refund?",
                                      "Can I return these shoes for a refund?"])
def test_refund_window(question: str) -> None:
    assert REFUND_WINDOW in answer(question)


@pytest.mark.evolve(holdout=True)
@pytest.mark.parametrize("question", ["I'd like a refund for a broken kettle",
                                      "Refund please, the shoes don't fit"])
def test_refund_window_paraphrase(question: str) -> None:
    assert REFUND_WINDOW in answer(question)


@pytest.mark.evolve
def test_return_label() -> None:
    assert "Print your free return label from the Orders page." in answer(
        "How do I return an item?"
    )


@pytest.mark.evolve
@pytest.mark.parametrize("question", ["Where is my parcel?", "How do I track my order?"])
def test_tracking(question: str) -> None:
    assert TRACKING in answer(question)


@pytest.mark.evolve(holdout=True)
@pytest.mark.parametrize("question", ["My parcels have not arrived yet",
                                      "Can you track order 1234 for me?"])
def test_tracking_paraphrase(question: str) -> None:
    assert TRACKING in answer(question)


@pytest.mark.evolve
def test_express_makes_no_promises() -> None:
    reply = answer("Will my express order arrive tomorrow?")
    assert "guarantee" not in reply.lower()
    assert "Express orders usually arrive the next working day." in reply


@pytest.mark.evolve
def test_password_reset() -> None:
    assert "Reset your password from the sign-in page." in answer("I forgot my password")


@pytest.mark.evolve
def test_change_email() -> None:
    assert "Change your email address under Account settings." in answer(
        "How do I change my email address?"
    )


@pytest.mark.evolve(weight=2.0)
def test_unknown_request_goes_to_a_human() -> None:
    assert HANDOVER in answer("Can you fix my washing machine?")


@pytest.mark.evolve(holdout=True)
def test_unknown_request_goes_to_a_human_paraphrase() -> None:
    assert HANDOVER in answer("Do you sell garden furniture?")


# -------------------------------------------------------------- how it sounds

@pytest.mark.evolve
def test_greeting() -> None:
    assert answer("Where is my parcel?").splitlines()[0] == "Hi there!"


@pytest.mark.evolve
def test_sign_off() -> None:
    last_line = answer("How long does delivery take?").splitlines()[-1]
    assert last_line == "Best wishes, the Support Team"


# -------------------------------------------------------------- the guard

FRONTMATTER = re.compile(r"\A---\nname: (?P<name>[a-z-]+)\ndescription: (?P<description>.+)\n---\n")


@pytest.mark.evolve_guard
def test_skills_are_well_formed() -> None:
    skills = sorted(SKILLS.glob("*/SKILL.md"))
    assert len(skills) >= 4, "a skill folder was deleted"
    for skill in skills:
        text = skill.read_text(encoding="utf-8")
        header = FRONTMATTER.match(text)
        assert header, f"{skill.parent.name}/SKILL.md lost its frontmatter"
        assert header["name"] == skill.parent.name
        assert len(text.splitlines()) <= 60, f"{skill.parent.name}/SKILL.md is too long"
    book = load_playbook()
    assert book.greeting, "the tone skill lost its greeting"
    assert book.sign_off, "the tone skill lost its sign-off"
    assert book.fallback, "the tone skill lost its fallback answer"
