"""The evaluation cache: a test's result for a candidate is paid for once, across runs.

A record is keyed by (artifact hash, frozen hash, nodeid, repeat index).  The
artifact hash is the content hash of the candidate's artifact files; the frozen
hash stands for everything else that decides the result — the frozen tree of
the commit and the evaluation settings (the verifier folds the backend,
network, limits and pytest arguments into it) — so a cached result is never
reused where it might have come out differently.

Besides per-test records the cache keeps *verdicts* about a whole candidate
(it changed a frozen file, its tests did not collect), keyed by (artifact
hash, frozen hash): a candidate disqualified once is not run again.

One SQLite file in the state directory, in WAL mode so readers do not block
the writer; one connection per instance, serialised by a lock, so an instance
may be shared by every thread of a run; several processes may share the file
(writers wait for each other up to ``timeout`` seconds).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentdescent_core.errors import AgentDescentError
from agentdescent_core.evaluation.records import TestRecord
from agentdescent_core.sqlite_file import SqliteFile

__all__ = ["VERDICT_KINDS", "EvalCache", "EvalCacheError", "Verdict"]

#: What a verdict can say about a whole candidate.
VERDICT_KINDS: tuple[str, ...] = ("frozen-violation", "collection-error", "tamper")

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    artifact_hash TEXT NOT NULL,
    frozen_hash TEXT NOT NULL,
    nodeid TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    record TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (artifact_hash, frozen_hash, nodeid, repeat)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdicts (
    artifact_hash TEXT NOT NULL,
    frozen_hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    code TEXT NOT NULL,
    message TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (artifact_hash, frozen_hash)
) WITHOUT ROWID;
"""


class EvalCacheError(AgentDescentError):
    """The cache file cannot be used (not a database, wrong schema, unwritable)."""


@dataclass(frozen=True)
class Verdict:
    """A judgement about a whole candidate, whatever its tests said.

    ``kind`` is ``frozen-violation`` (the run changed a frozen file) or
    ``collection-error`` (the candidate's tests could not even be collected);
    ``code`` the precise rule; ``message`` what to tell the user.
    """

    kind: str
    message: str
    code: str = ""

    def __post_init__(self) -> None:
        if self.kind not in VERDICT_KINDS:
            raise ValueError(f"unknown verdict kind {self.kind!r}; expected one of {VERDICT_KINDS}")


class EvalCache(SqliteFile):
    """Persistent results of evaluated tests (see the module docstring)."""

    label = "the eval cache"
    error = EvalCacheError
    synchronous = "NORMAL"  # a cache may lose its last writes in a power cut
    schema_version = _SCHEMA_VERSION
    version_advice = "delete the file (it is only a cache) and run again"
    open_advice = "delete the file (it is only a cache) or point the state directory elsewhere"

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self._open(path, _SCHEMA, timeout)

    # ---------------------------------------------------------------- records

    def get(
        self, artifact_hash: str, frozen_hash: str, nodeid: str, repeat: int
    ) -> TestRecord | None:
        found = self.get_many(artifact_hash, frozen_hash, [(nodeid, repeat)])
        return found.get((nodeid, repeat))

    def get_many(
        self, artifact_hash: str, frozen_hash: str, keys: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], TestRecord]:
        """The cached records among ``keys`` ((nodeid, repeat) pairs)."""
        wanted = set(keys)
        if not wanted:
            return {}
        nodeids = sorted({nodeid for nodeid, _ in wanted})
        found: dict[tuple[str, int], TestRecord] = {}
        for start in range(0, len(nodeids), 500):
            chunk = nodeids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._query(
                f"SELECT nodeid, repeat, record FROM records WHERE artifact_hash = ? "
                f"AND frozen_hash = ? AND nodeid IN ({marks})",
                (artifact_hash, frozen_hash, *chunk),
            )
            for nodeid, repeat, text in rows:
                if (nodeid, repeat) in wanted:
                    found[(nodeid, repeat)] = TestRecord.from_mapping(json.loads(text))
        return found

    def records(self, artifact_hash: str, frozen_hash: str, nodeid: str) -> list[TestRecord]:
        """Every cached repeat of one test for one candidate, by repeat index."""
        rows = self._query(
            "SELECT record FROM records WHERE artifact_hash = ? AND frozen_hash = ? "
            "AND nodeid = ? ORDER BY repeat",
            (artifact_hash, frozen_hash, nodeid),
        )
        return [TestRecord.from_mapping(json.loads(text)) for (text,) in rows]

    def put(self, artifact_hash: str, frozen_hash: str, record: TestRecord) -> None:
        self.put_many(artifact_hash, frozen_hash, [record])

    def put_many(self, artifact_hash: str, frozen_hash: str, records: Iterable[TestRecord]) -> None:
        now = time.time()
        rows = [(artifact_hash, frozen_hash, r.nodeid, r.repeat, r.to_json(), now) for r in records]
        if rows:
            self._write(
                "INSERT OR REPLACE INTO records "
                "(artifact_hash, frozen_hash, nodeid, repeat, record, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    # ---------------------------------------------------------------- verdicts

    def verdict(self, artifact_hash: str, frozen_hash: str) -> Verdict | None:
        rows = self._query(
            "SELECT kind, code, message FROM verdicts WHERE artifact_hash = ? AND frozen_hash = ?",
            (artifact_hash, frozen_hash),
        )
        if not rows:
            return None
        kind, code, message = rows[0]
        return Verdict(kind=kind, code=code, message=message)

    def put_verdict(self, artifact_hash: str, frozen_hash: str, verdict: Verdict) -> None:
        self._write(
            "INSERT OR REPLACE INTO verdicts "
            "(artifact_hash, frozen_hash, kind, code, message, created) VALUES (?, ?, ?, ?, ?, ?)",
            [(artifact_hash, frozen_hash, verdict.kind, verdict.code, verdict.message,
              time.time())],
        )

    # ---------------------------------------------------------------- housekeeping

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM records", ())[0][0])

    def _write(self, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        with self._transaction() as db:
            db.executemany(sql, rows)
