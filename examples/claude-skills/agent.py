"""A small Claude agent whose behaviour lives in a Claude-style skill folder.

``skills/<name>/SKILL.md`` starts with a frontmatter block (``name``,
``description``) followed by the instructions.  As in Claude's own skills, the
description decides *when* a skill is used and the body *how*: the agent picks
the skill whose description best fits the request, then calls the Messages API
with that skill's body as the system prompt and the request plus its material
as the user message.  Every call reads the folder afresh, so an edit of
``skills/`` changes what the agent does — which is what
``pytest --evolve skills/`` evolves.

The Anthropic SDK reads ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` from
the environment; ``CLAUDE_SKILLS_MODEL`` picks the model.  The agent prints the
skill it chose and the answer it got, so a failing test's captured output shows
a proposer what happened.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import anthropic

__all__ = [
    "MODEL",
    "SKILLS",
    "Skill",
    "SkillFormatError",
    "ask",
    "choose_skill",
    "load_skills",
    "parse_skill",
    "write_commit_message",
    "write_release_notes",
]

SKILLS = Path(__file__).resolve().parent / "skills"
MODEL = os.environ.get("CLAUDE_SKILLS_MODEL", "claude-haiku-4-5")
MAX_TOKENS = 1024

_FRONTMATTER = re.compile(r"\A---\n(?P<head>.*?)\n---\n(?P<body>.*)\Z", re.S)
_FIELD = re.compile(r"^(?P<key>[a-z][a-z-]*):\s*(?P<value>.*)$")
_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which skill fits a request.
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "for", "from", "i", "in", "is",
    "it", "me", "my", "of", "on", "or", "our", "please", "that", "the", "these", "this",
    "those", "to", "up", "we", "what", "with", "you", "your",
})


class SkillFormatError(ValueError):
    """A SKILL.md without a usable frontmatter block."""


@dataclass(frozen=True)
class Skill:
    """One skill folder: ``name`` and ``description`` from the frontmatter, the rest is ``body``."""

    name: str
    description: str
    body: str
    path: Path


def parse_skill(text: str, path: Path) -> Skill:
    """The skill in ``text``; SkillFormatError naming the file when the frontmatter is missing."""
    match = _FRONTMATTER.match(text)
    if match is None:
        raise SkillFormatError(f"{path}: a SKILL.md must start with a '---' frontmatter block "
                               "holding 'name:' and 'description:' lines")
    fields: dict[str, str] = {}
    for line in match["head"].splitlines():
        found = _FIELD.match(line.strip())
        if found:
            fields[found["key"]] = found["value"].strip()
    missing = [key for key in ("name", "description") if not fields.get(key)]
    if missing:
        raise SkillFormatError(f"{path}: the frontmatter has no {' or '.join(missing)}")
    return Skill(fields["name"], fields["description"], match["body"].strip() + "\n", path)


def load_skills(skills_dir: Path = SKILLS) -> list[Skill]:
    """Every skill of the folder, in name order (read now: the folder is what evolves)."""
    return [parse_skill(path.read_text(encoding="utf-8"), path)
            for path in sorted(skills_dir.glob("*/SKILL.md"))]


def _words(text: str) -> set[str]:
    """Content words with a crude plural fold ("notes" matches "note")."""
    found = _WORD.findall(text.lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in found if w not in _STOPWORDS}


def choose_skill(request: str, skills: list[Skill]) -> Skill | None:
    """The skill whose name and description share the most words with the request.

    A stand-in for the model's own choice, deterministic so that a routing test
    depends on the descriptions alone.  None when no description shares a word.
    """
    asked = _words(request)
    best: tuple[int, Skill] | None = None
    for skill in skills:
        score = len(asked & _words(f"{skill.name.replace('-', ' ')} {skill.description}"))
        if score and (best is None or score > best[0]):
            best = (score, skill)
    return best[1] if best else None


def ask(request: str, material: str, *, client: anthropic.Anthropic,
        skills_dir: Path = SKILLS) -> str:
    """Claude's answer to ``request`` about ``material``, guided by the skill that fits."""
    skill = choose_skill(request, load_skills(skills_dir))
    if skill is None:
        raise LookupError(f"no skill in {skills_dir} fits {request!r}: a skill is chosen by the "
                          "words its description shares with the request")
    print(f"claude-skills: {request!r} -> skill {skill.name}")
    response = client.messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        system=skill.body,
        messages=[{"role": "user", "content": f"{request}\n\n{material}"}],
    )
    text = "".join(block.text for block in response.content if block.type == "text")
    print(f"claude-skills answer:\n{text}")
    return text


def write_commit_message(diff: str, branch: str, *, client: anthropic.Anthropic,
                         skills_dir: Path = SKILLS) -> str:
    """The commit message for ``diff`` made on ``branch``."""
    return ask(f"Write the commit message for these staged changes on branch {branch}",
               diff, client=client, skills_dir=skills_dir)


def write_release_notes(version: str, pull_requests: str, *, client: anthropic.Anthropic,
                        skills_dir: Path = SKILLS) -> str:
    """The release notes of ``version`` from its merged pull requests, one per line."""
    return ask(f"Write the release notes of version {version} from these merged pull requests",
               pull_requests, client=client, skills_dir=skills_dir)
