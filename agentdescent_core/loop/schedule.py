"""Scheduled sessions: is another evolution justified, and where the answer's history lives.

A scheduled GitHub Action runs one ``pytest --evolve`` *session* per job, on a
runner that starts with an empty disk.  Paying a model every night for a
skill folder that stopped improving weeks ago is waste, so before evolving a
session looks back at the sessions before it:

- with no ``patience`` configured, or no history yet, it evolves;
- when a marked test appeared that no earlier session knew, it evolves
  (``tests-added``): there is something new to learn;
- when the reward has degraded (``degraded``), it evolves: the world moved (a
  model update, a changed dependency) and the skill must follow.  Degradation
  is seed 003's trigger: the mean of the last three measurements of the
  version in use fell more than ``degradation`` (a fraction, 0.15 by default)
  below the best of its first three, and at least ``min_sessions`` (3)
  measurements exist.  The measurements are the final reward of the last
  session that improved the skill (the version's first score) and the
  baseline of every session since, this one included; like the seed, an
  improvement starts the series again, since a new version is a new
  population to compare against;
- otherwise the history is replayed through :func:`run_controller` with the
  same ``patience``: when the controller would stop on ``patience`` — the last
  sessions did not beat the best — this session only measures the baseline
  (``stagnant``: no model call), else it evolves.

The history is a small JSON file committed on the ref ``refs/<prefix>sessions``
of the user's repository (``refs/agentdescent/sessions`` by default), one
commit per session, moved by compare-and-swap like the ledger branches.  Git
was chosen over a cache step because the Action already fetches and pushes the
ledger branches: the history travels with them, needs no service of ours and
no cache key, cannot be evicted, and is readable with ``git show``.  It is
outside ``refs/heads``, so it never shows up as a branch.  The memory of what
was tried (:mod:`agentdescent_core.memory`) is a second file in the same tree,
``attempts.json``, written in the same compare-and-swap commit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentdescent_core.errors import LedgerError
from agentdescent_core.ledger.plumbing import GitRepo, RefUpdate, RefUpdateFailed
from agentdescent_core.loop.controller import (
    ControllerConfig,
    SessionOutcome,
    _finite_or_none as _reward,
    run_controller,
)
from agentdescent_core.memory import ATTEMPTS_FILE, DEFAULT_MAX_BYTES, AttemptMemory

HISTORY_FILE = "sessions.json"
MAX_ENTRIES = 200  # the history is trimmed to the newest sessions; the decision reads a few
_FORMAT = 1


def sessions_ref(prefix: str) -> str:
    """``refs/<prefix>sessions``: ``refs/agentdescent/sessions`` for the default prefix."""
    return f"refs/{prefix}sessions"


@dataclass(frozen=True)
class SessionEntry:
    """One finished session: what it started from and what it reached."""

    started_at: float
    base: str
    baseline: float | None
    final: float | None
    evolved: bool
    decision: str
    reason: str
    tasks: tuple[str, ...] = ()
    stop_reason: str | None = None
    error: str | None = None
    accepted: int = 0

    @property
    def improved(self) -> bool:
        """Did the session end above where it started (a committed, measured gain)?"""
        return (self.error is None and self.accepted > 0 and self.baseline is not None
                and self.final is not None and self.final > self.baseline)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tasks"] = list(self.tasks)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionEntry:
        return cls(
            started_at=float(data.get("started_at", 0.0)),
            base=str(data.get("base", "")),
            baseline=_reward(data.get("baseline")),
            final=_reward(data.get("final")),
            evolved=bool(data.get("evolved", True)),
            decision=str(data.get("decision", "evolve")),
            reason=str(data.get("reason", "")),
            tasks=tuple(str(t) for t in data.get("tasks") or ()),
            stop_reason=None if data.get("stop_reason") is None else str(data["stop_reason"]),
            error=None if data.get("error") is None else str(data["error"]),
            accepted=int(data.get("accepted", 0)),
        )


@dataclass(frozen=True)
class SessionDecision:
    """Whether this session evolves, with a fixed ``code`` and a sentence for people."""

    evolve: bool
    code: str  # always | first-session | tests-added | degraded | improving | stagnant
    reason: str
    best: float | None = None
    sessions: int = 0
    new_tests: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["new_tests"] = list(self.new_tests)
        return data


def decide_session(
    history: Sequence[SessionEntry],
    *,
    baseline: float | None,
    tasks: Sequence[str],
    patience: int | None,
    degradation: float = 0.15,
    min_sessions: int = 3,
) -> SessionDecision:
    """The rule of the module docstring; ``history`` is oldest first."""
    if patience is None:
        return SessionDecision(True, "always", "evolve_session_patience is not set, so every "
                                               "session evolves")
    if not history:
        return SessionDecision(True, "first-session", "no earlier session is recorded")
    best = _best(history)
    known = {t for entry in history for t in entry.tasks}
    new = tuple(t for t in tasks if t not in known)
    if new:
        return SessionDecision(True, "tests-added",
                               f"{len(new)} marked test(s) no earlier session knew: "
                               + ", ".join(new[:5]) + (" …" if len(new) > 5 else ""),
                               best=best, sessions=len(history), new_tests=new)
    drop = degradation_of(history, baseline, min_sessions=min_sessions)
    if drop is not None and drop.relative > degradation:
        return SessionDecision(True, "degraded",
                               f"the mean of the last {len(drop.recent)} rewards "
                               f"{drop.recent_mean:.3f} is {drop.relative:.0%} below the best "
                               f"{drop.reference:.3f} of the first {len(drop.first)} "
                               f"(threshold {degradation:.0%})",
                               best=best, sessions=len(history))
    # Replay the informative sessions through the controller (no patience, so it
    # never stops early) and read back which of them beat the best before them.
    recorded = [e for e in history if e.error is None and _peak(e) is not None]
    if not recorded:
        return SessionDecision(True, "first-session", "no earlier session measured a reward",
                               sessions=len(history))

    def replay(index: int, seed: int) -> SessionOutcome:
        return SessionOutcome(reward=_peak(recorded[index]), calls=0)

    beat_best = [s.improved for s in run_controller(
        replay, ControllerConfig(max_sessions=len(recorded))).sessions]
    # a session also counts when its own evolution gained, even as the first one
    flags = [b or e.improved for b, e in zip(beat_best, recorded, strict=False)]
    idle = len(flags) - (max(i for i, f in enumerate(flags) if f) + 1) if any(flags) \
        else len(flags)
    if idle >= patience:
        return SessionDecision(False, "stagnant",
                               f"the last {idle} session(s) did not beat the best reward "
                               f"{_fmt(best)} (patience {patience}) and the baseline has not "
                               "degraded; measuring the baseline only",
                               best=best, sessions=len(history))
    return SessionDecision(True, "improving",
                           f"{idle} session(s) without improvement so far, fewer than the "
                           f"patience of {patience}", best=best, sessions=len(history))


WINDOW = 3  # seed 003: the best of the first three against the mean of the last three


@dataclass(frozen=True)
class Degradation:
    """How far the version in use fell: the figures the ``degraded`` decision quotes."""

    first: tuple[float, ...]
    recent: tuple[float, ...]

    @property
    def reference(self) -> float:
        return max(self.first)

    @property
    def recent_mean(self) -> float:
        return sum(self.recent) / len(self.recent)

    @property
    def relative(self) -> float:
        """The drop as a fraction of the reference (negative when the reward rose)."""
        return (self.reference - self.recent_mean) / self.reference


def degradation_of(history: Sequence[SessionEntry], baseline: float | None, *,
                   min_sessions: int = 3) -> Degradation | None:
    """The drop of the version in use, or None while it cannot be judged yet.

    None when fewer than ``min_sessions`` measurements of the version exist,
    when this session measured no baseline, or when the reference is not
    positive (a relative drop from zero means nothing).
    """
    if baseline is None:
        return None
    series: list[float] = []
    for entry in history:
        if entry.error is not None:
            continue
        if entry.improved and entry.final is not None:
            series = [entry.final]  # a new version: its series starts at its measured reward
        elif entry.baseline is not None:
            series.append(entry.baseline)
    series.append(baseline)
    if len(series) < max(1, min_sessions):
        return None
    found = Degradation(first=tuple(series[:WINDOW]), recent=tuple(series[-WINDOW:]))
    return found if found.reference > 0 else None


class SessionHistory:
    """The sessions recorded on ``refs/<prefix>sessions`` of the repository at ``repo_path``."""

    def __init__(self, repo_path: str | os.PathLike[str], *, prefix: str = "agentdescent/"
                 ) -> None:
        self.ref = sessions_ref(prefix)
        self._git = GitRepo(repo_path, None)

    def close(self) -> None:
        self._git.close()

    def __enter__(self) -> SessionHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def entries(self) -> list[SessionEntry]:
        """Recorded sessions, oldest first ([] when the ref does not exist)."""
        head = self._git.ref_value(self.ref)
        return [] if head is None else self._read(head)

    def append(self, entry: SessionEntry, *, attempts: int = 5,
               memory: AttemptMemory | None = None) -> str:
        """Record ``entry`` as a new commit on the ref (compare-and-swap); return its id.

        ``memory``, the attempts of this session, is merged into the memory the
        ref already holds (:data:`~agentdescent_core.memory.ATTEMPTS_FILE`, beside
        the history) in the same commit, so a concurrent session's attempts are
        kept too; without it the ref's memory is carried over unchanged.
        """
        for _ in range(attempts):
            head = self._git.ref_value(self.ref)
            entries = ([] if head is None else self._read(head)) + [entry]
            text = json.dumps({"format": _FORMAT,
                               "sessions": [e.to_json() for e in entries[-MAX_ENTRIES:]]},
                              indent=1, sort_keys=True) + "\n"
            ops: dict[str, str | None] = {HISTORY_FILE: text}
            if memory is not None:
                known = self._memory(head, memory.max_bytes)
                known.merge(memory)
                ops[ATTEMPTS_FILE] = known.to_text()
            tree = self._git.build_tree(head, ops, self._git.write_blobs(ops))
            message = (f"agentdescent: session {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} "
                       f"{entry.decision} ({entry.reason[:60]})\n")
            sha = self._git.commit_tree(tree, [head] if head else [], message)
            try:
                self._git.update_refs([RefUpdate(self.ref, sha, head)], "agentdescent: session")
            except RefUpdateFailed as exc:
                if exc.kind == "race":
                    continue
                raise LedgerError(f"cannot record the session on {self.ref}: {exc}") from None
            return sha
        raise LedgerError(f"{self.ref} kept moving while recording the session; try again")

    def memory(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> AttemptMemory:
        """The attempts recorded beside the history (empty when there are none yet)."""
        return self._memory(self._git.ref_value(self.ref), max_bytes)

    def _memory(self, commit: str | None, max_bytes: int) -> AttemptMemory:
        if commit is None:
            return AttemptMemory(max_bytes=max_bytes)
        try:
            blob = self._git.commit(commit).tree / ATTEMPTS_FILE
        except KeyError:
            return AttemptMemory(max_bytes=max_bytes)
        origin = f"{ATTEMPTS_FILE} on {self.ref} ({commit[:12]})"
        try:
            text = blob.data_stream.read().decode("utf-8")
            return AttemptMemory.from_text(text, origin=origin, max_bytes=max_bytes)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LedgerError(f"{exc}; or remove the file from {self.ref}") from None

    def _read(self, commit: str) -> list[SessionEntry]:
        try:
            blob = self._git.commit(commit).tree / HISTORY_FILE
            data = json.loads(blob.data_stream.read().decode("utf-8"))
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise LedgerError(
                f"{self.ref} ({commit[:12]}) does not hold a readable {HISTORY_FILE} ({exc}); "
                f"delete the ref (git update-ref -d {self.ref}) to start a new history"
            ) from None
        return [SessionEntry.from_json(item) for item in data.get("sessions") or []
                if isinstance(item, Mapping)]


def _peak(entry: SessionEntry) -> float | None:
    values = [v for v in (entry.baseline, entry.final) if v is not None]
    return max(values) if values else None


def _best(history: Sequence[SessionEntry]) -> float | None:
    values = [p for p in (_peak(e) for e in history if e.error is None) if p is not None]
    return max(values) if values else None


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
