"""The example's conftest: makes ``agent`` importable, and is the proposer.

``pytest_evolve_propose`` needs no model: a failing test's assertion message,
``assert 'SENTENCE' in '[skill] QUESTION\\n...'``, says which skill was asked
what and which sentence was missing.  The hook takes the first failure's
skill and adds to that one ``SKILL.md`` a rule for each of its failures,
triggered by the question's longest word that is not a common one.  So every
candidate touches exactly one skill, and only that skill's six tests can
change outcome: what read-based test selection is measured on.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from pytest_agentdescent.hooks import ProposeContext

sys.path.insert(0, str(Path(__file__).parent))

from agent import words  # the example's own module: importable from here on

_LITERAL = r"(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")"
ASSERTION = re.compile(rf"assert (?P<want>{_LITERAL}) in (?P<reply>{_LITERAL})")
HEADER = re.compile(r"^\[(?P<skill>[a-z0-9-]+)\] (?P<question>.+)$")
COMMON = frozenset({"about", "another", "could", "does", "have", "happened", "something",
                    "there", "their", "what", "when", "where", "which", "will", "would",
                    "your"})


def lesson(message: str) -> tuple[str, str, str] | None:
    """(skill, trigger, sentence) taught by one failure, or None if it is not the
    ``assert SENTENCE in reply`` of this example."""
    found = ASSERTION.search(message)
    if found is None:
        return None
    want, reply = ast.literal_eval(found["want"]), ast.literal_eval(found["reply"])
    header = HEADER.match(reply.split("\n", 1)[0])
    topic = [w for w in words(header["question"]) if w not in COMMON] if header else []
    if header is None or not topic:
        return None
    return header["skill"], max(topic, key=len), want


# optionalhook: the suite still runs with the plugin off (``pytest -p no:agentdescent``)
@pytest.hookimpl(optionalhook=True)
def pytest_evolve_propose(context: ProposeContext) -> Mapping[str, str | None] | None:
    lessons = [found for f in context.failures if (found := lesson(f.message))]
    if not lessons:
        return None
    skill = lessons[0][0]
    path = next((p for p in context.files if p.endswith(f"skills/{skill}/SKILL.md")), None)
    if path is None:
        return None
    text = context.files[path]
    new = [f"- {trigger} -> {say}" for name, trigger, say in lessons if name == skill]
    added = [line for line in dict.fromkeys(new) if line not in text.splitlines()]
    return {path: text.rstrip("\n") + "\n" + "\n".join(added) + "\n"} if added else None
