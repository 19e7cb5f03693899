"""Kill switches and the decision log: how an operator stops a run, and what it decided.

A scheduled or long evolution needs an off switch that does not involve finding
and killing a process: :class:`FileKillSwitch` (create ``.agentdescent/STOP``),
:class:`EnvKillSwitch` (set ``AGENTDESCENT_STOP``) or both through
:class:`AnyKillSwitch`.  The loops check a switch at their boundaries (before
each session, before each generation), so a run stops cleanly between two
units of work, never inside one.

:class:`DecisionLog` is the audit trail of those loops: one row per session
(``kind="session"``), loop generation (``"loop"``) or merge (``"merge"``).
Record ids are deterministic — given by the caller (the kernel uses
``{run_id}:generation:{n}``) or derived from the record's content — so a loop
replayed after a crash re-records the same ids and the log does not grow.
The log is a SQLite table; it may live in the run store's file or its own.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentdescent_core.errors import DecisionLogError as DecisionLogError
from agentdescent_core.sqlite_file import SqliteFile

#: What a decision record can be about.
DECISION_KINDS: tuple[str, ...] = ("session", "loop", "merge")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    artifact_id TEXT NOT NULL,
    accepted INTEGER NOT NULL,
    category TEXT NOT NULL,
    detail TEXT NOT NULL,
    evidence TEXT NOT NULL,
    cost REAL NOT NULL,
    created_at REAL NOT NULL
);
"""


@runtime_checkable
class KillSwitch(Protocol):
    """Anything that can tell a loop to stop at its next boundary, and why."""

    def engaged(self) -> bool: ...

    def reason(self) -> str: ...


class FileKillSwitch:
    """Engaged while a file exists (``.agentdescent/STOP`` for ``pytest --evolve``).

    The reason is the file's first non-empty line, so ``echo "release freeze" >
    .agentdescent/STOP`` explains itself in the report; an empty file gives a
    reason naming the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def engaged(self) -> bool:
        return self.path.exists()

    def reason(self) -> str:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            if line.strip():
                return line.strip()
        return f"STOP file {self.path} present"

    def __repr__(self) -> str:
        return f"FileKillSwitch({str(self.path)!r})"


class EnvKillSwitch:
    """Engaged while an environment variable is set to something other than empty or ``0``."""

    def __init__(self, variable: str = "AGENTDESCENT_STOP") -> None:
        self.variable = variable

    def engaged(self) -> bool:
        return os.environ.get(self.variable, "").strip() not in ("", "0")

    def reason(self) -> str:
        value = os.environ.get(self.variable, "").strip()
        return f"environment variable {self.variable} is set ({value!r})"

    def __repr__(self) -> str:
        return f"EnvKillSwitch({self.variable!r})"


class AnyKillSwitch:
    """Engaged when any of its switches is; the reason is the first engaged one's."""

    def __init__(self, *switches: KillSwitch) -> None:
        self.switches = switches

    def engaged(self) -> bool:
        return any(switch.engaged() for switch in self.switches)

    def reason(self) -> str:
        for switch in self.switches:
            if switch.engaged():
                return switch.reason()
        return "no kill switch engaged"

    def __repr__(self) -> str:
        return f"AnyKillSwitch{self.switches!r}"


@dataclass(frozen=True)
class DecisionRecord:
    """One decision: what it was about, whether it was accepted, why, and at what cost."""

    record_id: str
    kind: str
    artifact_id: str
    accepted: bool
    category: str
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)
    cost: float = 0.0
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "record_id": self.record_id, "kind": self.kind, "artifact_id": self.artifact_id,
            "accepted": self.accepted, "category": self.category, "detail": self.detail,
            "evidence": self.evidence, "cost": self.cost, "created_at": self.created_at,
        }


def _json(value: object) -> str:
    # Evidence is for humans and reports: anything unusual is kept as its str().
    return json.dumps(value, sort_keys=True, default=str)


class DecisionLog(SqliteFile):
    """An append-only, replay-safe log of decisions in a SQLite file (see the module docstring)."""

    label = "the decision log"
    error = DecisionLogError

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self._open(path, _SCHEMA, timeout)

    def record(self, *, kind: str, artifact_id: str, accepted: bool, category: str,
               detail: str = "", evidence: Mapping[str, Any] | None = None, cost: float = 0.0,
               record_id: str | None = None) -> DecisionRecord:
        """Store one decision; when its id is already there, return the stored one unchanged.

        Without ``record_id`` the id is a hash of the content, so recording the
        same decision twice (a replay) is a no-op too.
        """
        if kind not in DECISION_KINDS:
            raise DecisionLogError(
                f"unknown decision kind {kind!r}; expected one of {DECISION_KINDS}")
        cost_value = float(cost)
        if not math.isfinite(cost_value):
            raise DecisionLogError(f"the cost of a decision must be finite, got {cost!r}")
        evidence_text = _json(dict(evidence or {}))
        if record_id is None:
            content = _json([kind, str(artifact_id), bool(accepted), str(category), str(detail),
                             json.loads(evidence_text), cost_value])
            record_id = f"{kind}:{hashlib.sha256(content.encode()).hexdigest()[:24]}"
        with self._transaction() as db:
            db.execute(
                "INSERT INTO decisions (record_id, kind, artifact_id, accepted, category, "
                "detail, evidence, cost, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (record_id) DO NOTHING",
                (record_id, kind, str(artifact_id), int(bool(accepted)), str(category),
                 str(detail), evidence_text, cost_value, time.time()),
            )
            row = db.execute(
                "SELECT record_id, kind, artifact_id, accepted, category, detail, "
                "evidence, cost, created_at FROM decisions WHERE record_id = ?",
                (record_id,),
            ).fetchone()
        return _record(row)

    def records(self, *, kind: str | None = None) -> list[DecisionRecord]:
        """Every record (of one kind), oldest first."""
        sql = ("SELECT record_id, kind, artifact_id, accepted, category, detail, evidence, cost, "
               "created_at FROM decisions")
        params: tuple[object, ...] = ()
        if kind is not None:
            sql += " WHERE kind = ?"
            params = (kind,)
        rows = self._query(sql + " ORDER BY seq", params)
        return [_record(row) for row in rows]


def _record(row: tuple[Any, ...]) -> DecisionRecord:
    return DecisionRecord(
        record_id=row[0], kind=row[1], artifact_id=row[2], accepted=bool(row[3]),
        category=row[4], detail=row[5], evidence=json.loads(row[6]), cost=float(row[7]),
        created_at=float(row[8]),
    )
