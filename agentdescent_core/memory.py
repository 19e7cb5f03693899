"""Memory of what was tried: every proposal with its verdict, kept across runs and sessions.

Why: a proposer that forgets proposes the same rejected edit again next
session and pays for it again.  An :class:`AttemptMemory` keeps one
:class:`Attempt` per distinct proposal — what it changed, the proposer's
rationale, the verdict's category and reason, the acceptance evidence
(P(improvement), rewards) and the per-test flips — so the next proposer can be
shown what was already tried for the tests it is asked about and why it failed.

The rules, in one place:

- **deduplicated by content**: an attempt's identity is the content hash of its
  diff (:func:`~agentdescent_core.artifacts.diff.diff_id_for`); the same edit
  proposed again updates the one entry (newest verdict, ``times`` + 1, tasks
  joined) instead of adding a line;
- **capped by size**: the JSON text is kept under ``max_bytes`` by dropping the
  oldest attempts first;
- **never a held-out test**: :meth:`AttemptMemory.for_tasks` and
  :meth:`Attempt.hiding` drop held-out test ids from the tasks and the flips
  and mask them in the texts, whatever split the attempt was recorded under;
- **never a secret**: texts are scrubbed by value (:mod:`agentdescent_core.redact`)
  when recorded, and an attempt refused for carrying a secret keeps its paths only.

Where it lives is the caller's choice: the pytest plugin keeps it in the state
dir (``attempts.json``) and, for scheduled sessions, beside ``sessions.json`` on
``refs/<prefix>sessions`` (:class:`~agentdescent_core.loop.schedule.SessionHistory`).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentdescent_core.artifacts.diff import diff_id_for
from agentdescent_core.redact import redact

if TYPE_CHECKING:
    from agentdescent_core.evidence import EvidenceCard, MergeReport
    from agentdescent_core.loop.result import RoundInfo

ATTEMPTS_FILE = "attempts.json"
#: The JSON text of a memory stays under this many bytes (oldest attempts go first).
DEFAULT_MAX_BYTES = 256_000
#: How many attempts a proposer is shown per call (the newest).
DEFAULT_SHOWN = 8
_FORMAT = 1
_TEXT_CHARS = 1_200
_HIDDEN = "[a held-out test]"


def content_key(ops: Mapping[str, str | None]) -> str:
    """The content hash of a diff's ops: two proposals of the same edit share it."""
    return diff_id_for("candidate", ops)


@dataclass(frozen=True)
class Attempt:
    """One proposal and its verdict, as a proposer is shown it.

    ``key`` is :func:`content_key` of the ops (or of the summary when the answer
    never became an edit); ``tasks`` the train tests it was proposed for;
    ``summary`` what it changed, in a few diff lines; ``category`` the verdict
    (a merge outcome such as ``below-threshold`` or ``committed``, or a refusal
    category) and ``reason`` why, with the measured numbers; ``flips`` the
    train tests whose verdict changed, as ``(nodeid, "fail->pass" | "pass->fail")``.
    """

    key: str
    tasks: tuple[str, ...]
    category: str
    reason: str
    summary: str = ""
    rationale: str = ""
    paths: tuple[str, ...] = ()
    p_improvement: float | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    flips: tuple[tuple[str, str], ...] = ()
    round: int = 0
    recorded_at: float = 0.0
    times: int = 1

    @property
    def accepted(self) -> bool:
        """Did this proposal become a version (what worked, worth reusing)?"""
        return self.category == "committed"

    def hiding(self, hidden: Iterable[str]) -> Attempt:
        """This attempt without any of the ``hidden`` test ids (held-out tests)."""
        ids = {h for h in hidden if h}
        if not ids:
            return self
        pattern = re.compile("|".join(re.escape(h) for h in sorted(ids, key=len, reverse=True)))

        def mask(text: str) -> str:
            return pattern.sub(_HIDDEN, text) if text else text

        return replace(
            self, tasks=tuple(t for t in self.tasks if t not in ids),
            flips=tuple(f for f in self.flips if f[0] not in ids),
            reason=mask(self.reason), summary=mask(self.summary),
            rationale=mask(self.rationale),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tasks"] = list(self.tasks)
        data["paths"] = list(self.paths)
        data["flips"] = [list(f) for f in self.flips]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        def number(name: str) -> float | None:
            value = data.get(name)
            return float(value) if isinstance(value, (int, float)) and \
                not isinstance(value, bool) else None

        return cls(
            key=str(data.get("key", "")), tasks=tuple(str(t) for t in data.get("tasks") or ()),
            category=str(data.get("category", "")), reason=str(data.get("reason", "")),
            summary=str(data.get("summary", "")), rationale=str(data.get("rationale", "")),
            paths=tuple(str(p) for p in data.get("paths") or ()),
            p_improvement=number("p_improvement"), reward_before=number("reward_before"),
            reward_after=number("reward_after"),
            flips=tuple((str(f[0]), str(f[1])) for f in data.get("flips") or ()
                        if isinstance(f, (list, tuple)) and len(f) == 2),
            round=int(data.get("round") or 0), recorded_at=float(data.get("recorded_at") or 0.0),
            times=max(1, int(data.get("times") or 1)),
        )


@dataclass(frozen=True)
class Verdict:
    """What the aggregator decided about one candidate, in the terms memory keeps.

    Built from a :class:`~agentdescent_core.evidence.MergeReport` by
    :func:`verdict_of` (a :class:`~agentdescent_core.loop.result.RoundInfo`
    carries one per merge decision); ``key`` is the candidate's
    :func:`content_key` ("" when no diff was judged), ``workers`` who proposed it;
    ``refused_by`` says who refused an answer before it became a candidate
    (``proposer``, ``strategy`` or ``guardrails``; "" for a merge decision) — an
    answer the proposer itself refused was never handed on, so no pending
    proposal is matched to it (:mod:`pytest_agentdescent.pending`).
    """

    category: str
    reason: str
    key: str = ""
    workers: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    rationale: str = ""
    p_improvement: float | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    flips: tuple[tuple[str, str], ...] = field(default=())
    refused_by: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        values = dict(data)
        for name in ("workers", "tasks", "paths"):
            values[name] = tuple(values.get(name) or ())
        values["flips"] = tuple(tuple(f) for f in values.get("flips") or ())
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def verdict_of(report: MergeReport, cards: Sequence[EvidenceCard] = ()) -> Verdict:
    """The :class:`Verdict` of one merge decision (who proposed it, what it changed, flips).

    ``cards`` are the round's evidence cards: the tasks of those the decision
    was about (same content, or the same worker) become the verdict's tasks.
    """
    diff = report.diff
    workers: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    key = content_key(diff.ops) if diff is not None else ""
    if diff is not None and diff.author:
        workers = tuple(w.strip() for w in diff.author.split(",") if w.strip())
        tasks = tuple(dict.fromkeys(
            t for c in cards if content_key(c.diff.ops) == key or c.worker in workers
            for t in c.tasks))
    elif isinstance(report.extra.get("worker"), str):  # refused before it became a card
        workers = (str(report.extra["worker"]),)
        task = report.extra.get("task")
        tasks = (str(task),) if isinstance(task, str) else ()
    return Verdict(
        category=report.category, reason=report.reason, key=key, workers=workers, tasks=tasks,
        paths=tuple(sorted(diff.ops)) if diff is not None else (),
        rationale=diff.rationale if diff is not None else "",
        p_improvement=report.p_improvement, reward_before=report.reward_before,
        reward_after=report.reward_after,
        flips=tuple((f.nodeid, str(f.kind)) for f in report.flips),
        refused_by=str(report.extra.get("refused_by") or "") if diff is None else "",
    )


class AttemptMemory:
    """The attempts of past runs and this one: record, look up per test, cap, save, render.

    Thread-safe: workers read it while the controller records a round's verdicts.
    """

    def __init__(self, attempts: Iterable[Attempt] = (), *,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive int (bytes of the memory's JSON), "
                             f"got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._attempts: dict[str, Attempt] = {}
        for attempt in attempts:
            self._add(attempt)

    def __len__(self) -> int:
        with self._lock:
            return len(self._attempts)

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every attempt kept, oldest first."""
        with self._lock:
            return tuple(self._attempts.values())

    def record(self, attempt: Attempt) -> Attempt:
        """Keep ``attempt`` (scrubbed of secrets); the same content updates its entry."""
        clean = _scrubbed(attempt)
        if not clean.key:
            clean = replace(clean, key=content_key({"summary": clean.summary or clean.reason}))
        if not clean.recorded_at:
            clean = replace(clean, recorded_at=time.time())
        with self._lock:
            return self._add(clean)

    def merge(self, other: AttemptMemory | Iterable[Attempt]) -> None:
        """Take every attempt of ``other`` (the same content joins one entry)."""
        items = other.attempts if isinstance(other, AttemptMemory) else tuple(other)
        with self._lock:
            for attempt in sorted(items, key=lambda a: a.recorded_at):
                self._add(attempt)

    def _add(self, attempt: Attempt) -> Attempt:
        old = self._attempts.pop(attempt.key, None)
        if old is not None:
            newer = attempt if attempt.recorded_at >= old.recorded_at else old
            attempt = replace(newer, tasks=tuple(dict.fromkeys((*old.tasks, *attempt.tasks))),
                              times=old.times + attempt.times)
        self._attempts[attempt.key] = attempt  # re-inserted: the newest sits last
        return attempt

    def observe_round(self, info: RoundInfo, *, hidden: Iterable[str] = ()) -> int:
        """Record a round's verdicts (``on_round=memory.observe_round`` for ``evolve()``).

        Each judged candidate becomes an attempt for the tasks that motivated it
        (the train tasks its proposer was shown); a lost compare-and-swap is no
        verdict yet (its cards are re-filed).  Only flips of those tasks are kept:
        acceptance measures held-out tasks too, and they are never shown.  Any
        ``hidden`` test id is dropped as well.  Returns how many were kept.
        """
        hide = tuple(hidden)
        kept = 0
        for verdict in info.verdicts:
            if verdict.category == "cas-conflict":
                continue
            self.record(Attempt(
                key=verdict.key, tasks=verdict.tasks, category=verdict.category,
                reason=verdict.reason, rationale=verdict.rationale, paths=verdict.paths,
                summary=("changed " + ", ".join(verdict.paths)) if verdict.paths else "",
                p_improvement=verdict.p_improvement, reward_before=verdict.reward_before,
                reward_after=verdict.reward_after, round=info.round,
                flips=tuple(f for f in verdict.flips if f[0] in verdict.tasks),
            ).hiding(hide))
            kept += 1
        return kept

    def for_tasks(self, tasks: Iterable[str], *, hidden: Iterable[str] = (),
                  limit: int = DEFAULT_SHOWN) -> tuple[Attempt, ...]:
        """The newest ``limit`` attempts made for any of ``tasks``, oldest first, never
        naming a ``hidden`` (held-out) test."""
        wanted, hide = set(tasks), tuple(hidden)
        with self._lock:
            found = [a for a in self._attempts.values() if wanted.intersection(a.tasks)]
        return tuple(a.hiding(hide) for a in found[-limit:]) if limit > 0 else ()

    # ------------------------------------------------------------ storage

    def to_text(self) -> str:
        """The memory as JSON text, within ``max_bytes`` (the oldest attempts dropped)."""
        with self._lock:
            kept = list(self._attempts.values())
        while True:
            text = json.dumps({"format": _FORMAT, "attempts": [a.to_json() for a in kept]},
                              indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            if len(text.encode("utf-8")) <= self.max_bytes or not kept:
                return text
            kept = kept[max(1, len(kept) // 10):]

    @classmethod
    def from_text(cls, text: str, *, origin: str, max_bytes: int = DEFAULT_MAX_BYTES
                  ) -> AttemptMemory:
        """Read :meth:`to_text` output; ValueError naming ``origin`` when it is not one."""
        try:
            data = json.loads(text)
            items = data["attempts"]
            if not isinstance(items, list):
                raise TypeError("'attempts' is not a list")
            attempts = [Attempt.from_json(item) for item in items if isinstance(item, Mapping)]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{origin} is not a readable memory of attempts ({exc}); delete "
                             "it to start with an empty memory") from None
        return cls(attempts, max_bytes=max_bytes)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
             ) -> AttemptMemory:
        """The memory saved at ``path``; empty when there is no such file."""
        file = Path(path)
        if not file.is_file():
            return cls(max_bytes=max_bytes)
        return cls.from_text(file.read_text(encoding="utf-8"), origin=str(file),
                             max_bytes=max_bytes)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the memory to ``path`` atomically (a reader never sees half a file)."""
        file = Path(path)
        partial = file.with_name(file.name + ".partial")
        partial.write_text(self.to_text(), encoding="utf-8")
        os.replace(partial, file)


def render_attempts(attempts: Sequence[Attempt], *, chars: int = 600) -> str:
    """The attempts as prompt text: what each changed, its verdict and the evidence."""
    if not attempts:
        return "(nothing recorded yet)"
    blocks: list[str] = []
    for a in attempts:
        head = f"- {a.category}" + (f" ({a.times} times)" if a.times > 1 else "")
        if a.tasks:
            head += " for " + ", ".join(a.tasks[:4]) + (" ..." if len(a.tasks) > 4 else "")
        lines = [head]
        if a.rationale:
            lines.append(f"  rationale: {_clip(a.rationale, chars)}")
        if a.summary:
            lines.extend(f"  {line}" for line in _clip(a.summary, chars).splitlines())
        lines.append(f"  verdict: {_clip(a.reason, chars)}")
        if a.p_improvement is not None:
            lines.append(f"  evidence: P(improvement) {a.p_improvement:.2f}, reward "
                         f"{_num(a.reward_before)} -> {_num(a.reward_after)}")
        if a.flips:
            lines.append("  flips: " + ", ".join(f"{n} {k}" for n, k in a.flips[:6]))
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _scrubbed(attempt: Attempt) -> Attempt:
    summary = attempt.summary
    if attempt.category == "secret":  # what it wrote is the secret: keep where, not what
        summary = "an edit of " + (", ".join(attempt.paths) or "the artifact") + \
                  " (content withheld: it contained a secret)"
    return replace(attempt, summary=_clip(redact(summary), _TEXT_CHARS),
                   rationale=_clip(redact(attempt.rationale), _TEXT_CHARS),
                   reason=_clip(redact(attempt.reason), _TEXT_CHARS))


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def describe_edit(files: Mapping[str, str], ops: Mapping[str, str | None], *,
                  max_lines: int = 12) -> str:
    """What an edit changes against ``files``, in a few diff lines (an attempt's summary)."""
    import difflib

    lines: list[str] = []
    for path, text in sorted(ops.items()):
        if text is None:
            lines.append(f"deleted {path}")
            continue
        old = files.get(path)
        if old is None:
            lines.append(f"created {path}: {_clip(' '.join(text.split()), 200)}")
            continue
        changed = [line for line in difflib.unified_diff(old.splitlines(), text.splitlines(),
                                                         lineterm="", n=0)
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        lines.append(f"edited {path}:")
        lines.extend(f"  {line[:160]}" for line in changed[:max_lines])
        if len(changed) > max_lines:
            lines.append(f"  ... {len(changed) - max_lines} more changed lines")
    return "\n".join(lines)
