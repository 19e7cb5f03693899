"""Record / replay of model calls (``--evolve-llm-cache record|replay|off``).

A CI rerun or a demo should replay the exact answers of a recorded run at zero
cost, and a replay must never quietly fall back to a paid call: a request that
was not recorded is an :class:`LLMCacheMiss`.

Entries live in one SQLite file keyed by the sha256 of (provider, model, system,
user, max_tokens, temperature) *and* the occurrence number of that key within the
run.  The occurrence matters because the proposer may ask the very same question
twice (two workers on the same failing task) and get two different answers; a
replay hands them back in the same order instead of repeating the first one.

The cache stores plain values (text, token counts, model name) and knows nothing
about the model clients, so it can be opened and inspected on its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentdescent_core.errors import BackendError, LLMCacheMiss as LLMCacheMiss

CacheMode = Literal["record", "replay", "off"]
_MODES: tuple[str, ...] = ("record", "replay", "off")
_SCHEMA_VERSION = 1
_RERECORD = "re-record with --evolve-llm-cache record (this calls the model and pays for it)"


@dataclass(frozen=True)
class CachedAnswer:
    """What a recorded model call returned."""

    text: str
    input_tokens: int
    output_tokens: int
    model: str


def request_key(
    *,
    provider: str,
    model: str,
    system: str,
    user: str,
    max_tokens: int,
    temperature: float,
) -> str:
    """The hex sha256 identifying a model request (its parameters, not its answer)."""
    canonical = json.dumps(
        [provider, model, system, user, int(max_tokens), float(temperature)],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LLMCache:
    """A per-run view of the record/replay store; thread-safe.

    ``record``: every call goes to the model and its answer is stored (an existing
    entry for the same key and occurrence is replaced).  ``replay``: answers come
    only from the store; the file must exist.  ``off``: nothing is read or written.
    """

    def __init__(self, path: str | os.PathLike[str], mode: CacheMode = "record") -> None:
        if mode not in _MODES:
            raise ValueError(f"LLM cache mode {mode!r} is not one of record, replay, off")
        self.path = Path(path)
        self.mode: CacheMode = mode
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._conn: sqlite3.Connection | None = None
        if mode == "replay":
            if not self.path.is_file():
                raise BackendError(
                    f"--evolve-llm-cache replay: no recording at {self.path}; "
                    "run once with --evolve-llm-cache record first"
                )
            self._conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
        elif mode == "record":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
            self._conn.executescript(
                """
                CREATE TABLE IF NOT EXISTS answers (
                    key TEXT NOT NULL,
                    occurrence INTEGER NOT NULL,
                    provider TEXT NOT NULL,
                    model TEXT NOT NULL,
                    text TEXT NOT NULL,
                    input_tokens INTEGER NOT NULL,
                    output_tokens INTEGER NOT NULL,
                    recorded_at REAL NOT NULL,
                    PRIMARY KEY (key, occurrence)
                );
                CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
                """
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES ('schema', ?)",
                (str(_SCHEMA_VERSION),),
            )
            self._conn.commit()

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def next_occurrence(self, key: str) -> int:
        """Claim the next occurrence number of ``key`` in this run (0, 1, 2, ...)."""
        with self._lock:
            occurrence = self._seen[key]
            self._seen[key] += 1
            return occurrence

    def fetch(self, key: str, occurrence: int) -> CachedAnswer:
        """Replay the recorded answer; :class:`LLMCacheMiss` when there is none."""
        if self.mode != "replay" or self._conn is None:
            raise ValueError(f"fetch() needs an LLM cache in replay mode, this one is {self.mode}")
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT text, input_tokens, output_tokens, model FROM answers "
                    "WHERE key = ? AND occurrence = ?",
                    (key, occurrence),
                ).fetchone()
                recorded = self._conn.execute(
                    "SELECT COUNT(*) FROM answers WHERE key = ?", (key,)
                ).fetchone()[0]
            except sqlite3.DatabaseError as exc:
                raise BackendError(
                    f"the LLM recording {self.path} cannot be read ({exc}); {_RERECORD}"
                ) from exc
        if row is None:
            if recorded:
                why = f"it was recorded {recorded} time(s) but this run asks for it again"
            else:
                why = "the prompt or the model parameters changed since the recording"
            raise LLMCacheMiss(
                key,
                occurrence,
                str(self.path),
                f"no recorded model answer for request {key[:16]} (occurrence {occurrence + 1}) "
                f"in {self.path}: {why}; {_RERECORD}",
            )
        return CachedAnswer(text=row[0], input_tokens=row[1], output_tokens=row[2], model=row[3])

    def store(self, key: str, occurrence: int, provider: str, answer: CachedAnswer) -> None:
        """Record an answer (record mode only; other modes ignore it)."""
        if self.mode != "record" or self._conn is None:
            return
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO answers (key, occurrence, provider, model, text, "
                "input_tokens, output_tokens, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    occurrence,
                    provider,
                    answer.model,
                    answer.text,
                    answer.input_tokens,
                    answer.output_tokens,
                    time.time(),
                ),
            )
            self._conn.commit()

    def __len__(self) -> int:
        if self._conn is None:
            return 0
        with self._lock:
            count: int = self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
            return count

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
