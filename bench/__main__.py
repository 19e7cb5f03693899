"""Every benchmark in one command: ``python -m bench [--quick] [--json] [--only PART ...]``.

    python -m bench                    # full run (~20 min): records results, regenerates docs
    python -m bench --quick            # every part on small workloads (< 1 min); writes nothing
    python -m bench --quick --json     # the same, one JSON object on stdout (what CI runs)
    python -m bench --only peer ledger # some parts only

Parts: ``parallel`` (speed-up of 8 workers over 1, sync and async),
``acceptance`` (false-accept and power of this project's default policy and of
the reference Beta policy), ``sandbox`` (per-candidate overhead per backend,
workspace reset on 10,000 files), ``ledger`` (commit and read latency at 10,
100 and 1,000 versions), ``peer`` (the stub workload through this project
and through the reference implementation ``agentdescent``, in one process) and
``selection`` (test runs per candidate of ``--evolve-select all`` and
``reads`` on ``examples/skill-library``, against the tests an edit can reach) and
``cluster`` (evaluations per second on an embedded Dask cluster of 1, 2 and 4
workers against the local pool, 100 ms I/O-bound tests; issue 21).

``--json`` prints exactly one object on stdout, with the keys
``speedup_sync_8``, ``speedup_async_8``, ``false_accept``, ``power``,
``false_accept_reference``, ``power_reference``, ``overhead`` {backend: ratio},
``reset_ms_10k_files``, ``commit_ms`` {versions: ms} and ``peer`` {metric:
{ours, reference}} (``{"error": ...}`` when the reference cannot be installed),
``runs_per_candidate`` {all, reads}, ``ratio_to_affected`` {all, reads},
``selection_misses``, ``cluster_throughput`` {workers: evaluations per second}
and ``cluster_overhead_ms`` {workers: ms per evaluation against the local
pool}; a part not run, or one that failed,
leaves its keys null and says why under ``errors``.  Progress goes to
stderr.  A quick run's figures only show that every part runs (its sandbox
reset, for one, is timed on 1,000 files, not 10,000).

A full run (no ``--quick``, every part) writes ``bench/results/bench.json``
(the keys above plus every part's record), updates the parts' own records
(``parallel.json``'s ``scaled`` series, ``sandbox.json``, ``ledger.json``,
``peer.json``, ``selection.json``, ``cluster.json``) and regenerates the tables
of ``docs/performance.md``.  A full
run of some parts (``--only``) updates those parts' records and tables and
merges them into ``bench.json``.  A quick run writes no file: its workloads
are too small for its figures to stand for anything but "it runs".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import acceptance, cluster, ledger, parallel, peer, sandbox, selection
from bench.compare import refresh_tables
from bench.records import machine, publish, write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SUMMARY = RESULTS / "bench.json"
DOC = ROOT / "docs" / "performance.md"

PARTS = ("parallel", "acceptance", "sandbox", "ledger", "peer", "selection", "cluster")
KEYS: dict[str, tuple[str, ...]] = {
    "parallel": ("speedup_sync_8", "speedup_async_8"),
    "acceptance": ("false_accept", "power", "false_accept_reference", "power_reference"),
    "sandbox": ("overhead", "reset_ms_10k_files"),
    "ledger": ("commit_ms",),
    "peer": ("peer",),
    "selection": ("runs_per_candidate", "ratio_to_affected", "selection_misses"),
    "cluster": ("cluster_throughput", "cluster_overhead_ms"),
}

# Sizes of the full run, chosen so that the first five parts finish in about 20 minutes
# on a 2-CPU machine (the one-worker runs of the parallel part alone take ~8).
ACCEPTANCE_TRIALS = {True: acceptance.QUICK_TRIALS, False: acceptance.FULL_TRIALS}
"""Simulated candidates per cell: a full run uses the standalone record's 2,000 (20,000 for
the default policy) and its seed, so docs/performance.md and docs/statistics.md show the
same figures."""
SANDBOX_RESETS = {True: 10, False: 100}
SANDBOX_ROUNDS = {True: 2, False: 15}
# A quick run times the reset on a 1,000-file repository (building 10,000
# files costs more than the whole quick budget on a busy machine); the key
# keeps its name and the record says how many files there were.
SANDBOX_FILES = {True: 1_000, False: sandbox.DEFAULT_FILES}


def run_parallel(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The headline series (``eval_concurrency = n_workers``) at 1, 4 and 8 workers."""
    work = parallel.QUICK if quick else parallel.FULL
    max_seconds = 60.0 if quick else 900.0
    rows = parallel.measure_series(work, ("scaled",), max_seconds=max_seconds)
    record = parallel.summarize(work, rows, max_seconds=max_seconds)
    record["quick"] = quick
    keys = {"speedup_sync_8": record.get("speedup_sync_8"),
            "speedup_async_8": record.get("speedup_async_8")}
    if write:
        # The other series of the standalone bench keep their recorded runs.
        kept: list[dict[str, Any]] = []
        if parallel.RESULTS.exists():
            old = json.loads(parallel.RESULTS.read_text(encoding="utf-8"))
            kept = [r for r in old.get("runs", []) if r.get("series") != "scaled"]
        merged = parallel.summarize(work, kept + rows, max_seconds=max_seconds)
        merged["quick"] = False
        publish(merged, parallel.RESULTS, parallel.DOC, "parallel-table", parallel.table(merged))
    return keys, record


def _rate(record: dict[str, Any], policy: str, scenario: str) -> float:
    row = next(r for r in record["policies"] if r["policy"] == policy)
    return float(next(r for r in row["results"] if r["scenario"] == scenario)["rate"])


def run_acceptance(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenarios through the default ``betting``, ``paired`` and the reference ``beta``."""
    record = acceptance.run(ACCEPTANCE_TRIALS[quick], acceptance.DEFAULT_SEED,
                            factor=1 if quick else acceptance.DEFAULT_POLICY_FACTOR)
    record["quick"] = quick
    keys = {
        "false_accept": _rate(record, "betting", "flaky-no-effect"),
        "power": _rate(record, "betting", "flaky-real-effect"),
        "false_accept_reference": _rate(record, "beta", "flaky-no-effect"),
        "power_reference": _rate(record, "beta", "flaky-real-effect"),
    }
    # acceptance.json stays the standalone record behind docs/statistics.md
    # (2,000 trials, 20,000 for betting); this run's record lives in bench.json.
    return keys, record


def run_sandbox(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-candidate overhead of every backend, and the 10,000-file workspace reset."""
    record: dict[str, Any] = {
        "benchmark": "sandbox",
        "command": "python -m bench --only sandbox",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(**sandbox._versions()),
    }
    record.update(sandbox.run_reset(SANDBOX_FILES[quick], SANDBOX_RESETS[quick],
                                    scaling_run=not quick))
    record.update(sandbox.measure_overhead(SANDBOX_ROUNDS[quick]))
    record["quick"] = quick
    keys = {"overhead": record["overhead"], "reset_ms_10k_files": record["reset_ms_10k_files"]}
    if write:
        publish(record, sandbox.RESULTS, sandbox.DOC, "sandbox-table", sandbox.table(record))
    return keys, record


def run_ledger(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Commit and read latency at each checkpoint of a growing history."""
    checkpoints = ledger.QUICK_CHECKPOINTS if quick else ledger.FULL_CHECKPOINTS
    record = {"benchmark": "ledger", "date": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "machine": machine(), **ledger.measure(checkpoints), "quick": quick}
    if write:
        write_json(RESULTS / "ledger.json", record)
    return {"commit_ms": record["commit_ms"]}, record


def run_peer(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both engines on the stub workload; ``{"error"}`` when the reference is unavailable."""
    record = peer.run(quick)
    record = {"benchmark": "peer", "date": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "machine": machine(), "quick": quick, **record}
    value = {"error": record["error"]} if "error" in record else record["metrics"]
    if write:
        write_json(RESULTS / "peer.json", record)
    return {"peer": value}, record


def run_selection(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both ``--evolve-select`` modes on the skill-library example (issue 20)."""
    record = selection.run(quick)
    keys = {"runs_per_candidate": record["runs_per_candidate"],
            "ratio_to_affected": record["ratio_to_affected"],
            "selection_misses": record["misses"]}
    if write:
        publish(record, selection.RESULTS, DOC, "selection-table", selection.table(record))
    return keys, record


def run_cluster(quick: bool, write: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluation throughput on an embedded Dask cluster against the local pool (issue 21)."""
    record = cluster.run(quick)
    keys = {"cluster_throughput": record["cluster_throughput"],
            "cluster_overhead_ms": record["cluster_overhead_ms"]}
    if write:
        publish(record, cluster.RESULTS, cluster.DOC, "cluster-table", cluster.table(record))
    return keys, record


RUNNERS: dict[str, Callable[[bool, bool], tuple[dict[str, Any], dict[str, Any]]]] = {
    "parallel": run_parallel,
    "acceptance": run_acceptance,
    "sandbox": run_sandbox,
    "ledger": run_ledger,
    "peer": run_peer,
    "selection": run_selection,
    "cluster": run_cluster,
}


def run(parts: Sequence[str], *, quick: bool) -> dict[str, Any]:
    """Run ``parts`` in order; a part that fails leaves its keys null and the rest still run."""
    write = not quick
    summary: dict[str, Any] = {key: None for part in PARTS for key in KEYS[part]}
    summary.update({"quick": quick, "parts": list(parts), "errors": {}, "seconds": {},
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "machine": machine()})
    records: dict[str, Any] = {}
    for part in parts:
        print(f"bench: {part}{' (quick)' if quick else ''} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            # Anything a part prints goes to stderr: stdout is the one JSON object.
            with contextlib.redirect_stdout(sys.stderr):
                keys, record = RUNNERS[part](quick, write)
        except (Exception, SystemExit) as exc:  # one part must not sink the rest
            traceback.print_exc(file=sys.stderr)
            summary["errors"][part] = f"{exc.__class__.__name__}: {exc}"
            keys, record = {}, {"error": summary["errors"][part]}
        seconds = round(time.perf_counter() - started, 1)
        summary["seconds"][part] = seconds
        summary.update(keys)
        records[part] = record
        print(f"bench: {part} done in {seconds} s", file=sys.stderr, flush=True)
    if write:
        stored: dict[str, Any] = {}
        if SUMMARY.exists():
            stored = json.loads(SUMMARY.read_text(encoding="utf-8"))
        # Parts run now replace their recorded keys; the others keep theirs.
        merged_records = {**stored.get("records", {}), **records}
        merged = {**{k: stored.get(k) for part in PARTS for k in KEYS[part]}}
        for part in parts:
            merged.update({k: summary[k] for k in KEYS[part]})
        merged.update({"date": summary["date"], "machine": summary["machine"],
                       "seconds": {**stored.get("seconds", {}), **summary["seconds"]},
                       "errors": {**{p: e for p, e in stored.get("errors", {}).items()
                                     if p not in parts}, **summary["errors"]},
                       "records": merged_records})
        write_json(SUMMARY, merged)
        refresh_tables(DOC, merged)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small workloads (under a minute); writes no file")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with every key on stdout")
    parser.add_argument("--only", nargs="+", choices=PARTS, metavar="PART",
                        help=f"run only these parts ({', '.join(PARTS)})")
    args = parser.parse_args(argv)
    parts = [p for p in PARTS if p in (args.only or PARTS)]
    started = time.perf_counter()
    summary = run(parts, quick=args.quick)
    summary["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key in (k for part in parts for k in KEYS[part]):
            print(f"{key}: {json.dumps(summary[key])}")
        for part, error in summary["errors"].items():
            print(f"{part}: FAILED: {error}")
        if not args.quick:
            print(f"wrote {SUMMARY.relative_to(ROOT)} and the tables in "
                  f"{DOC.relative_to(ROOT)}")
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
