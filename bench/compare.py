"""The tables ``python -m bench`` regenerates in ``docs/performance.md`` from ``bench.json``.

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
markers (see :func:`bench.records.refresh_doc`); a part with no record, or
whose record is an error, leaves its table as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import ledger, peer
from bench.records import refresh_doc

TARGETS = {
    "speedup_sync_8": ">= 5x",
    "speedup_async_8": ">= 6x",
    "false_accept": "<= 5 %",
    "power": ">= 90 %",
    "reset_ms_10k_files": "<= 50 ms",
    "overhead": "`local`, `bwrap` <= 1.3x; `docker` <= 2x",
    "commit_ms": "flat as versions grow",
}
SCENARIOS = (
    ("deterministic", "Deterministic: one real fix accepted"),
    ("flaky-no-effect", "Flaky (p = 0.6), no effect: accepted (false accept, ≤ 5 %)"),
    ("flaky-no-effect-p09", "Flaky (p = 0.9), no effect: accepted (≤ 5 %)"),
    ("graded-no-effect", "Graded rewards, uniform noise, no effect: accepted (≤ 5 %)"),
    ("flaky-real-effect", "Flaky, real effect: accepted (power, ≥ 90 %)"),
)
POLICIES = (("betting", "this project (`betting`, default)"),
            ("paired", "`paired` (permutation test)"),
            ("beta", "reference (`beta`)"))


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _shown(key: str, value: Any) -> str:
    if value is None:
        return "not measured"
    if key.startswith("speedup"):
        return f"{value:.2f}x"
    if key in ("false_accept", "power", "false_accept_reference", "power_reference"):
        return _pct(value)
    if key == "reset_ms_10k_files":
        return f"{value:.3f} ms"
    if key == "overhead":
        return ", ".join(f"`{k}` {v:.2f}x" if v is not None else f"`{k}` skipped"
                         for k, v in value.items())
    if key == "commit_ms":
        return ", ".join(f"{int(k):,} versions: {v:.1f} ms" for k, v in value.items())
    return str(value)


def summary_table(summary: Mapping[str, Any]) -> str:
    """One row per headline key, with its target where the issues set one."""
    lines = ["| key | value | target |", "|---|---|---|"]
    for key in ("speedup_sync_8", "speedup_async_8", "false_accept", "power",
                "false_accept_reference", "power_reference", "overhead",
                "reset_ms_10k_files", "commit_ms"):
        lines.append(f"| `{key}` | {_shown(key, summary.get(key))} | {TARGETS.get(key, '')} |")
    seconds = summary.get("seconds", {})
    lines += ["", f"Measured {summary.get('date', '?')} on {summary['machine']['cpus']} CPUs, "
                  f"Python {summary['machine']['python']}; seconds per part: "
                  + ", ".join(f"{part} {s:.0f}" for part, s in seconds.items()) + "."]
    return "\n".join(lines)


def acceptance_table(record: Mapping[str, Any]) -> str:
    """This project's default policy, the permutation test and the reference's Beta rule."""
    rows = {r["policy"]: {s["scenario"]: s for s in r["results"]} for r in record["policies"]}
    shown = [(key, label) for key, label in POLICIES if key in rows]

    def cell(policy: str, scenario: str) -> str:
        r = rows[policy].get(scenario)
        if r is None:
            return "not measured"
        return f"{_pct(r['rate'])} ({_pct(r['ci_low'])}–{_pct(r['ci_high'])})"

    lines = ["| scenario | " + " | ".join(label for _k, label in shown) + " |",
             "|---|" + "---:|" * len(shown)]
    for scenario, label in SCENARIOS:
        lines.append(f"| {label} | " + " | ".join(cell(k, scenario) for k, _l in shown) + " |")
    by_policy = {r["policy"]: r for r in record["policies"]}
    runs = [f"{by_policy[key]['runs_per_null_candidate_shared_screen']:.1f}"
            for key, _label in shown]
    lines.append("| task runs per no-effect candidate, base included (≤ 60) | "
                 + " | ".join(runs) + " |")
    betting_trials = record.get("trials_default_policy", record["trials"])
    lines += ["", f"{betting_trials} simulated candidates per cell for `betting`, "
                  f"{record['trials']} for the others, exact 95 % intervals, "
                  f"seed {record['seed']}, {record['parameters']['tasks']} tasks."]
    return "\n".join(lines)


def refresh_tables(doc: Path, summary: Mapping[str, Any]) -> None:
    """Rewrite every table of ``doc`` that ``summary`` (``bench.json``) has data for."""
    records = summary.get("records", {})
    refresh_doc(doc, "bench-summary", summary_table(summary))
    if "policies" in records.get("acceptance", {}):
        refresh_doc(doc, "acceptance-compare", acceptance_table(records["acceptance"]))
    if "commit_ms" in records.get("ledger", {}):
        refresh_doc(doc, "ledger-table", ledger.table(records["ledger"]))
    if "peer" in records and "error" not in records["peer"]:
        refresh_doc(doc, "peer-table", peer.table(records["peer"]))
