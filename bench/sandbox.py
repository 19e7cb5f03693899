"""Sandbox costs per candidate: workspace reset, and a whole evaluation against a bare pytest.

    python -m bench.sandbox                   # full run: records results, refreshes the docs table
    python -m bench.sandbox --quick           # fewer repeats and rounds, prints only
    python -m bench.sandbox --json            # print the JSON record instead of the summary
    python -m bench.sandbox --part overhead   # re-measure one part, keep the other's record

Two parts, both recorded in ``bench/results/sandbox.json``:

``reset`` (:func:`measure_reset`).  A repository is built in a temporary
directory: ``--files`` source and test files outside the artifact (default
10,000) plus a small ``skills/`` artifact, committed with git.  One worker's
evaluation loop is replayed: the candidate alternates between the committed
artifact and a one-file edit of it, and each step runs :meth:`Workspace.check`
(what follows a child run) and then :meth:`Workspace.reset` (what precedes the
next one).  Medians over the repeats; the target of issue 4 is
``reset_ms_10k_files`` <= 50.

``overhead`` (:func:`measure_overhead`).  What one candidate evaluation costs
under each backend (``local``, ``bwrap``, ``docker``) against the least any
evaluation could cost: a bare ``python -m pytest -q -p no:cacheprovider
<test file>`` child started with :mod:`subprocess` in a plain clone of the
same small repository (three trivial tests reading a ``skills/`` artifact).
The evaluation is one :meth:`SandboxedVerifier.evaluate` call of the three
tests at one repeat: workspace reset, sandbox, child pytest start, the
recorder plugin, the frozen check (and under ``local`` the scan of the user's
repository).  Every candidate is a new artifact text and ``cache=None``, so
nothing is reused.  The runs are interleaved (bare, local, bwrap, docker,
bare, ...) so that a slow spell of the machine hits every column alike; one
warm-up round (workspace creation, the first container) is not counted.
``overhead[backend]`` is the ratio of medians, backend over bare; the targets
are <= 1.3 for ``local`` and ``bwrap`` and <= 2.0 for ``docker``.  A backend
that cannot run here is skipped and its reason recorded.

A full run merges the parts it measured into the results file (the other
part's keys stay) and rewrites the table between the ``sandbox-table``
markers of ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import git

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import BackendError
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.select import get_backend
from agentdescent_core.sandbox.workspace import Workspace
from bench.records import GIT_ENV, commit_repo, machine, median_ms, publish
from pytest_agentdescent.sandboxing import plugin_args

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "sandbox.json"
DOC = ROOT / "docs" / "performance.md"

TARGET_RESET_MS = 50.0
DEFAULT_FILES = 10_000
FULL_REPEATS = 200
QUICK_REPEATS = 20
ARTIFACT_FILES = 20


def build_repo(path: Path, files: int) -> str:
    """A committed repository with ``files`` frozen files and a ``skills/`` artifact."""
    path.mkdir(parents=True)
    per_dir = 50
    for i in range(files):
        folder = "tests" if i % 10 == 0 else f"src/pkg{i // (per_dir * 10):03d}"
        sub = f"{folder}/m{(i // per_dir) % 10}"
        name = f"test_{i}.py" if folder == "tests" else f"mod_{i}.py"
        target = path / sub / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"VALUE = {i}\n\ndef f():\n    return VALUE * 2\n", encoding="utf-8")
    for i in range(ARTIFACT_FILES):
        skill = path / "skills" / f"skill{i % 5}" / f"part{i}.md"
        skill.parent.mkdir(parents=True, exist_ok=True)
        skill.write_text(f"# Part {i}\n\n" + "Do the thing carefully.\n" * 20, encoding="utf-8")
    return commit_repo(path, message="bench repository", pack=True)


def measure_reset(
    files: int = DEFAULT_FILES,
    repeats: int = FULL_REPEATS,
    *,
    workdir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Median reset / check times of a one-file change in a ``files``-file repository.

    Keys: ``files`` (entries in the workspace), ``repeats``, ``create_seconds``,
    ``reset_ms`` (reset after a check: the evaluation loop), ``check_ms``,
    ``reset_unchecked_ms`` (reset that must scan by itself), ``reset_p90_ms``.
    """
    base = Path(tempfile.mkdtemp(prefix="agentdescent-bench-", dir=workdir))
    try:
        repo = base / "repo"
        commit = build_repo(repo, files)
        frozen = FrozenSet(artifact_roots=["skills"])
        tree = FileTree(["skills"], frozen=frozen)
        with git.Repo(repo) as handle:
            committed = tree.load_git(handle.commit(commit).tree)
        edited = dict(committed)
        edited["skills/skill0/part0.md"] = committed["skills/skill0/part0.md"] + "One more rule.\n"
        started = time.perf_counter()
        ws = Workspace.create(repo, commit, tree=tree, frozen=frozen, parent=base)
        create_seconds = time.perf_counter() - started
        try:
            resets: list[float] = []
            checks: list[float] = []
            unchecked: list[float] = []
            ws.reset(committed)
            for i in range(repeats):
                state = edited if i % 2 == 0 else committed
                ws.new_run_scratch()  # a run would happen here
                t0 = time.perf_counter()
                result = ws.check()
                checks.append(time.perf_counter() - t0)
                if not result.ok:
                    raise SystemExit(f"bench workspace reported violations: {result.violations}")
                t0 = time.perf_counter()
                stats = ws.reset(state)
                resets.append(time.perf_counter() - t0)
                if stats.written != 1:
                    raise SystemExit(f"expected one file written per reset, got {stats}")
            for i in range(max(3, repeats // 4)):
                ws.new_run_scratch()
                t0 = time.perf_counter()
                ws.reset(edited if i % 2 == 0 else committed)  # no check: scans by itself
                unchecked.append(time.perf_counter() - t0)
            entries = sum(len(names) + len(dirs) for _, dirs, names in os.walk(ws.root))
        finally:
            ws.close()
        return {
            "files": entries,
            "repeats": repeats,
            "create_seconds": round(create_seconds, 3),
            "reset_ms": median_ms(resets),
            "reset_p90_ms": round(statistics.quantiles(resets, n=10)[-1] * 1000, 3)
            if len(resets) >= 10 else median_ms(resets),
            "check_ms": median_ms(checks),
            "reset_unchecked_ms": median_ms(unchecked),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_reset(files: int, repeats: int, *, progress: bool = True,
              scaling_run: bool = True) -> dict[str, Any]:
    """The ``reset`` part of the record: ``files`` / 10 and ``files`` entries.

    ``scaling_run=False`` measures the ``files`` repository only (the quick
    mode of ``python -m bench``, where building a second repository costs more
    than it tells).
    """
    started = time.perf_counter()
    scaling = []
    sizes = {max(files // 10, 100), files} if scaling_run else {files}
    for count in sorted(sizes):
        if progress:
            print(f"  reset: {count} files, {repeats} repeats ...", file=sys.stderr, flush=True)
        scaling.append(measure_reset(count, repeats))
    largest = scaling[-1]
    return {
        "reset_ms_10k_files": largest["reset_ms"],
        "check_ms_10k_files": largest["check_ms"],
        "target_reset_ms": TARGET_RESET_MS,
        "meets_reset_target": largest["reset_ms"] <= TARGET_RESET_MS,
        "workspace": {
            "change": "one artifact file edited, then reverted (alternating)",
            "elapsed_seconds": round(time.perf_counter() - started, 1),
            "runs": scaling,
        },
    }


# ---------------------------------------------------------------- per-candidate overhead

OVERHEAD_BACKENDS = ("local", "bwrap", "docker")
OVERHEAD_TARGETS = {"local": 1.3, "bwrap": 1.3, "docker": 2.0}
FULL_ROUNDS = 30
QUICK_ROUNDS = 5
WARMUP_ROUNDS = 1
SKILL = "skills/notes/SKILL.md"
TEST_FILE = "tests/test_notes.py"
AGENT_TESTS = """\
import pathlib

SKILL = pathlib.Path(__file__).resolve().parents[1] / "skills" / "notes" / "SKILL.md"


def test_skill_is_there():
    assert SKILL.is_file()


def test_skill_has_a_title():
    assert SKILL.read_text(encoding="utf-8").startswith("# ")


def test_arithmetic():
    assert 2 + 3 == 5
"""
TASKS = tuple(f"{TEST_FILE}::{name}" for name in
              ("test_skill_is_there", "test_skill_has_a_title", "test_arithmetic"))
BARE_ARGV = ("-m", "pytest", "-q", "-p", "no:cacheprovider", TEST_FILE)


def candidate(number: int) -> dict[str, str]:
    """The artifact of candidate ``number``: a text no earlier candidate had."""
    return {SKILL: f"# Notes\n\nCandidate {number}: keep answers short.\n"}


def build_agent_repo(path: Path) -> str:
    """The small agent repository of the overhead part, committed; returns the commit."""
    files = {"pytest.ini": "[pytest]\ntestpaths = tests\n", TEST_FILE: AGENT_TESTS,
             **candidate(0)}
    return commit_repo(path, files)


def _bare_run(checkout: Path, state: Mapping[str, str], env: Mapping[str, str]) -> float:
    """Seconds of one bare child pytest in ``checkout`` holding ``state`` (written untimed)."""
    for name, text in state.items():
        (checkout / name).write_text(text, encoding="utf-8")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *BARE_ARGV], cwd=checkout, env=dict(env),
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or f"{len(TASKS)} passed" not in done.stdout:
        raise SystemExit(f"the bare pytest run failed (exit {done.returncode}); its output:\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def _evaluation(verifier: SandboxedVerifier, state: Mapping[str, str]) -> float:
    """Seconds of one uncached evaluation of the three tests; every one must pass."""
    started = time.perf_counter()
    samples = verifier.evaluate(state, TASKS, 1)
    seconds = time.perf_counter() - started
    rewards = {task: list(samples.rewards[task]) for task in TASKS}
    if any(values != [1.0] for values in rewards.values()):
        why = verifier.candidate_error(state) or verifier.disqualification(state)
        raise SystemExit(f"a {verifier.backend.name} evaluation did not pass every test: "
                         f"{rewards}{f' ({why})' if why else ''}")
    return seconds


def _verifier(repo: Path, commit: str, name: str, parent: Path
              ) -> tuple[SandboxedVerifier | None, str | None]:
    """The verifier of backend ``name``, or None and why that backend cannot run here."""
    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        return None, reason
    tree = FileTree(["skills"])
    return SandboxedVerifier(repo, commit, TaskSplit(train=TASKS), tree=tree,
                             frozen=FrozenSet(artifact_roots=tree.roots), backend=backend,
                             cache=None, workspace_parent=parent,
                             # the -p options of PYTEST_ADDOPTS, as pytest --evolve passes
                             # them: the bare run reads that variable too
                             pytest_args=plugin_args((), os.environ)), None


def _spread(values: Sequence[float]) -> dict[str, float]:
    p90 = statistics.quantiles(values, n=10)[-1] if len(values) >= 10 else max(values)
    return {"median_ms": median_ms(values), "p90_ms": round(p90 * 1000, 3),
            "min_ms": round(min(values) * 1000, 3)}


def measure_overhead(
    rounds: int = FULL_ROUNDS,
    backends: Sequence[str] = OVERHEAD_BACKENDS,
    *,
    workdir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The ``overhead`` part of the record: evaluations against bare runs, interleaved.

    Keys: ``overhead`` {backend: ratio of medians, None when skipped},
    ``candidate_ms`` {"bare" and each backend: median ms}, ``overhead_targets``,
    ``meets_overhead_target`` {backend: bool, None when skipped} and the
    details under ``candidate`` (spread per column, the median of the per-round
    ratios, skip reasons, the parameters).
    """
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="agentdescent-bench-", dir=workdir))
    verifiers: dict[str, SandboxedVerifier] = {}
    skipped: dict[str, str] = {}
    try:
        repo = base / "repo"
        repo.mkdir()
        commit = build_agent_repo(repo)
        checkout = base / "checkout"
        git.Repo.clone_from(str(repo), str(checkout), env=GIT_ENV).close()
        bare_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # as the sandboxed child
        (base / "workspaces").mkdir()
        for name in backends:
            made, reason = _verifier(repo, commit, name, base / "workspaces")
            if made is None:
                skipped[name] = reason or "unavailable"
                if progress:
                    print(f"  overhead: {name} skipped: {reason}", file=sys.stderr, flush=True)
            else:
                verifiers[name] = made
        times: dict[str, list[float]] = {"bare": [], **{name: [] for name in verifiers}}
        number = 0
        for index in range(WARMUP_ROUNDS + rounds):
            row: dict[str, float] = {}
            number += 1
            row["bare"] = _bare_run(checkout, candidate(number), bare_env)
            for name, verifier in list(verifiers.items()):
                number += 1
                try:
                    row[name] = _evaluation(verifier, candidate(number))
                except BackendError as exc:
                    if index >= WARMUP_ROUNDS:
                        raise
                    # The probe passed but the sandbox cannot start here: say so, go on.
                    skipped[name] = f"{exc.__class__.__name__}: {exc}"
                    verifiers.pop(name).close()
                    times.pop(name)
            if index < WARMUP_ROUNDS:
                continue
            for name, seconds in row.items():
                times[name].append(seconds)
            if progress:
                shown = ", ".join(f"{n} {s * 1000:.0f}" for n, s in row.items())
                print(f"  overhead: round {index + 1 - WARMUP_ROUNDS}/{rounds} (ms): {shown}",
                      file=sys.stderr, flush=True)
    finally:
        for verifier in verifiers.values():
            verifier.close()
        shutil.rmtree(base, ignore_errors=True)
    bare = statistics.median(times["bare"])
    overhead: dict[str, float | None] = {}
    meets: dict[str, bool | None] = {}
    columns: dict[str, Any] = {"bare": _spread(times["bare"])}
    for name in backends:
        if name in skipped:
            overhead[name] = meets[name] = None
            columns[name] = {"skipped": skipped[name]}
            continue
        ratio = round(statistics.median(times[name]) / bare, 3)
        overhead[name], meets[name] = ratio, ratio <= OVERHEAD_TARGETS[name]
        paired = [b / a for a, b in zip(times["bare"], times[name], strict=True)]
        columns[name] = {**_spread(times[name]),
                         "median_round_ratio": round(statistics.median(paired), 3)}
    return {
        "overhead": overhead,
        "candidate_ms": {name: col["median_ms"] for name, col in columns.items()
                         if "median_ms" in col},
        "overhead_targets": {name: OVERHEAD_TARGETS[name] for name in backends},
        "meets_overhead_target": meets,
        "candidate": {
            "measures": "one SandboxedVerifier.evaluate(new artifact, 3 tests, repeats=1), "
                        "cache=None, against a bare child pytest in a plain clone",
            "bare_command": "python " + " ".join(BARE_ARGV),
            "bare_env": "the caller's environment plus PYTHONDONTWRITEBYTECODE=1",
            "tests": list(TASKS),
            "rounds": rounds,
            "warmup_rounds": WARMUP_ROUNDS,
            "order": ["bare", *[n for n in backends if n not in skipped]],
            "elapsed_seconds": round(time.perf_counter() - started, 1),
            "columns": columns,
        },
    }


# ---------------------------------------------------------------- record, table, command line

PARTS = ("reset", "overhead")


def _versions() -> dict[str, str]:
    """Versions of the tools the figures depend on (those found here)."""
    found = {"git": str(git.Git().version()).replace("git version ", "")}
    for name, argv in (("bwrap", ["bwrap", "--version"]),
                       ("docker", ["docker", "version", "--format", "{{.Server.Version}}"])):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            found[name] = done.stdout.strip().replace("bubblewrap ", "")
    return found


def meets_targets(record: Mapping[str, Any]) -> bool:
    """True when no measured figure misses its target (a skipped backend misses nothing)."""
    if record.get("meets_reset_target") is False:
        return False
    return all(ok is not False for ok in record.get("meets_overhead_target", {}).values())


def table(record: Mapping[str, Any]) -> str:
    """The docs table: per-candidate medians and ratios, then the reset figure."""
    lines: list[str] = []
    if "overhead" in record:
        cand = record["candidate"]
        lines += [
            f"{cand['rounds']} interleaved rounds (+{cand['warmup_rounds']} warm-up), medians; "
            f"{record['machine']['cpus']} CPUs, Python {record['machine']['python']}, "
            f"{record['date']}.",
            "",
            "| run | median (ms) | p90 (ms) | ratio to bare | target | verdict |",
            "|---|---:|---:|---:|---:|---|",
        ]
        bare = cand["columns"]["bare"]
        lines.append(f"| bare `python {' '.join(BARE_ARGV)}` | {bare['median_ms']:.0f} "
                     f"| {bare['p90_ms']:.0f} | 1.00x | | |")
        for name, ratio in record["overhead"].items():
            col = cand["columns"][name]
            target = f"≤ {record['overhead_targets'][name]:.1f}x"
            if ratio is None:
                lines.append(f"| `{name}` evaluation | skipped: {col['skipped']} | | | {target} "
                             "| not measured |")
                continue
            verdict = "meets" if record["meets_overhead_target"][name] else "misses"
            lines.append(f"| `{name}` evaluation | {col['median_ms']:.0f} | {col['p90_ms']:.0f} "
                         f"| {ratio:.2f}x | {target} | {verdict} |")
    if "reset_ms_10k_files" in record:
        verdict = "meets" if record["meets_reset_target"] else "misses"
        runs = record["workspace"]["runs"]
        lines += ["", f"Workspace reset of a one-file change in a {runs[-1]['files']:,}-entry "
                      f"workspace (`reset_ms_10k_files`): {record['reset_ms_10k_files']} ms "
                      f"median — {verdict} the ≤ {record['target_reset_ms']:.0f} ms target "
                      f"(the frozen check after a run: {record['check_ms_10k_files']} ms)."]
    return "\n".join(lines).strip("\n")


def summary(record: Mapping[str, Any]) -> str:
    lines: list[str] = []
    if "workspace" in record:
        lines += ["| Files | Create (s) | Reset after check (ms) | Check (ms) "
                  "| Reset, own scan (ms) |", "|---|---|---|---|---|"]
        for r in record["workspace"]["runs"]:
            lines.append(f"| {r['files']} | {r['create_seconds']} | {r['reset_ms']} "
                         f"(p90 {r['reset_p90_ms']}) | {r['check_ms']} "
                         f"| {r['reset_unchecked_ms']} |")
        lines.append("")
    lines.append(table(record))
    lines.append(f"\nPython {record['machine']['python']}, {record['machine']['platform']}.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_REPEATS} resets, {QUICK_ROUNDS} overhead rounds; "
                             "print only (no files written)")
    parser.add_argument("--json", action="store_true", help="print the JSON record")
    parser.add_argument("--part", action="append", choices=PARTS,
                        help="measure only this part (repeatable); the recorded keys of the "
                             "other part are kept in the results file")
    parser.add_argument("--files", type=int, default=DEFAULT_FILES,
                        help=f"files outside the artifact (default {DEFAULT_FILES})")
    parser.add_argument("--repeats", type=int, help=f"resets measured (default {FULL_REPEATS})")
    parser.add_argument("--rounds", type=int,
                        help=f"overhead rounds measured (default {FULL_ROUNDS})")
    parser.add_argument("--backend", action="append", choices=OVERHEAD_BACKENDS,
                        help="overhead of this backend only (repeatable; default all three); "
                             "prints only, as the record keeps all three")
    parser.add_argument("--no-write", action="store_true",
                        help="do not write the results file or the docs table")
    args = parser.parse_args(argv)
    repeats = args.repeats or (QUICK_REPEATS if args.quick else FULL_REPEATS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    if repeats < 2 or rounds < 2 or args.files < 1:
        parser.error("--repeats and --rounds must be at least 2 and --files at least 1")
    parts = tuple(args.part or PARTS)
    started = time.perf_counter()
    record: dict[str, Any] = {
        "benchmark": "sandbox",
        "command": "python -m bench.sandbox",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(**_versions()),
    }
    if "reset" in parts:
        record.update(run_reset(args.files, repeats, progress=not args.json))
    if "overhead" in parts:
        record.update(measure_overhead(rounds, tuple(args.backend or OVERHEAD_BACKENDS),
                                       progress=not args.json))
    record["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    record["quick"] = bool(args.quick)
    write = not (args.quick or args.no_write or args.backend)
    if write and RESULTS.exists():
        # The part not measured now keeps its recorded keys.
        record = {**json.loads(RESULTS.read_text(encoding="utf-8")), **record}
    print(json.dumps(record, indent=2) if args.json else summary(record))
    if write:
        publish(record, RESULTS, DOC, "sandbox-table", table(record), announce=not args.json)
    return 0 if meets_targets(record) else 1


if __name__ == "__main__":
    raise SystemExit(main())
