"""Record / replay / read-through of model calls (``--evolve-llm-cache MODE``).

A CI rerun or a demo should replay the exact answers of a recorded run at zero
cost, and a replay must never quietly fall back to a paid call: a request that
was not recorded is an :class:`LLMCacheMiss`.

Scheduled sessions want something softer: ``read-through`` answers from the
store when a fresh entry exists and otherwise calls the model and stores the
answer.  Its entries expire (``evolve_llm_cache_ttl``, 7 days by default) so a
cache carried from session to session does not pin a proposer to month-old
answers; an expired entry is a miss and is replaced.  Because a read-through
store travels between machines (a CI cache), its key also holds the endpoint's
base URL: the same model name on another server is another model.

Entries live in one SQLite file keyed by the sha256 of (provider, model, system,
user, max_tokens, temperature — plus the base URL in ``read-through``) *and* the
occurrence number of that key within the run.  The record/replay key stays without
the base URL so existing recordings keep replaying, also against a local server
whose port changed.  The occurrence matters because the proposer may ask the very same question
twice (two workers on the same failing task) and get two different answers; a
replay hands them back in the same order instead of repeating the first one.

The cache stores plain values (text, token counts, model name) and knows nothing
about the model clients, so it can be opened and inspected on its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentdescent_core.errors import BackendError, LLMCacheMiss as LLMCacheMiss

CacheMode = Literal["record", "replay", "read-through", "off"]
_MODES: tuple[str, ...] = ("record", "replay", "read-through", "off")
_WRITING: tuple[str, ...] = ("record", "read-through")
_SCHEMA_VERSION = 1
_RERECORD = "re-record with --evolve-llm-cache record (this calls the model and pays for it)"

#: The store's file name inside the state directory (what a CI cache step must keep).
LLM_CACHE_FILE = "llm-cache.sqlite3"
#: How long a read-through entry answers before it is asked again (7 days).
DEFAULT_TTL_SECONDS = 7 * 24 * 3600.0

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number and a unit, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``.

    A bare number is seconds.  Zero and negative durations are refused (a zero
    expiry would turn the read-through cache into ``off`` that still writes).
    """
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"{text!r} is not a duration; write a number and a unit, e.g. 7d, "
                         "12h, 30m or 90s")
    seconds = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration; write e.g. 7d")
    return seconds


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
    base_url: str | None = None,
) -> str:
    """The hex sha256 identifying a model request (its parameters, not its answer).

    ``base_url`` (the read-through key) is part of the hash only when given, so
    the record/replay keys of existing recordings do not change.
    """
    fields: list[object] = [provider, model, system, user, int(max_tokens), float(temperature)]
    if base_url is not None:
        fields.append(base_url.rstrip("/"))
    canonical = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LLMCache:
    """A per-run view of the model-answer store; thread-safe.

    ``record``: every call goes to the model and its answer is stored (an existing
    entry for the same key and occurrence is replaced).  ``replay``: answers come
    only from the store; the file must exist.  ``read-through``: an answer younger
    than ``ttl`` seconds comes from the store (:meth:`lookup`), anything else is
    asked and stored, replacing an expired entry.  ``off``: nothing is read or
    written.  ``clock`` gives the time entries are stamped and aged with (seconds
    since the epoch); tests pass their own.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: CacheMode = "record",
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(
                f"LLM cache mode {mode!r} is not one of record, replay, read-through, off")
        if not ttl > 0:
            raise ValueError(f"LLM cache ttl={ttl!r} must be > 0 seconds")
        self.path = Path(path)
        self.mode: CacheMode = mode
        self.ttl = float(ttl)
        self._clock = clock
        self.expired = 0  # read-through entries found too old (and asked again)
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
        elif mode in _WRITING:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
            try:
                self._create()
            except sqlite3.DatabaseError as exc:
                self._conn.close()
                self._conn = None
                raise BackendError(
                    f"--evolve-llm-cache {mode}: {self.path} is not a model-answer store "
                    f"({exc}); delete it (or point evolve_state_dir elsewhere) and run again"
                ) from exc

    def _create(self) -> None:
        """Make the tables of a writable store (kept as they are when they exist)."""
        assert self._conn is not None
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

    def lookup(self, key: str, occurrence: int) -> CachedAnswer | None:
        """The fresh stored answer (read-through mode), or None: missing or expired.

        An entry is fresh while its age (the clock now minus the time it was
        stored) is below ``ttl``; an expired one is counted in :attr:`expired`
        and left for :meth:`store` to replace.
        """
        if self.mode != "read-through" or self._conn is None:
            raise ValueError(
                f"lookup() needs an LLM cache in read-through mode, this one is {self.mode}")
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT text, input_tokens, output_tokens, model, recorded_at FROM answers "
                    "WHERE key = ? AND occurrence = ?",
                    (key, occurrence),
                ).fetchone()
            except sqlite3.DatabaseError as exc:
                raise BackendError(
                    f"the LLM cache {self.path} cannot be read ({exc}); delete it and run again"
                ) from exc
            if row is None:
                return None
            if self._clock() - float(row[4]) >= self.ttl:
                self.expired += 1
                return None
        return CachedAnswer(text=row[0], input_tokens=row[1], output_tokens=row[2], model=row[3])

    def store(self, key: str, occurrence: int, provider: str, answer: CachedAnswer) -> None:
        """Store an answer, stamped with the clock (record and read-through; others ignore it)."""
        if self.mode not in _WRITING or self._conn is None:
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
                    self._clock(),
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
