"""Ledger latency as the history grows: commit and read at 10, 100 and 1,000 versions.

    python -m bench.ledger            # full run: 10 / 100 / 1,000 versions; prints the record
    python -m bench.ledger --quick    # 10 / 100 versions

Every accepted change of a run is a commit on ``agentdescent/dev`` in the
user's repository, so a long-lived project accumulates thousands of versions.
The commit path (build the new tree from the head's, write the commit,
compare-and-swap the ref) and the read path (resolve the head, load the
artifact) must not slow down with that history: this part measures both on a
real :class:`~agentdescent_core.ledger.Ledger` in a temporary repository and
reports the median around each checkpoint.  It is run by ``python -m bench``,
which records it in ``bench/results/ledger.json`` and the docs table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.ledger import Ledger
from bench.records import commit_repo, machine, median_ms

FULL_CHECKPOINTS = (10, 100, 1000)
QUICK_CHECKPOINTS = (10, 100)
WINDOW = 10  # commits (and reads) timed around each checkpoint
SKILL = "skills/notes/SKILL.md"


def _build_repo(path: Path) -> None:
    """A small committed repository: a skill artifact, a test and some source."""
    files = {
        SKILL: "# Notes\n\nKeep answers short.\n",
        "skills/notes/helper.md": "Helper notes.\n" * 20,
        "tests/test_notes.py": "def test_notes():\n    assert True\n",
        **{f"src/mod_{i}.py": f"VALUE = {i}\n" for i in range(50)},
    }
    commit_repo(path, files)


def measure(checkpoints: Sequence[int] = FULL_CHECKPOINTS, *,
            progress: bool = True) -> dict[str, Any]:
    """Commit and read medians at each checkpoint; keys ``commit_ms``, ``read_ms`` {versions: ms}.

    The commits of versions ``n - WINDOW + 1 .. n`` are the ones timed for
    checkpoint ``n`` (the ones in between are made untimed), then ``WINDOW``
    reads of the head state at version ``n``.
    """
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="agentdescent-bench-ledger-"))
    commit_ms: dict[str, float] = {}
    read_ms: dict[str, float] = {}
    try:
        repo = base / "repo"
        repo.mkdir()
        _build_repo(repo)
        with Ledger(repo, FileTree(["skills"])) as ledger:
            ledger.ensure_branches()
            version = 0
            for checkpoint in sorted(checkpoints):
                timed: list[float] = []
                while version < checkpoint:
                    text = f"# Notes\n\nKeep answers short.\n\nRule {version + 1}.\n"
                    t0 = time.perf_counter()
                    result = ledger.commit(Diff({SKILL: text}))
                    seconds = time.perf_counter() - t0
                    if result.version != version + 1:
                        raise SystemExit(f"ledger bench: expected version {version + 1}, "
                                         f"got {result.version}")
                    version += 1
                    if version > checkpoint - WINDOW:
                        timed.append(seconds)
                reads: list[float] = []
                for _ in range(WINDOW):
                    t0 = time.perf_counter()
                    state = ledger.read_state(ledger.head())
                    reads.append(time.perf_counter() - t0)
                    if f"Rule {version}." not in state[SKILL]:
                        raise SystemExit("ledger bench: the head does not hold the last commit")
                commit_ms[str(checkpoint)] = median_ms(timed)
                read_ms[str(checkpoint)] = median_ms(reads)
                if progress:
                    print(f"  ledger: {checkpoint:5d} versions: commit {commit_ms[str(checkpoint)]}"
                          f" ms, read {read_ms[str(checkpoint)]} ms", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    first, last = str(min(checkpoints)), str(max(checkpoints))
    return {
        "commit_ms": commit_ms,
        "read_ms": read_ms,
        "commit_growth": round(commit_ms[last] / commit_ms[first], 2) if commit_ms[first] else None,
        "read_growth": round(read_ms[last] / read_ms[first], 2) if read_ms[first] else None,
        "ledger": {
            "measures": f"median of the {WINDOW} commits up to each checkpoint "
                        "(Ledger.commit of a one-file Diff) and of "
                        f"{WINDOW} Ledger.read_state(Ledger.head()) at it",
            "checkpoints": list(checkpoints),
            "elapsed_seconds": round(time.perf_counter() - started, 1),
        },
    }


def table(record: dict[str, Any]) -> str:
    """The docs table of the ledger part."""
    lines = ["| versions on dev | commit (ms, median) | read head state (ms, median) |",
             "|---:|---:|---:|"]
    for versions, ms in record["commit_ms"].items():
        lines.append(f"| {int(versions):,} | {ms:.2f} | {record['read_ms'][versions]:.2f} |")
    lines += ["", f"Growth from the first to the last checkpoint: commit "
                  f"{record['commit_growth']}x, read {record['read_growth']}x."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 and 100 versions only")
    parser.add_argument("--json", action="store_true", help="print the JSON record")
    args = parser.parse_args(argv)
    record = {"benchmark": "ledger", "date": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "machine": machine(),
        **measure(QUICK_CHECKPOINTS if args.quick else FULL_CHECKPOINTS,
                  progress=not args.json)}
    print(json.dumps(record, indent=2) if args.json else table(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
