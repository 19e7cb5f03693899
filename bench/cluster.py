"""Evaluation throughput on an embedded Dask cluster, and its overhead against the local pool.

    python -m bench --only cluster            # full run: records results and the docs table
    python -m bench --only cluster --quick    # a smaller workload; prints only

The workload (issue 21): a repository of ``tests`` marked tests that each sleep
100 ms (I/O-bound, standing in for a model call or a tool) and pass.  One
*evaluation* is one (test, repeat) run; a measurement evaluates a fresh
candidate (its skill file differs each time, so nothing comes from the cache)
on every test at ``repeats`` repeats through a :class:`SandboxedVerifier`
under the ``local`` backend, and counts evaluations per second of wall clock.

It is measured on the local pool (``eval_concurrency`` = N) and on an
embedded ``LocalCluster`` of N single-threaded worker processes
(``--evolve-executor dask://``), for N in ``workers``.  Each configuration
first evaluates one candidate that is not timed (the cluster ships the frozen
tree and builds its workspaces then), then ``rounds`` timed ones.  The
overhead per evaluation at N is (cluster seconds − local seconds) / evaluations,
in milliseconds: what a run pays for sending chunks out instead of starting
the children here.  The cluster's start-up is recorded apart
(``cluster_start_s``).  On one machine the cluster cannot beat the local pool
(both start the same children on the same CPUs); what it buys is reaching
machines beyond this one (docs/scale.md).

A full run writes ``bench/results/cluster.json`` and the table between the
``cluster-table`` markers of ``docs/performance.md``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.records import commit_repo, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "cluster.json"
DOC = ROOT / "docs" / "performance.md"



@dataclass(frozen=True)
class Work:
    tests: int
    repeats: int
    rounds: int
    workers: tuple[int, ...]


FULL = Work(tests=32, repeats=2, rounds=3, workers=(1, 2, 4))
QUICK = Work(tests=6, repeats=1, rounds=1, workers=(1, 2))

_TEST = '''\
import time

import pytest


@pytest.mark.parametrize("n", range({tests}))
def test_io(n):
    time.sleep(0.1)
'''


def _repo(folder: Path, tests: int) -> tuple[Path, str, tuple[str, ...]]:
    repo = folder / "repo"
    head = commit_repo(repo, {
        "pytest.ini": "[pytest]\ntestpaths = tests\n",
        "skills/s/rules.md": "rules\n",
        "tests/test_io.py": _TEST.format(tests=tests),
    })
    return repo, head, tuple(f"tests/test_io.py::test_io[{n}]" for n in range(tests))


def _measure(repo: Path, head: str, tasks: Sequence[str], *, workers: int, repeats: int,
             rounds: int, cluster: bool) -> dict[str, Any]:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.evaluation.executor import ExecutorSpec
    from agentdescent_core.evaluation.protocol import TaskSplit
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.governance import FrozenSet
    from agentdescent_core.sandbox.local import LocalBackend

    executor = None
    start = 0.0
    if cluster:
        from agentdescent_core.evaluation.dask_executor import DaskExecutor

        began = time.perf_counter()
        executor = DaskExecutor.connect(ExecutorSpec("dask", workers=workers))
        start = time.perf_counter() - began
    tree = FileTree(["skills"])
    verifier = SandboxedVerifier(
        repo, head, TaskSplit(train=tuple(tasks)), tree=tree,
        frozen=FrozenSet(artifact_roots=tree.roots), backend=LocalBackend(), cache=None,
        eval_concurrency=workers, executor=executor,
        pytest_args=("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                     "-p", "no:anyio", "-p", "no:benchmark"))
    try:
        verifier.evaluate({"skills/s/rules.md": "warm-up\n"}, tasks, repeats)
        seconds = []
        for n in range(rounds):
            began = time.perf_counter()
            samples = verifier.evaluate({"skills/s/rules.md": f"candidate {n}\n"}, tasks,
                                        repeats)
            seconds.append(time.perf_counter() - began)
            assert samples.reward() == 1.0, "every test of the workload passes"
    finally:
        verifier.close()
        if executor is not None:
            executor.close()
    evaluations = len(tasks) * repeats
    median = statistics.median(seconds)
    return {"where": "cluster" if cluster else "local", "workers": workers,
            "evaluations": evaluations, "seconds": [round(s, 3) for s in seconds],
            "median_s": round(median, 3),
            "per_second": round(evaluations / median, 2),
            **({"cluster_start_s": round(start, 3)} if cluster else {})}


def run(quick: bool) -> dict[str, Any]:
    """Measure every configuration; the record :func:`table` shows."""
    from importlib.metadata import version

    work = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="agentdescent-bench-cluster-") as folder:
        repo, head, tasks = _repo(Path(folder), work.tests)
        rows = [_measure(repo, head, tasks, workers=workers, repeats=work.repeats,
                         rounds=work.rounds, cluster=cluster)
                for workers in work.workers for cluster in (False, True)]
    throughput = {str(r["workers"]): r["per_second"] for r in rows if r["where"] == "cluster"}
    local = {r["workers"]: r for r in rows if r["where"] == "local"}
    overhead = {str(r["workers"]): round(
        (r["median_s"] - local[r["workers"]]["median_s"]) / r["evaluations"] * 1000, 1)
        for r in rows if r["where"] == "cluster"}
    return {
        "benchmark": "cluster",
        "command": "python -m bench --only cluster",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(distributed=version("distributed")),
        "workload": {"tests": work.tests, "repeats": work.repeats, "rounds": work.rounds,
                     "sleep_s": 0.1, "backend": "local", "cpus": os.cpu_count()},
        "quick": quick,
        "runs": rows,
        "cluster_throughput": throughput,
        "cluster_overhead_ms": overhead,
    }


def table(record: dict[str, Any]) -> str:
    """Evaluations per second, local pool and cluster, at each worker count."""
    rows = {(r["where"], r["workers"]): r for r in record["runs"]}
    counts = sorted({r["workers"] for r in record["runs"]})
    lines = ["| workers | local pool (eval/s) | Dask cluster (eval/s) | "
             "overhead per evaluation | cluster start-up |",
             "|---:|---:|---:|---:|---:|"]
    for n in counts:
        here, there = rows[("local", n)], rows[("cluster", n)]
        lines.append(f"| {n} | {here['per_second']:.2f} | {there['per_second']:.2f} | "
                     f"{record['cluster_overhead_ms'][str(n)]:+.0f} ms | "
                     f"{there['cluster_start_s']:.1f} s |")
    work = record["workload"]
    lines += ["", f"{work['tests']} tests of 100 ms x {work['repeats']} repeats per candidate, "
                  f"`local` backend, median of {work['rounds']} candidates; measured "
                  f"{record['date']} on {record['machine']['cpus']} CPUs, Python "
                  f"{record['machine']['python']}, distributed "
                  f"{record['machine']['distributed']}."]
    return "\n".join(lines)
