"""The example's proposer: learns skill rules from failing tests, with no model.

``pytest --evolve skills/`` calls the conftest's ``pytest_evolve_propose`` with
the failing train tasks; each carries pytest's assertion message and the
bot's printed trace (which question it was asked, which rules fired).  From
those two, :func:`propose` reads one *lesson* per failure and writes it into
the skill files as a general rule, the way a person reading the failures would:

==========================================  =====================================
assertion message                           lesson
==========================================  =====================================
``assert 'S' in '<reply>'``, a fired rule   correct that rule's sentence to S
says something close to S                   (an outdated fact: 14 days -> 30 days)
``assert 'S' in ...``, another rule already add a trigger from the question to it
says S                                      (a synonym: "track" as well as "parcel")
``assert 'S' in ...``, nothing fired and S  S becomes the fallback answer
shares no word with the question            (how unknown requests are handled)
``assert 'S' in ...``, otherwise            a new rule in the skill whose description
                                            fits best, triggered by the words the
                                            question and S share ("parcel")
``assert 'P' not in '<reply>'``             ``never: P`` in the tone skill
``assert 'A' == 'B'`` and a skill says A    replace A by B there (greeting, sign-off)
==========================================  =====================================

Triggers come from the question's words, never from the test's name or the
exact question, so what is learned on the train tasks also answers the
holdout paraphrases, which the proposer never sees.  A failure it cannot read
teaches nothing; when no failure teaches anything it proposes nothing (None).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent import RULE_LINE, SETTING_LINE, WORD, Rule, parse_skill, words

__all__ = ["Lesson", "propose", "read_lesson"]

# Words that never name a topic: they do not become triggers or pick a skill.
_COMMON = """
a about after all also am an and any are as at be been but by can can't could did do does
don't for from get got had has have hello hi how i i'd i'm if in into is it it's its just
let me might my no not of on or our please should so some than thank thanks that the their
them then there these they this those to too up us very want was we were what when where
which who why will with would yet you your
"""
STOPWORDS = frozenset(_COMMON.split())

#: How close a fired rule's sentence must be to the expected one to count as
#: "the same answer, out of date" rather than a different answer.
SIMILAR = 0.6

_LITERAL = r"(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")"
_SUMMARY = re.compile(rf"assert (?P<left>{_LITERAL}) (?P<op>not in|in|==) ")
_DIFF_LINE = re.compile(r"^  (?P<sign>[-+]) (?P<text>.*)$")
_TRACE = re.compile(
    r"^support-bot (?:(?:used|dropped) (?P<source>\S+?):\d+(?: \(never: .*\))?"
    r"|(?P<fallback>fallback)): (?P<text>.*)$"
)


class FailureLike(Protocol):
    """What :func:`propose` reads of a failure (``pytest_agentdescent.hooks.Failure``)."""

    @property
    def message(self) -> str: ...

    @property
    def output(self) -> str: ...


@dataclass(frozen=True)
class Lesson:
    """What one failing test teaches.

    ``kind`` is ``"include"`` (the reply must contain ``text``), ``"avoid"``
    (it must not contain ``text``) or ``"replace"`` (the bot said ``old``
    where ``text`` was expected).  ``fired`` are the (skill source, sentence)
    pairs the bot used or dropped for the question; ``fallback`` tells whether
    it answered with the fallback.
    """

    kind: str
    text: str
    old: str = ""
    question: str = ""
    fired: tuple[tuple[str, str], ...] = ()
    fallback: bool = False


def propose(files: Mapping[str, str],
            failures: Iterable[FailureLike]) -> dict[str, str | None] | None:
    """Edits of the skill files (changed files only) that teach every readable lesson."""
    work = dict(files)
    for failure in failures:
        lesson = read_lesson(failure.message, failure.output)
        if lesson is not None:
            _LEARN[lesson.kind](work, lesson)
    changed: dict[str, str | None] = {p: t for p, t in work.items() if files.get(p) != t}
    return changed or None


# ------------------------------------------------------------------ reading

def read_lesson(message: str, output: str) -> Lesson | None:
    """The lesson of one failure, or None when the message is not an assertion it knows."""
    head = _assertion_text(message)
    summary = _SUMMARY.search(head)
    if summary is None:
        return None
    op = summary["op"]
    if op == "==":
        expected = [m["text"] for m in map(_DIFF_LINE.match, head.splitlines())
                    if m and m["sign"] == "-"]
        actual = [m["text"] for m in map(_DIFF_LINE.match, head.splitlines())
                  if m and m["sign"] == "+"]
        if len(expected) != 1 or len(actual) != 1:
            return None  # multi-line values: not a single phrase to replace
        return Lesson("replace", expected[0], old=actual[0])
    text = _literal(summary["left"])
    if not text or "\n" in text:
        return None
    if op == "not in":
        return Lesson("avoid", text)
    question, fired, fallback = _read_trace(output)
    if question is None:
        return None
    return Lesson("include", text, question=question, fired=fired, fallback=fallback)


def _assertion_text(message: str) -> str:
    """The assertion error itself: pytest's ``E`` lines, else the crash text before the
    traceback (the message starts with it when the crash line is included)."""
    lines = [line[8:] for line in message.splitlines() if line.startswith("E ")]
    return "\n".join(lines) if lines else message.split("\n\n", 1)[0]


def _literal(text: str) -> str | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _read_trace(output: str) -> tuple[str | None, tuple[tuple[str, str], ...], bool]:
    """The last question the bot printed, the rules it used or dropped for it, and
    whether it fell back."""
    marker = "support-bot question: "
    start = output.rfind(marker)
    if start < 0:
        return None, (), False
    block = output[start:].splitlines()
    question = _literal(block[0][len(marker):])
    fired: list[tuple[str, str]] = []
    fallback = False
    for line in block[1:]:
        match = _TRACE.match(line)
        if match is None:
            continue
        text = _literal(match["text"])
        if match["fallback"]:
            fallback = True
        elif text is not None:
            fired.append((match["source"], text))
    return question, tuple(fired), fallback


# ------------------------------------------------------------------ learning

def _learn_include(work: dict[str, str], lesson: Lesson) -> None:
    asked = words(lesson.question)
    rules = _rules(work)
    owner = next(((path, rule) for path, rule in rules if rule.say == lesson.text), None)
    if owner is not None:  # the answer exists: teach it this way of asking
        path, rule = owner
        if not rule.applies_to(asked):
            trigger = _trigger(lesson.question, lesson.text, avoid=rule.triggers)
            if trigger:
                _rewrite_rule(work, path, rule, (*rule.triggers, trigger), rule.say)
        return
    close = _closest(lesson.text, [say for _, say in lesson.fired])
    if close is not None:  # the same answer, out of date
        for path, rule in rules:
            if rule.say == close:
                _rewrite_rule(work, path, rule, rule.triggers, lesson.text)
                return
    if lesson.fallback and not _content(words(lesson.question)) & _content(words(lesson.text)):
        _set(work, "fallback", lesson.text)
        return
    trigger = _trigger(lesson.question, lesson.text)
    skill = _best_skill(work, lesson.question + " " + lesson.text)
    if trigger and skill:
        _add_rule(work, skill, f"- {trigger} -> {lesson.text}")


def _learn_avoid(work: dict[str, str], lesson: Lesson) -> None:
    phrase = lesson.text.strip().lower()
    if phrase and phrase not in _settings(work).get("never", []):
        _set(work, "never", phrase, add=True)


def _learn_replace(work: dict[str, str], lesson: Lesson) -> None:
    """Replace the line value that said ``old``, if exactly one skill line says it."""
    hits = [(path, number) for path, text in _skill_files(work)
            for number, line in enumerate(text.splitlines())
            if _value_of(line) == lesson.old]
    if len(hits) != 1:
        return
    path, number = hits[0]
    lines = work[path].splitlines(keepends=True)
    lines[number] = lines[number].replace(lesson.old, lesson.text, 1)
    work[path] = "".join(lines)


_LEARN = {"include": _learn_include, "avoid": _learn_avoid, "replace": _learn_replace}


# ------------------------------------------------------------------ the skill files

def _skill_files(work: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted((p, t) for p, t in work.items() if p.endswith("SKILL.md"))


def _rules(work: Mapping[str, str]) -> list[tuple[str, Rule]]:
    return [(path, rule) for path, text in _skill_files(work)
            for rule in parse_skill(text, path)[0]]


def _settings(work: Mapping[str, str]) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {}
    for path, text in _skill_files(work):
        for key, values in parse_skill(text, path)[1].items():
            merged.setdefault(key, []).extend(values)
    return merged


def _value_of(line: str) -> str | None:
    stripped = line.strip()
    rule = RULE_LINE.match(stripped)
    if rule:
        return rule["say"].strip()
    setting = SETTING_LINE.match(stripped)
    return setting["value"].strip() if setting else None


def _rewrite_rule(work: dict[str, str], path: str, rule: Rule,
                  triggers: tuple[str, ...], say: str) -> None:
    lines = work[path].splitlines(keepends=True)
    end = "\n" if lines[rule.line - 1].endswith("\n") else ""
    lines[rule.line - 1] = f"- {', '.join(triggers)} -> {say}{end}"
    work[path] = "".join(lines)


def _add_rule(work: dict[str, str], path: str, line: str) -> None:
    """Append the rule after the file's last rule (at the end when it has none)."""
    lines = work[path].splitlines()
    last = max((i for i, text in enumerate(lines) if RULE_LINE.match(text.strip())),
               default=len(lines) - 1)
    lines.insert(last + 1, line)
    work[path] = "\n".join(lines) + "\n"


def _set(work: dict[str, str], key: str, value: str, *, add: bool = False) -> None:
    """Set ``key:`` in the skill that holds the settings (``add``: one more such line)."""
    holder = next((p for p, t in _skill_files(work)
                   if any(SETTING_LINE.match(line.strip()) for line in t.splitlines())), None)
    if holder is None:
        return
    lines = work[holder].splitlines()
    same = [i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:")]
    if same and not add:
        lines[same[-1]] = f"{key}: {value}"
    else:
        anchor = same or [i for i, line in enumerate(lines) if SETTING_LINE.match(line.strip())]
        lines.insert(anchor[-1] + 1, f"{key}: {value}")
    work[holder] = "\n".join(lines) + "\n"


def _best_skill(work: Mapping[str, str], text: str) -> str | None:
    """The skill whose name and description share the most words with ``text``."""
    wanted = _content(words(text))
    best: tuple[int, str] | None = None
    for path, body in _skill_files(work):
        about = " ".join(re.findall(r"^(?:name|description): (.*)$", body, re.M))
        score = len(wanted & _content(words(about)))
        if score and (best is None or score > best[0]):
            best = (score, path)
    return best[1] if best else None


# ------------------------------------------------------------------ words

def _content(found: Iterable[str]) -> set[str]:
    return {w for w in found if w not in STOPWORDS}


def _closest(text: str, candidates: Iterable[str]) -> str | None:
    scored = [(difflib.SequenceMatcher(None, text, c).ratio(), c) for c in candidates]
    best = max(scored, default=None)
    return best[1] if best and best[0] >= SIMILAR else None


def _trigger(question: str, answer: str, *, avoid: Iterable[str] = ()) -> str | None:
    """Words of ``question`` that name its topic, as a trigger.

    The longest run of words the question shares with the answer it needs
    ("email address" in "How do I change my email address?" / "Change your
    email address ..."), else the question's longest content word.
    """
    raw = WORD.findall(question.lower())
    folded = [words(w)[0] for w in raw]
    target = words(answer)
    skip = {t.lower() for t in avoid}
    runs: list[tuple[int, int, int]] = []  # (length, -start, start)
    for i in range(len(folded)):
        for j in range(len(target)):
            size = 0
            while (i + size < len(folded) and j + size < len(target)
                   and folded[i + size] == target[j + size]):
                size += 1
            start, stop = i, i + size
            while start < stop and folded[start] in STOPWORDS:
                start += 1
            while stop > start and folded[stop - 1] in STOPWORDS:
                stop -= 1
            if stop > start:
                runs.append((stop - start, -start, start))
    for size, _, start in sorted(runs, reverse=True):
        phrase = " ".join(raw[start:start + size])
        if phrase not in skip:
            return phrase
    spare = sorted((w for w in raw if w not in STOPWORDS and w not in skip),
                   key=len, reverse=True)
    return spare[0] if spare else None
