"""The protocol between an evaluation and its child pytest, spelled once for both sides.

The parent (:mod:`agentdescent_core.evaluation.child`) writes a :class:`ChildPlan`
to a file, names it and the journal in the child's environment
(:data:`PLAN_ENV`, :data:`RECORD_ENV`) and starts ``python -m pytest -p
pytest_agentdescent.recorder``.  The recorder reads the plan, runs the planned
tests and appends one line per event to the journal, each signed with
:func:`sign_line` under the plan's one-use key.  The parent keeps only the lines
:func:`read_journal` can verify: candidate code runs in the child, so a line it
appended or rewrote is dropped.

Standard library only, and nothing the child has to wait for: the recorder
imports this module before any conftest, on every child start.  The recorder
pins the functions it calls from here (see :mod:`pytest_agentdescent.recorder`),
so replacing an attribute of this module from a test changes nothing it writes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdescent_core.evaluation.records import DEFAULT_OUTPUT_CHARS, mac_matches

# Bound once: a test that patches ``json.dumps`` or ``hmac.new`` inside the child
# does not change how the recorder writes or signs a line.
_dumps = json.dumps
_hmac_new = hmac.new
_sha256 = hashlib.sha256

RECORD_ENV = "AGENTDESCENT_RECORD"
"""The JSON-lines journal the recorder appends to."""
PLAN_ENV = "AGENTDESCENT_PLAN"
"""The plan file: which tests, which repeats, the per-test timeout, the signing key."""
CHILD_ENV = "AGENTDESCENT_CHILD"
"""Set to "1" in every child pytest; the ``--evolve`` controller never starts there."""


@dataclass(frozen=True)
class ChildPlan:
    """Which tests one child runs: nodeid -> (first repeat index, number of repeats).

    An empty ``tests`` means "every collected test, once" (handy by hand).
    ``test_timeout`` of None disables the recorder's watchdog.  ``key`` signs
    the journal; the recorder deletes the plan file once it has read it.
    """

    tests: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    test_timeout: float | None = None
    output_chars: int = DEFAULT_OUTPUT_CHARS
    key: str = ""
    #: Absolute paths of the artifact roots (as the child sees them) and of the
    #: workspace: code under the roots is the candidate's.
    artifact_roots: tuple[str, ...] = ()
    workspace: str = ""
    #: Record, per test, the paths under the artifact roots it read (``reads``).
    trace_reads: bool = False

    def to_json(self) -> str:
        return json.dumps({
            "tests": {nodeid: list(span) for nodeid, span in self.tests.items()},
            "test_timeout": self.test_timeout,
            "output_chars": self.output_chars,
            "key": self.key,
            "artifact_roots": list(self.artifact_roots),
            "workspace": self.workspace,
            "trace_reads": self.trace_reads,
        })

    @classmethod
    def from_json(cls, text: str) -> ChildPlan:
        """The plan :meth:`to_json` wrote; a ValueError names what is wrong with it."""
        data = json.loads(text)
        tests: dict[str, tuple[int, int]] = {}
        for nodeid, span in dict(data.get("tests", {})).items():
            first, count = (int(x) for x in span)
            if first < 0 or count < 1:
                raise ValueError(f"plan for {nodeid!r} has first={first}, count={count}")
            tests[str(nodeid)] = (first, count)
        timeout = data.get("test_timeout")
        return cls(
            tests=tests,
            test_timeout=None if timeout is None or float(timeout) <= 0 else float(timeout),
            output_chars=int(data.get("output_chars", DEFAULT_OUTPUT_CHARS)),
            key=str(data.get("key", "")),
            artifact_roots=tuple(str(p) for p in data.get("artifact_roots", ())),
            workspace=str(data.get("workspace", "")),
            trace_reads=bool(data.get("trace_reads", False)),
        )

    def span(self, nodeid: str) -> tuple[int, int]:
        return self.tests.get(nodeid, (0, 1))


def sign_line(data: Mapping[str, Any], key: bytes) -> str:
    """``data`` as a JSON line, with its HMAC under ``key`` in ``mac`` (unsigned without a key)."""
    body = _dumps(dict(data), sort_keys=True)
    if not key:
        return body
    mac = _hmac_new(key, body.encode(), _sha256).hexdigest()
    return _dumps({**data, "mac": mac}, sort_keys=True)


def read_journal(path: Path, key: bytes) -> list[dict[str, Any]]:
    """The journal's lines that :func:`sign_line` signed under ``key``, in order.

    Lines torn by a kill and lines without a valid ``mac`` (forged by candidate
    code) are dropped; a journal that was never created reads as empty.
    """
    try:
        text = path.read_text("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return []
    lines: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        mac = data.pop("mac", None)
        body = json.dumps(data, sort_keys=True).encode()
        if mac_matches(key, body, mac):
            lines.append(data)
    return lines
