"""The durable run store: runs, an append-only event log and leases in one SQLite file.

A long evolution must survive being killed at any instant and must never be
driven by two workers at once.  This store gives the loop kernel the three
things it needs for that:

* **runs** — one row per run: its status (``pending``, ``running``,
  ``completed``, ``failed``, ``cancelled``), the configuration it was submitted
  with and, once it ends, a result.  A terminal status is final.
* **events** — an append-only log per run, numbered by ``seq``.  Each event has
  a caller-chosen ``key`` unique within its run, and appending a key that is
  already there is a no-op (it returns ``False``).  That is what makes a replay
  after a crash harmless: the kernel appends ``generation:{n}`` only after the
  generation's effects happened, so a crash before the append replays the
  generation (at-least-once) and a crash after it never duplicates it.
* **leases** — a named lock with an expiry, held by one holder at a time.  A
  live lease held by someone else is refused with :class:`LeaseHeld`, whose
  message names the holder and when the lease expires; an expired lease is
  taken over by whoever asks next.

Every mutation is one ``BEGIN IMMEDIATE`` transaction, so a crash leaves each
one either fully there or not at all.  The file is in WAL mode (readers never
block the writer) with ``synchronous=FULL``: a commit is on disk before the
call returns, so even a power cut does not lose an event whose external effect
(a ledger commit) is already durable.  The extra fsync costs little because a
run writes a handful of events per generation.  One connection per instance,
serialised by a lock, so an instance may be shared by threads; several
processes may use the same file (writers wait for each other up to
``timeout`` seconds).  Times are wall-clock unix seconds, since leases are
compared across processes.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentdescent_core.errors import (
    LeaseHeld as LeaseHeld,
    RunStoreError as RunStoreError,
    UnknownRunError as UnknownRunError,
)
from agentdescent_core.sqlite_file import SqliteFile

#: Every status a run can have, in the order a run normally goes through them.
RUN_STATUSES: tuple[str, ...] = ("pending", "running", "completed", "failed", "cancelled")
#: The statuses a run never leaves.
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    key TEXT,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    config TEXT NOT NULL,
    result TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs (key);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""
# The columns _run and _event read, in their order.
_RUN_COLUMNS = "run_id, key, status, created_at, updated_at, config, result"
_EVENT_COLUMNS = "run_id, seq, key, kind, payload, created_at"


@dataclass(frozen=True)
class Lease:
    """Who holds the lease ``name`` and until when (unix seconds)."""

    name: str
    holder: str
    expires_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "holder": self.holder, "expires_at": self.expires_at}


@dataclass(frozen=True)
class RunRecord:
    """One run as stored: status, submitted configuration and final result."""

    run_id: str
    key: str | None
    status: str
    created_at: float
    updated_at: float
    config: dict[str, Any]
    result: dict[str, Any] | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "key": self.key, "status": self.status,
            "created_at": self.created_at, "updated_at": self.updated_at,
            "config": self.config, "result": self.result,
        }


@dataclass(frozen=True)
class RunEvent:
    """One entry of a run's append-only log."""

    run_id: str
    seq: int
    key: str
    kind: str
    payload: dict[str, Any]
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "key": self.key, "kind": self.kind,
                "payload": self.payload, "created_at": self.created_at}


def _to_json(value: Mapping[str, Any] | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RunStoreError(
            f"the {what} must be JSON-serialisable (str, numbers, bools, None, lists, dicts; "
            f"finite floats): {exc}"
        ) from exc


class SqliteRunStore(SqliteFile):
    """Runs, their event logs and leases in one SQLite file (see the module docstring)."""

    label = "the run store"
    error = RunStoreError
    schema_version = _SCHEMA_VERSION
    version_advice = ("upgrade pytest-agentdescent or move the file away to start a fresh "
                      "history")
    open_advice = ("check that the file is a SQLite database and writable, or move it away "
                   "to start a fresh history")

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self._open(path, _SCHEMA, timeout)

    # ---------------------------------------------------------------- runs

    def create_run(self, config: Mapping[str, Any], *, key: str | None = None) -> str:
        """A new run in ``pending``; with ``key``, the unfinished run of that key if any.

        Submitting twice with the same key is therefore idempotent for as long
        as the first run has not ended: the way a restarted command finds the
        run it should resume.
        """
        text = _to_json(config, "run configuration")
        with self._transaction() as db:
            if key is not None:
                row = db.execute(
                    "SELECT run_id FROM runs WHERE key = ? AND status NOT IN "
                    "('completed', 'failed', 'cancelled') ORDER BY id DESC LIMIT 1", (key,),
                ).fetchone()
                if row is not None:
                    return str(row[0])
            run_id = f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
            now = time.time()
            db.execute(
                "INSERT INTO runs (run_id, key, status, created_at, updated_at, config, result) "
                "VALUES (?, ?, 'pending', ?, ?, ?, NULL)", (run_id, key, now, now, text),
            )
            return run_id

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise UnknownRunError(run_id, self.path)
        return _run(rows[0])

    def runs(self, *, limit: int | None = None) -> list[RunRecord]:
        """Every run, newest first (at most ``limit``)."""
        sql = f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY id DESC"
        params: tuple[object, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (max(0, int(limit)),)
        return [_run(row) for row in self._query(sql, params)]

    def set_status(self, run_id: str, status: str, *,
                   result: Mapping[str, Any] | None = None) -> None:
        """Move a run to ``status`` (and store ``result`` when given).

        A terminal status is final: setting it again is a no-op, moving a
        terminal run anywhere else raises :class:`RunStoreError`.
        """
        if status not in RUN_STATUSES:
            raise RunStoreError(f"unknown run status {status!r}; expected one of {RUN_STATUSES}")
        text = _to_json(result, "run result")
        with self._transaction() as db:
            row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRunError(run_id, self.path)
            current = str(row[0])
            if current in TERMINAL_STATUSES:
                if current == status:
                    return
                raise RunStoreError(
                    f"run {run_id!r} already ended as {current!r} and cannot become {status!r}; "
                    "submit a new run instead"
                )
            if text is None:
                db.execute("UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?",
                           (status, time.time(), run_id))
            else:
                db.execute(
                    "UPDATE runs SET status = ?, result = ?, updated_at = ? WHERE run_id = ?",
                    (status, text, time.time(), run_id),
                )

    # ---------------------------------------------------------------- events

    def append_event(self, run_id: str, key: str, kind: str, payload: Mapping[str, Any]) -> bool:
        """Append an event; ``False`` (and nothing written) when ``key`` is already there."""
        text = _to_json(payload, f"payload of event {key!r}")
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise UnknownRunError(run_id, self.path)
            if db.execute("SELECT 1 FROM events WHERE run_id = ? AND key = ?",
                          (run_id, key)).fetchone() is not None:
                return False
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?",
                             (run_id,)).fetchone()[0]
            now = time.time()
            db.execute(
                "INSERT INTO events (run_id, seq, key, kind, payload, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (run_id, seq, key, kind, text, now),
            )
            db.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", (now, run_id))
            return True

    def events(self, run_id: str) -> list[RunEvent]:
        """The run's events in ``seq`` order (an unknown run has none)."""
        rows = self._query(f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq",
                           (run_id,))
        return [_event(row) for row in rows]

    # ---------------------------------------------------------------- leases

    def acquire_lease(self, name: str, holder: str, ttl: float) -> Lease:
        """Take (or, for the same holder, renew) the lease for ``ttl`` seconds.

        Raises :class:`LeaseHeld` while another holder's lease is live; an
        expired one is taken over.
        """
        _check_ttl(ttl)
        with self._transaction() as db:
            now = time.time()
            row = db.execute("SELECT holder, expires_at FROM leases WHERE name = ?",
                             (name,)).fetchone()
            if row is not None and row[0] != holder and float(row[1]) > now:
                raise LeaseHeld(name, str(row[0]), float(row[1]), now=now)
            return self._put_lease(db, name, holder, now + ttl)

    def renew_lease(self, name: str, holder: str, ttl: float) -> Lease:
        """Extend ``holder``'s lease; :class:`LeaseHeld` when someone else has taken it.

        A lease that expired but was not taken over by anyone, or was broken and
        not re-taken, is simply taken again: nobody else acted on it meanwhile.
        """
        _check_ttl(ttl)
        with self._transaction() as db:
            now = time.time()
            row = db.execute("SELECT holder, expires_at FROM leases WHERE name = ?",
                             (name,)).fetchone()
            if row is not None and row[0] != holder:
                raise LeaseHeld(name, str(row[0]), float(row[1]), now=now, lost=True)
            return self._put_lease(db, name, holder, now + ttl)

    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up; a no-op when ``holder`` does not hold it."""
        with self._transaction() as db:
            db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def break_lease(self, name: str) -> None:
        """Remove the lease whoever holds it — only for a holder known to be dead."""
        with self._transaction() as db:
            db.execute("DELETE FROM leases WHERE name = ?", (name,))

    def lease(self, name: str) -> Lease | None:
        """The lease as stored (possibly expired), or ``None``."""
        rows = self._query("SELECT name, holder, expires_at FROM leases WHERE name = ?", (name,))
        return _lease(rows[0]) if rows else None

    @staticmethod
    def _put_lease(db: sqlite3.Connection, name: str, holder: str, expires_at: float) -> Lease:
        db.execute(
            "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
            "expires_at = excluded.expires_at", (name, holder, expires_at),
        )
        return Lease(name=name, holder=holder, expires_at=expires_at)

    # ---------------------------------------------------------------- snapshots

    def snapshot(self, run_id: str) -> dict[str, Any]:
        """The run, its events and the live-or-expired leases, JSON-ready, read consistently."""
        with self._lock:
            self._check_open()
            try:
                self._db.execute("BEGIN")
                try:
                    run_rows = self._db.execute(
                        f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchall()
                    event_rows = self._db.execute(
                        f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq",
                        (run_id,)).fetchall()
                    lease_rows = self._db.execute(
                        "SELECT name, holder, expires_at FROM leases ORDER BY name").fetchall()
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise RunStoreError(f"reading the run store {self.path} failed: {exc}") from exc
        if not run_rows:
            raise UnknownRunError(run_id, self.path)
        return {"run": _run(run_rows[0]).to_dict(),
                "events": [_event(row).to_dict() for row in event_rows],
                "leases": [_lease(row).to_dict() for row in lease_rows],
                "taken_at": time.time()}


def _run(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(
        run_id=row[0], key=row[1], status=row[2], created_at=float(row[3]),
        updated_at=float(row[4]), config=json.loads(row[5]),
        result=None if row[6] is None else json.loads(row[6]),
    )


def _event(row: tuple[Any, ...]) -> RunEvent:
    return RunEvent(run_id=row[0], seq=int(row[1]), key=row[2], kind=row[3],
                    payload=json.loads(row[4]), created_at=float(row[5]))


def _lease(row: tuple[Any, ...]) -> Lease:
    return Lease(name=row[0], holder=row[1], expires_at=float(row[2]))


def _check_ttl(ttl: float) -> None:
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not ttl > 0:
        raise RunStoreError(f"a lease ttl must be a positive number of seconds, got {ttl!r}")


def holder_id(name: str = "agentdescent") -> str:
    """A lease holder name for this process, ``{name}:{pid}@{host}``.

    Naming holders this way lets a restarted command tell, with
    :func:`holder_alive`, that the holder of a live-looking lease was killed, and
    break that lease instead of waiting for it to expire.
    """
    return f"{name}:{os.getpid()}@{socket.gethostname()}"


def holder_alive(holder: str) -> bool | None:
    """Whether the process a :func:`holder_id` holder names is still running.

    ``True`` or ``False`` for a holder of this host; ``None`` when it cannot be
    told (another host, or a name not made by :func:`holder_id`) — then only the
    lease's expiry can free the run.  A recycled pid reads as alive, which errs on
    the safe side.
    """
    head, sep, host = holder.rpartition("@")
    _, colon, pid_text = head.rpartition(":")
    if not sep or not colon or not pid_text.isdigit() or host != socket.gethostname():
        return None
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return None
    return not _zombie(int(pid_text))  # killed, not yet reaped by its parent


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
