"""A small customer-support "agent" whose whole behaviour lives in ``skills/``.

It stands in for an LLM agent, offline and deterministic: every call reads the
skill files afresh, so an edit of the folder changes what the bot says — which
is what ``pytest --evolve skills/`` evolves.  Two kinds of line matter in a
``skills/<name>/SKILL.md``:

* a rule, ``- refund, money back -> Refunds are accepted within 30 days.``:
  when the customer's message mentions a trigger, the reply includes the
  sentence;
* a setting, ``greeting: Hello.`` / ``sign-off: ...`` / ``fallback: ...`` /
  ``never: <phrase>`` (a sentence containing the phrase is left out).

A reply is the greeting, the sentences of the rules that apply (skills in name
order, rules in file order), or the fallback when none does, then the sign-off,
one per line.  The bot prints what it did, so a failing test's captured output
tells a proposer which question was asked and which rules fired.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SKILLS", "Playbook", "Rule", "answer", "load_playbook", "parse_skill", "words"]

SKILLS = Path(__file__).resolve().parent / "skills"
RULE_LINE = re.compile(r"^-\s+(?P<triggers>[^`]+?)\s+->\s+(?P<say>\S.*)$")
SETTING_LINE = re.compile(r"^(?P<key>greeting|sign-off|fallback|never):\s*(?P<value>.*)$")
WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    """Lower-case words with a crude plural fold ("parcels" and "parcel" match)."""
    found = WORD.findall(text.lower())
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in found]


@dataclass(frozen=True)
class Rule:
    """``source`` is the skill file relative to the skills' parent ("skills/x/SKILL.md")."""

    source: str
    line: int
    triggers: tuple[str, ...]
    say: str

    def applies_to(self, message_words: list[str]) -> bool:
        return any(_contains(message_words, words(t)) for t in self.triggers)


@dataclass(frozen=True)
class Playbook:
    rules: tuple[Rule, ...]
    greeting: str = ""
    sign_off: str = ""
    fallback: str = ""
    never: tuple[str, ...] = ()


def parse_skill(text: str, source: str) -> tuple[list[Rule], dict[str, list[str]]]:
    """The rules and the settings (key -> values, in file order) of one skill file."""
    rules: list[Rule] = []
    settings: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        rule = RULE_LINE.match(line)
        if rule:
            triggers = tuple(t.strip() for t in rule["triggers"].split(",") if t.strip())
            rules.append(Rule(source, number, triggers, rule["say"].strip()))
            continue
        setting = SETTING_LINE.match(line)
        if setting:
            settings.setdefault(setting["key"], []).append(setting["value"].strip())
    return rules, settings


def load_playbook(skills_dir: Path = SKILLS) -> Playbook:
    """Everything the skill folder says, read now (never cached: the folder is what evolves)."""
    rules: list[Rule] = []
    settings: dict[str, list[str]] = {}
    for skill in sorted(skills_dir.glob("*/SKILL.md")):
        source = skill.relative_to(skills_dir.parent).as_posix()
        found, values = parse_skill(skill.read_text(encoding="utf-8"), source)
        rules.extend(found)
        for key, items in values.items():
            settings.setdefault(key, []).extend(items)

    def last(key: str) -> str:
        return settings.get(key, [""])[-1]

    never = tuple(v for v in settings.get("never", []) if v)
    return Playbook(tuple(rules), last("greeting"), last("sign-off"), last("fallback"), never)


def answer(message: str, skills_dir: Path = SKILLS) -> str:
    """The bot's reply to a customer's message, one sentence per line."""
    book = load_playbook(skills_dir)
    asked = words(message)
    print(f"support-bot question: {message!r}")
    sentences: list[str] = []
    for rule in book.rules:
        if not rule.applies_to(asked) or rule.say in sentences:
            continue
        banned = _banned(rule.say, book.never)
        if banned:
            print(f"support-bot dropped {rule.source}:{rule.line} (never: {banned!r}): "
                  f"{rule.say!r}")
            continue
        print(f"support-bot used {rule.source}:{rule.line}: {rule.say!r}")
        sentences.append(rule.say)
    if not sentences:
        print(f"support-bot fallback: {book.fallback!r}")
        sentences.append(book.fallback)
    reply = "\n".join(line for line in (book.greeting, *sentences, book.sign_off) if line)
    print(f"support-bot reply: {reply!r}")
    return reply


def _banned(sentence: str, never: Iterable[str]) -> str | None:
    lowered = sentence.lower()
    return next((phrase for phrase in never if phrase.lower() in lowered), None)


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``haystack`` as consecutive words."""
    size = len(needle)
    return size > 0 and any(haystack[i:i + size] == needle
                            for i in range(len(haystack) - size + 1))
