"""The one way this project keeps state in SQLite: a WAL file, one connection, one lock.

The eval cache, the run store and the decision log are each a single SQLite
file in the state directory, written by several threads of one run and read by
other processes (``agentdescent report``).  They share the mechanics here —
open in WAL mode with the schema, one connection guarded by a lock, explicit
``BEGIN IMMEDIATE`` transactions, errors that name the file and say what to do —
and differ only in their tables and in how much durability they buy (the
cache can lose its last writes in a power cut; the run store and the decision
log cannot: ``synchronous=FULL``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import agentdescent_core.sandbox.journal as journal
from agentdescent_core.errors import AgentDescentError


class SqliteFile:
    """Base class: set ``label`` ("the run store") and ``error``; call :meth:`_open` in __init__.

    ``schema_version`` (when not None) is written to ``PRAGMA user_version`` on
    creation and checked on every open; a mismatch raises ``error`` with
    ``version_advice`` appended.
    """

    label: ClassVar[str]
    error: ClassVar[type[AgentDescentError]]
    synchronous: ClassVar[str] = "FULL"
    schema_version: ClassVar[int | None] = None
    version_advice: ClassVar[str] = "move the file away and run again"
    open_advice: ClassVar[str] = "check that the file is a SQLite database and writable"

    path: Path
    _db: sqlite3.Connection

    def _open(self, path: str | os.PathLike[str], schema: str, timeout: float) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._closed = True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with journal.writing(self.path):  # creating the schema writes the file
                self._db = sqlite3.connect(self.path, timeout=timeout,
                                           check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(f"PRAGMA synchronous={self.synchronous}")
                self._db.executescript(schema)
                if self.schema_version is not None:
                    self._check_version(self.schema_version)
        except sqlite3.Error as exc:
            raise self.error(f"cannot use {self.label} {self.path}: {exc}; {self.open_advice}"
                             ) from exc
        self._closed = False

    def _check_version(self, expected: int) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            self._db.execute(f"PRAGMA user_version={expected}")
        elif version != expected:
            self._db.close()
            raise self.error(
                f"{self.label} {self.path} has schema version {version}, this version of "
                f"pytest-agentdescent uses {expected}; {self.version_advice}"
            )

    # ---------------------------------------------------------------- housekeeping

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with journal.writing(self.path):  # closing checkpoints the WAL
                    self._db.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise self.error(f"{self.label} {self.path} is closed")

    def _query(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            self._check_open()
            try:
                return list(self._db.execute(sql, params).fetchall())
            except sqlite3.Error as exc:
                raise self.error(f"reading {self.label} {self.path} failed: {exc}") from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything inside commits together or not at all."""
        with self._lock, journal.writing(self.path):
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self.error(f"writing {self.label} {self.path} failed: {exc}") from exc
            try:
                yield self._db
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise self.error(f"writing {self.label} {self.path} failed: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):  # already rolled back by SQLite itself
            self._db.execute("ROLLBACK")
