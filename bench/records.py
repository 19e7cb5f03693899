"""What every benchmark records: the machine it ran on, and its table in the docs.

Also the small pieces several benchmarks share: writing a results file,
committing a throw-away repository, a median in milliseconds.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import git

__all__ = ["GIT_ENV", "commit_repo", "machine", "median_ms", "publish", "refresh_doc",
           "write_json"]

ROOT = Path(__file__).resolve().parents[1]

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
"""The git environment of the benchmarks' repositories: no user config, a fixed identity."""


def machine(**versions: str) -> dict[str, Any]:
    """The machine a result was measured on, plus any library ``versions`` that matter."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **versions,
    }


def refresh_doc(doc: Path, table: str, markdown: str) -> None:
    """Replace what stands between ``<!-- {table}:start -->`` and ``:end -->`` in ``doc``."""
    start, end = f"<!-- {table}:start -->", f"<!-- {table}:end -->"
    text = doc.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc} lacks the {start} / {end} markers; add them where the table goes")
    doc.write_text(pattern.sub(lambda _m: f"{start}\n{markdown}\n{end}", text), encoding="utf-8")


def write_json(path: Path, record: Mapping[str, Any]) -> None:
    """Write ``record`` to ``path`` as indented JSON (directories created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def publish(record: Mapping[str, Any], results: Path, doc: Path, table: str, markdown: str,
            *, announce: bool = False) -> None:
    """Write a part's results file and its table in ``doc``; ``announce`` says so on stdout."""
    write_json(results, record)
    refresh_doc(doc, table, markdown)
    if announce:
        print(f"\nwrote {results.relative_to(ROOT)} and the table in {doc.relative_to(ROOT)}")


def commit_repo(path: Path, files: Mapping[str, str] | None = None, *, message: str = "agent",
                pack: bool = False) -> str:
    """Write ``files`` under ``path``, commit everything there as a new repository; its HEAD.

    ``pack`` commits without background auto-gc and packs once afterwards, as a
    user's repository would be, so no gc races the measurements.
    """
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")
    runner = git.Git(str(path))
    runner.execute(["git", "init", "--quiet", "--initial-branch=main"], env=GIT_ENV)
    runner.execute(["git", "add", "-A"], env=GIT_ENV)
    no_gc = ["-c", "gc.auto=0"] if pack else []
    runner.execute(["git", *no_gc, "commit", "--quiet", "-m", message], env=GIT_ENV)
    if pack:
        runner.execute(["git", "gc", "--quiet"], env=GIT_ENV)
    return str(runner.execute(["git", "rev-parse", "HEAD"], env=GIT_ENV)).strip()


def median_ms(values: Sequence[float]) -> float:
    """The median of ``values`` (seconds) in milliseconds, to the microsecond."""
    return round(statistics.median(values) * 1000, 3)
