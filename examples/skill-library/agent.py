"""A small customer-support agent whose knowledge lives in ``skills/<name>/SKILL.md``.

It stands in for an LLM agent, offline and deterministic.  Every call reads
the one skill it is asked about, afresh, so an edit of that skill changes what
the agent says and nothing else does.  A rule of a skill is a line
``- refund, money back -> Refunds are accepted within 30 days.``: when the
question contains one of the trigger words, the reply includes the sentence.

Agents are used two ways, so the tests use both: in-process (import this
module, call :func:`answer`) and as a command line (``python agent.py SKILL
QUESTION``, run by :func:`answer_in_subprocess`).  The reply's first line
quotes the question under the skill's name (``[refunds] How ...?``), so a
failing ``assert SENTENCE in reply`` shows what was asked: that is what the
conftest's proposer learns from.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["FALLBACK", "SKILLS", "answer", "answer_in_subprocess", "rules", "words"]

SKILLS = Path(__file__).resolve().parent / "skills"
FALLBACK = "Sorry, I cannot answer that yet."
RULE_LINE = re.compile(r"^- (?P<triggers>.+?) -> (?P<say>\S.*)$")


def words(text: str) -> list[str]:
    """The lower-case words of ``text``."""
    return re.findall(r"[a-z0-9]+", text.lower())


def rules(skill: str) -> list[tuple[tuple[str, ...], str]]:
    """The (triggers, sentence) rules of one skill, read now: the file is what evolves."""
    text = (SKILLS / skill / "SKILL.md").read_text(encoding="utf-8")
    found = [RULE_LINE.match(line.strip()) for line in text.splitlines()]
    return [(tuple(t.strip().lower() for t in m["triggers"].split(",")), m["say"].strip())
            for m in found if m]


def answer(skill: str, question: str) -> str:
    """The reply to ``question`` from skill ``skill``: the quoted question, then the
    sentences of the rules that apply (the fallback when none does), one per line."""
    asked = " ".join(words(question))
    said: list[str] = []
    for triggers, say in rules(skill):
        if say not in said and any(f" {t} " in f" {asked} " for t in triggers):
            said.append(say)
    return "\n".join([f"[{skill}] {question}", *(said or [FALLBACK])])


def answer_in_subprocess(skill: str, question: str) -> str:
    """The same reply from the command line, as a test of an agent CLI gets it."""
    done = subprocess.run([sys.executable, __file__, skill, question],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.rstrip("\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python agent.py SKILL QUESTION")
    print(answer(sys.argv[1], sys.argv[2]))
