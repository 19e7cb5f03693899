"""``python -m bench --quick --json`` runs and reports every key, typed (no timing is asserted).

The quick run is the benchmark's smoke test: its workloads are too small for
the figures to mean anything, so this checks that every part runs, that
stdout is one JSON object with every documented key of the documented type,
and that a quick run leaves the recorded full results alone.  It installs the
reference implementation into ``bench/.peer-venv`` on first use (from the
package index, as ``docs/performance.md`` says).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDED = [ROOT / "docs" / "performance.md", *sorted((ROOT / "bench" / "results").glob("*"))]


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _rate(value: Any) -> bool:
    return _number(value) and 0.0 <= value <= 1.0


def test_quick_json_run_has_every_key_typed() -> None:
    before = {path: path.read_bytes() for path in RECORDED}
    done = _bench("--quick", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)  # the whole of stdout is one object
    assert isinstance(summary, dict)
    assert summary["errors"] == {}, summary["errors"]
    assert "bench: parallel" in done.stderr  # the logs went to stderr

    assert _number(summary["speedup_sync_8"])
    assert summary["speedup_sync_8"] > 0
    assert _number(summary["speedup_async_8"])
    assert summary["speedup_async_8"] > 0
    for key in ("false_accept", "power", "false_accept_reference", "power_reference"):
        assert _rate(summary[key]), (key, summary[key])

    overhead = summary["overhead"]
    assert set(overhead) == {"local", "bwrap", "docker"}
    assert _number(overhead["local"])  # the other backends are None where they cannot run
    assert all(v is None or (_number(v) and v > 0) for v in overhead.values())
    assert _number(summary["reset_ms_10k_files"])

    commit_ms = summary["commit_ms"]
    assert set(commit_ms) == {"10", "100"}
    assert all(_number(v) and v > 0 for v in commit_ms.values())

    peer = summary["peer"]
    assert isinstance(peer, dict)
    assert peer
    if "error" in peer:  # the reference could not be installed here: said, not hidden
        assert isinstance(peer["error"], str)
        assert peer["error"]
        assert "peer: skipped" in done.stderr
    else:
        for metric, pair in peer.items():
            assert set(pair) == {"ours", "reference"}, metric
        for side in ("ours", "reference"):
            assert _rate(peer["false_accept"][side])
            assert _number(peer["seconds_sync_8"][side])
            assert peer["seconds_sync_8"][side] > 0
            assert _number(peer["wall_clock_ratio_sync_8"][side])

    for key in ("runs_per_candidate", "ratio_to_affected"):  # read-based selection
        assert set(summary[key]) == {"all", "reads"}, (key, summary[key])
        assert all(_number(v) and v > 0 for v in summary[key].values()), (key, summary[key])
    assert summary["selection_misses"] == 0
    # reads never re-runs more than all does
    assert summary["runs_per_candidate"]["reads"] <= summary["runs_per_candidate"]["all"]

    # evaluation on an embedded Dask cluster (issue 21): throughput and overhead per worker count
    assert set(summary["cluster_throughput"]) == {"1", "2"}, summary["cluster_throughput"]
    assert all(_number(v) and v > 0 for v in summary["cluster_throughput"].values())
    assert set(summary["cluster_overhead_ms"]) == {"1", "2"}
    assert all(_number(v) for v in summary["cluster_overhead_ms"].values())

    # A quick run must not overwrite the recorded full results or their tables.
    assert {path: path.read_bytes() for path in RECORDED} == before


def test_a_reference_that_cannot_be_installed_is_reported_and_the_rest_runs(
        tmp_path: Path) -> None:
    env = {**os.environ,
           "AGENTDESCENT_BENCH_PEER_VENV": str(tmp_path / "peer-venv"),
           # No index, no local wheels, no configuration: the install must fail.
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "",
           "PIP_EXTRA_INDEX_URL": ""}
    done = _bench("--quick", "--json", "--only", "ledger", "peer", env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert "agentdescent==" in summary["peer"]["error"]
    assert "peer: skipped" in done.stderr
    assert set(summary["commit_ms"]) == {"10", "100"}
    assert summary["speedup_sync_8"] is None
    assert summary["parts"] == ["ledger", "peer"]
