"""A tiny offline "agent" whose behaviour lives in skills/greeter/SKILL.md.

It stands in for a real LLM agent: it reads its rules from the skill file at
call time, so editing the skill folder changes what it does, which is the
whole point of evolving the folder.  No network, no model.
"""

from __future__ import annotations

import re
from pathlib import Path

SKILL = Path(__file__).parent / "skills" / "greeter" / "SKILL.md"
RULE = re.compile(r"^when\s+(\w+)\s*->\s*(.+)$")


def load_rules(skill: Path = SKILL) -> dict[str, str]:
    rules: dict[str, str] = {}
    for line in skill.read_text(encoding="utf-8").splitlines():
        match = RULE.match(line.strip())
        if match:
            rules[match.group(1).lower()] = match.group(2).strip()
    return rules


def greet(request: str, name: str, skill: Path = SKILL) -> str:
    """Answer a request such as "say hello to Ada" using the first matching rule."""
    rules = load_rules(skill)
    for word in re.findall(r"\w+", request.lower()):
        if word in rules:
            return rules[word].format(name=name)
    return f"I do not know how to answer {request!r}."
