"""Ledger commit messages: evidence written as git trailers, and read back.

A ledger commit message looks like::

    agentdescent: v3 Tell the agent to quote file names

    Tell the agent to quote file names
    (the proposer's full rationale, verbatim)

    Agentdescent-Version: 3
    Agentdescent-Base: 1f0c...            (the commit version 0 of this history is)
    Agentdescent-Diff: 8a1b2c3d4e5f6071
    Agentdescent-Author: worker-2
    Agentdescent-Base-Version: 2
    Agentdescent-Reward-Before: 0.5
    Agentdescent-Reward-After: 0.75
    Agentdescent-P-Improvement: 0.97

The subject is for humans (``git log --oneline``); the body is the rationale as
given; the final paragraph holds the trailers, one ``Key: value`` per line, so
``git interpret-trailers --parse`` and GitHub both read them.  We parse them
ourselves (the final paragraph, strict ``Key: value`` lines) to avoid a process
per commit when listing history.

A commit counts as a ledger commit when its subject starts with
``agentdescent:`` and it carries both ``Agentdescent-Version`` and
``Agentdescent-Base``; any other commit is a base (version 0).  Recording the
base in every commit is what lets the history walk stop at the right place even
when the base itself came from merging an earlier ledger branch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.errors import LedgerError
from agentdescent_core.redact import redact

SUBJECT_PREFIX = "agentdescent:"
VERSION = "Agentdescent-Version"
BASE = "Agentdescent-Base"
DIFF = "Agentdescent-Diff"
AUTHOR = "Agentdescent-Author"
BASE_VERSION = "Agentdescent-Base-Version"
REWARD_BEFORE = "Agentdescent-Reward-Before"
REWARD_AFTER = "Agentdescent-Reward-After"
P_IMPROVEMENT = "Agentdescent-P-Improvement"
CARRY = "Agentdescent-Carry"
CARRY_ANCESTOR = "Agentdescent-Carry-Ancestor"
CARRY_CONFLICT = "Agentdescent-Carry-Conflict"
#: One per artifact root of the run that made the commit; ``agentdescent review``
#: reads them when it is given no paths and the base configures none.
ROOT = "Agentdescent-Root"

_RESERVED = {k.lower() for k in (
    VERSION, BASE, DIFF, AUTHOR, BASE_VERSION, REWARD_BEFORE, REWARD_AFTER, P_IMPROVEMENT,
    CARRY, CARRY_ANCESTOR, CARRY_CONFLICT, ROOT,
)}
_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\Z")
_TRAILER_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9-]*): ?(.*)\Z")
_SUBJECT_MAX = 72


@dataclass(frozen=True)
class Evidence:
    """Why a version was accepted, recorded in its commit.

    Rewards and P(improvement) are written when given; ``extra`` adds any other
    trailers (keys are git trailer tokens such as ``Agentdescent-Rounds`` or
    ``Co-authored-by``; the keys above are reserved).
    """

    reward_before: float | None = None
    reward_after: float | None = None
    p_improvement: float | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedMessage:
    subject: str
    body: str
    trailers: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        """Last value of trailer ``key`` (case-insensitive, as git compares them)."""
        values = self.get_all(key)
        return values[-1] if values else None

    def get_all(self, key: str) -> list[str]:
        lowered = key.lower()
        return [v for k, v in self.trailers if k.lower() == lowered]

    @property
    def version(self) -> int | None:
        """The ledger version, or None when this is not a ledger commit."""
        if not self.subject.startswith(SUBJECT_PREFIX) or self.get(BASE) is None:
            return None
        raw = self.get(VERSION)
        if raw is None or not raw.isdigit():
            return None
        return int(raw)


@dataclass(frozen=True)
class VersionRecord:
    """One entry of :meth:`Ledger.history`: a version, its commit and its evidence."""

    version: int
    sha: str
    subject: str
    trailers: tuple[tuple[str, str], ...]
    rationale: str

    def trailer(self, key: str) -> str | None:
        """Last value of trailer ``key`` (case-insensitive), or None."""
        return ParsedMessage(self.subject, self.rationale, self.trailers).get(key)

    @property
    def diff_id(self) -> str | None:
        return self.trailer(DIFF)

    @property
    def author(self) -> str | None:
        return self.trailer(AUTHOR)

    @property
    def reward_before(self) -> float | None:
        return _float(self.trailer(REWARD_BEFORE))

    @property
    def reward_after(self) -> float | None:
        return _float(self.trailer(REWARD_AFTER))

    @property
    def p_improvement(self) -> float | None:
        return _float(self.trailer(P_IMPROVEMENT))

    @property
    def carried_from(self) -> str | None:
        """For a carry commit, the ledger commit whose files it carried."""
        return self.trailer(CARRY)


def parse_message(message: str) -> ParsedMessage:
    """Split a commit message into subject, body and trailers (the final paragraph)."""
    lines = message.replace("\r\n", "\n").rstrip("\n").split("\n")
    subject = lines[0] if lines else ""
    rest = lines[1:]
    trailers: tuple[tuple[str, str], ...] = ()
    blank = max((i for i, line in enumerate(rest) if not line.strip()), default=None)
    if blank is not None and blank + 1 < len(rest):
        block = rest[blank + 1:]
        matches = [_TRAILER_RE.match(line) for line in block]
        if all(matches):
            trailers = tuple((m.group(1), m.group(2).strip()) for m in matches if m)
            rest = rest[:blank]
    body = "\n".join(rest).strip("\n")
    return ParsedMessage(subject, body, trailers)


def commit_message(
    *,
    version: int,
    base: str,
    diff: Diff,
    paths: Sequence[str],
    evidence: Evidence | None,
    roots: Sequence[str] = (),
) -> str:
    """The message of the dev commit that makes ``diff`` version ``version``.

    ``roots`` (the artifact roots of the run) become ``Agentdescent-Root``
    trailers, so a later review knows what the commit was allowed to change.
    """
    rationale = _clean_body(diff.rationale)
    first = rationale.split("\n", 1)[0].strip() if rationale else ""
    subject = f"{SUBJECT_PREFIX} v{version} {first or _paths_summary(paths)}"
    trailers: list[tuple[str, str]] = [
        (VERSION, str(version)),
        (BASE, base),
        (DIFF, diff.diff_id),
        (AUTHOR, diff.author),
        (BASE_VERSION, str(diff.base_version)),
        *((ROOT, root) for root in roots),
    ]
    if evidence is not None:
        for key, value in (
            (REWARD_BEFORE, evidence.reward_before),
            (REWARD_AFTER, evidence.reward_after),
            (P_IMPROVEMENT, evidence.p_improvement),
        ):
            if value is not None:
                trailers.append((key, _number(key, value)))
        for key, text in evidence.extra.items():
            trailers.append((_extra_key(key), str(text)))
    return _assemble(subject, rationale, trailers)


def carry_message(
    *,
    version: int,
    base: str,
    carried: str,
    carried_version: int,
    ancestor: str,
    branch: str,
    merged: Sequence[str],
    conflicts: Sequence[str],
) -> str:
    """The message of a carry commit (see :mod:`.carry`)."""
    subject = f"{SUBJECT_PREFIX} v{version} carry {branch} v{carried_version} onto {base[:12]}"
    lines = [
        f"The base branch moved since {branch} was cut. The evolved artifact files of "
        f"{carried[:12]} (v{carried_version}) were carried onto {base[:12]} with a "
        f"three-way merge per file (common ancestor {ancestor[:12]}).",
    ]
    if merged:
        lines.append("")
        lines.append("Merged with changes of the base: " + ", ".join(merged))
    if conflicts:
        lines.append("")
        lines.append(
            "Conflicting files (both sides changed the same lines): the base's version was "
            f"kept; the evolved text is in {carried[:12]}:"
        )
        lines.extend(f"- {path}" for path in conflicts)
    trailers = [
        (VERSION, str(version)),
        (BASE, base),
        (CARRY, carried),
        (CARRY_ANCESTOR, ancestor),
        *((CARRY_CONFLICT, path) for path in conflicts),
    ]
    return _assemble(subject, "\n".join(lines), trailers)


# ---------------------------------------------------------------------- helpers


def _assemble(subject: str, body: str, trailers: Sequence[tuple[str, str]]) -> str:
    subject = " ".join(subject.split())
    if len(subject) > _SUBJECT_MAX:
        subject = subject[: _SUBJECT_MAX - 3].rstrip() + "..."
    block = "\n".join(f"{k}: {_one_line(v)}" for k, v in trailers)
    parts = [subject]
    if body:
        parts.append(body)
    parts.append(block)
    return redact("\n\n".join(parts) + "\n")  # a commit never carries a secret's value


def _clean_body(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def _one_line(value: str) -> str:
    return " ".join(value.split()) or "-"


def _paths_summary(paths: Sequence[str]) -> str:
    if len(paths) == 1:
        return f"edit {paths[0]}"
    return f"edit {len(paths)} files"


def _number(key: str, value: float) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LedgerError(f"evidence {key} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise LedgerError(f"evidence {key} must be a finite number, got {value!r}")
    return repr(number)


def _extra_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise LedgerError(
            f"evidence key {key!r} is not a valid git trailer key; use letters, digits and "
            "'-' only, e.g. 'Agentdescent-Rounds'"
        )
    if key.lower() in _RESERVED:
        raise LedgerError(
            f"evidence key {key!r} is written by the ledger itself; pass that value through "
            "Evidence's own fields or pick another key"
        )
    return key


def _float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None
