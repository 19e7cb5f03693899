"""What one evaluated test tells us: the unit the recorder writes and the cache keeps."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_OUTPUT_CHARS = 4000
"""Characters of a test's message and captured output a record keeps by default."""

def mac(key: bytes, body: bytes) -> str:
    """HMAC-SHA256 of ``body`` under ``key``, hex: how the journal and the cache sign."""
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def mac_matches(key: bytes, body: bytes, given: object) -> bool:
    """Does ``given`` (read back from a file a candidate could write) sign ``body``?"""
    return isinstance(given, str) and hmac.compare_digest(given, mac(key, body))


#: Every outcome the recorder can report for one test (phases combined).
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
#: Outcomes that are rewards; skipped and xfailed tests are not measurements.
REWARDING_OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "error", "xpassed"})


@dataclass(frozen=True)
class TestRecord:
    """One run of one test (one repeat), as the child's recorder saw it.

    ``reward`` is the ``evolve_reward`` value when the test recorded one, else
    1.0 for passed / xpassed and 0.0 for failed / error; None for skipped and
    xfailed.  ``message`` is pytest's rewritten assertion message (or the error,
    or why the run was cut short); ``output`` the captured stdout / stderr / log,
    truncated.  ``phase`` names where a failure happened (``setup``, ``call``,
    ``teardown``, ``collect``, ``timeout``, ``crash``).
    """

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    outcome: str
    reward: float | None
    repeat: int = 0
    message: str = ""
    output: str = ""
    duration: float = 0.0
    phase: str = "call"
    #: What the test read under the artifact roots, as repo-relative posix paths:
    #: files it (or a process it started) opened, and directories it listed with a
    #: trailing "/".  A stat() without an open is not seen (docs/sandbox.md).
    #: None when its reads were not traced (tracing off, or the tracer failed);
    #: read-based selection always re-runs such a test.
    reads: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown test outcome {self.outcome!r}; expected one of {OUTCOMES}")

    @property
    def counts(self) -> bool:
        """True when this record is a reward measurement (not a skip or xfail)."""
        return self.outcome in REWARDING_OUTCOMES

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TestRecord:
        reward = data.get("reward")
        return cls(
            nodeid=str(data["nodeid"]),
            outcome=str(data["outcome"]),
            reward=None if reward is None else float(reward),
            repeat=int(data.get("repeat", 0)),
            message=str(data.get("message", "")),
            output=str(data.get("output", "")),
            duration=float(data.get("duration", 0.0)),
            phase=str(data.get("phase", "call")),
            reads=_reads(data.get("reads")),
        )


def _reads(value: object) -> tuple[str, ...] | None:
    """A record's ``reads`` as stored (a JSON list), or None when absent or malformed."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(sorted(set(value)))


#: Later runs that must agree with each other before a first run that differs
#: from all of them is called deterministic rather than chance.
MIN_LATER_RUNS = 2


def first_run_stands_apart(runs: Sequence[TestRecord]) -> bool:
    """Did the first run of a test (repeat 0) differ from every later run, which all agree?

    ``runs`` are one test's records at one artifact state, repeats 0, 1, 2, ...
    in order.  Each repeat runs in a fresh child process in a freshly reset
    workspace, so a test whose first run passes and all later runs fail (or
    the reverse) depends on something an earlier run left behind, or on the
    order runs happen in; a flaky test's later runs disagree among themselves
    (with ``k`` later runs, a fair coin shows this pattern with probability
    ``2**-k``).  Needs at least :data:`MIN_LATER_RUNS` later runs; runs cut
    short (``timeout``, ``crash``) prove nothing and make the answer False.
    """
    if len(runs) < 1 + MIN_LATER_RUNS or [r.repeat for r in runs] != list(range(len(runs))):
        return False
    if any(r.phase in ("timeout", "crash") for r in runs):
        return False
    first, *later = [_result(r) for r in runs]
    return all(value == later[0] for value in later) and first != later[0]


def _result(record: TestRecord) -> tuple[bool, float | None]:
    """What is compared between runs: counts at all, and the reward."""
    return record.counts, record.reward if record.counts else None
