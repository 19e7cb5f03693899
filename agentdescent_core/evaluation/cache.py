"""The evaluation cache: a test's result for a candidate is paid for once, across runs.

A record is keyed by (artifact hash, frozen hash, nodeid, repeat index).  The
artifact hash is the content hash of the candidate's artifact files; the frozen
hash stands for everything else that decides the result — the frozen tree of
the commit and the evaluation settings (the verifier folds the backend,
network, limits and pytest arguments into it) — so a cached result is never
reused where it might have come out differently.

Besides per-test records the cache keeps *verdicts* about a whole candidate
(it changed a frozen file, it tampered with the test process, its tests did
not collect), keyed by (artifact hash, frozen hash): a candidate disqualified
once is not run again.

Only the controller writes the cache, and every row carries a MAC
(HMAC-SHA256 over its key columns and its payload) under a key the child never
sees: a candidate's script that rewrites a row (``reward`` 1.0, or deletes a
verdict and forges a clean one) produces a row that does not verify; such rows
are treated as missing — the candidate is run again — and counted in
:attr:`EvalCache.rejected`.  The key is the caller's: by default a key file
next to the database, mode 0600, in a state directory that bwrap and docker
do not show to the child, so results are reused across runs; or a fresh
:func:`run_key` that lives only in memory (the cache then lasts one run).
The plugin uses the key file under ``local`` too: a local child could read
it, but under ``local`` any write of the state directory by a candidate is
caught by :mod:`agentdescent_core.sandbox.guard`, restored, and stops the run.

One SQLite file in the state directory, in WAL mode so readers do not block
the writer; one connection per instance, serialised by a lock, so an instance
may be shared by every thread of a run; several processes may share the file
(writers wait for each other up to ``timeout`` seconds).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentdescent_core.errors import AgentDescentError
from agentdescent_core.evaluation.records import TestRecord, mac as sign, mac_matches
from agentdescent_core.sqlite_file import SqliteFile

#: The cache's file name inside the plugin's state directory, and the suffix of its
#: key file beside it (what a CI cache step must keep for results to carry over).
EVAL_CACHE_FILE = "eval-cache.sqlite3"
KEY_FILE_SUFFIX = ".key"

#: What a verdict can say about a whole candidate.
VERDICT_KINDS: tuple[str, ...] = ("frozen-violation", "tamper", "collection-error")

_SCHEMA_VERSION = 2  # 2: every row carries a MAC
_KEY_BYTES = 32
_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    artifact_hash TEXT NOT NULL,
    frozen_hash TEXT NOT NULL,
    nodeid TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    record TEXT NOT NULL,
    mac TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (artifact_hash, frozen_hash, nodeid, repeat)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdicts (
    artifact_hash TEXT NOT NULL,
    frozen_hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    code TEXT NOT NULL,
    message TEXT NOT NULL,
    mac TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (artifact_hash, frozen_hash)
) WITHOUT ROWID;
"""


class EvalCacheError(AgentDescentError):
    """The cache file cannot be used (not a database, wrong schema, unwritable)."""


def _body(fields: tuple[object, ...]) -> bytes:
    """What a row's MAC covers: its key columns and payload, as one JSON text."""
    return json.dumps([str(f) for f in fields], ensure_ascii=False).encode(
        "utf-8", "surrogatepass")


def run_key() -> bytes:
    """A fresh random key that lives only in this process (the ``local`` backend's choice)."""
    return secrets.token_bytes(_KEY_BYTES)


def key_file(path: str | os.PathLike[str]) -> bytes:
    """The key kept next to the database ``path`` (``<path>.key``, mode 0600), made if missing."""
    where = Path(f"{os.fspath(path)}{KEY_FILE_SUFFIX}")
    try:
        data = where.read_bytes()
        if len(data) >= _KEY_BYTES:
            return data
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise EvalCacheError(f"cannot read the eval cache's key {where}: {exc}; delete it "
                             "(and the cache) and run again") from exc
    key = run_key()
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        os.chmod(where, 0o600)
    except OSError as exc:
        raise EvalCacheError(f"cannot write the eval cache's key {where}: {exc}; point the "
                             "state directory somewhere writable") from exc
    return key


@dataclass(frozen=True)
class Verdict:
    """A judgement about a whole candidate, whatever its tests said.

    ``kind`` is ``frozen-violation`` (the run changed a frozen file),
    ``tamper`` (its code reached into the test process, or past the workspace)
    or ``collection-error`` (the candidate's tests could not even be collected);
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

    def __init__(self, path: str | os.PathLike[str], *, key: bytes | None = None,
                 timeout: float = 30.0) -> None:
        """``key`` signs and checks every row (default: :func:`key_file` next to ``path``)."""
        if key is not None and len(key) < 16:
            raise ValueError("the eval cache's key must have at least 16 bytes; use run_key()")
        self._key = key_file(path) if key is None else bytes(key)
        self._rejected = 0
        self._open(path, _SCHEMA, timeout)

    @property
    def rejected(self) -> int:
        """Rows read whose MAC did not verify (written by someone without the key); ignored."""
        return self._rejected

    def _mac(self, *fields: object) -> str:
        return sign(self._key, _body(fields))

    def _verified(self, given: object, *fields: object) -> bool:
        if mac_matches(self._key, _body(fields), given):
            return True
        with self._lock:
            self._rejected += 1
        return False

    def _check_version(self, expected: int) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == 1:  # rows without a MAC: nothing in them can be trusted; start over
            self._db.executescript("DROP TABLE IF EXISTS records; DROP TABLE IF EXISTS verdicts;")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={expected}")
            return
        super()._check_version(expected)

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
                f"SELECT nodeid, repeat, record, mac FROM records WHERE artifact_hash = ? "
                f"AND frozen_hash = ? AND nodeid IN ({marks})",
                (artifact_hash, frozen_hash, *chunk),
            )
            for nodeid, repeat, text, mac in rows:
                if (nodeid, repeat) not in wanted:
                    continue
                record = self._record(artifact_hash, frozen_hash, nodeid, repeat, text, mac)
                if record is not None:
                    found[(nodeid, repeat)] = record
        return found

    def _record(self, artifact_hash: str, frozen_hash: str, nodeid: str, repeat: int,
                text: str, mac: object) -> TestRecord | None:
        if not self._verified(mac, artifact_hash, frozen_hash, nodeid, repeat, text):
            return None
        try:
            record = TestRecord.from_mapping(json.loads(text))
        except (KeyError, TypeError, ValueError):
            return None
        if (record.nodeid, record.repeat) != (nodeid, repeat):
            return None
        return record

    def records(self, artifact_hash: str, frozen_hash: str, nodeid: str) -> list[TestRecord]:
        """Every cached repeat of one test for one candidate, by repeat index."""
        rows = self._query(
            "SELECT repeat, record, mac FROM records WHERE artifact_hash = ? AND frozen_hash = ? "
            "AND nodeid = ? ORDER BY repeat",
            (artifact_hash, frozen_hash, nodeid),
        )
        found = [self._record(artifact_hash, frozen_hash, nodeid, repeat, text, mac)
                 for repeat, text, mac in rows]
        return [record for record in found if record is not None]

    def put(self, artifact_hash: str, frozen_hash: str, record: TestRecord) -> None:
        self.put_many(artifact_hash, frozen_hash, [record])

    def put_many(self, artifact_hash: str, frozen_hash: str, records: Iterable[TestRecord]) -> None:
        now = time.time()
        rows = []
        for r in records:
            text = r.to_json()
            mac = self._mac(artifact_hash, frozen_hash, r.nodeid, r.repeat, text)
            rows.append((artifact_hash, frozen_hash, r.nodeid, r.repeat, text, mac, now))
        if rows:
            self._write(
                "INSERT OR REPLACE INTO records "
                "(artifact_hash, frozen_hash, nodeid, repeat, record, mac, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    # ---------------------------------------------------------------- verdicts

    def verdict(self, artifact_hash: str, frozen_hash: str) -> Verdict | None:
        rows = self._query(
            "SELECT kind, code, message, mac FROM verdicts "
            "WHERE artifact_hash = ? AND frozen_hash = ?",
            (artifact_hash, frozen_hash),
        )
        if not rows:
            return None
        kind, code, message, mac = rows[0]
        if not self._verified(mac, artifact_hash, frozen_hash, kind, code, message):
            return None
        try:
            return Verdict(kind=kind, code=code, message=message)
        except ValueError:
            return None  # a kind this version does not know

    def put_verdict(self, artifact_hash: str, frozen_hash: str, verdict: Verdict) -> None:
        mac = self._mac(artifact_hash, frozen_hash, verdict.kind, verdict.code, verdict.message)
        self._write(
            "INSERT OR REPLACE INTO verdicts "
            "(artifact_hash, frozen_hash, kind, code, message, mac, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(artifact_hash, frozen_hash, verdict.kind, verdict.code, verdict.message, mac,
              time.time())],
        )

    # ---------------------------------------------------------------- housekeeping

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM records", ())[0][0])

    def _write(self, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        with self._transaction() as db:
            db.executemany(sql, rows)
