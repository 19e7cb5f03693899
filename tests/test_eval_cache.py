"""The SQLite eval cache: keys, verdicts, persistence across instances, threads, bad files."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from agentdescent_core.evaluation.cache import EvalCache, EvalCacheError, Verdict
from agentdescent_core.evaluation.records import TestRecord

A, B = "a" * 64, "b" * 64
F, G = "f" * 64, "0" * 64


def rec(nodeid: str, repeat: int = 0, outcome: str = "passed", reward: float | None = 1.0,
        message: str = "") -> TestRecord:
    return TestRecord(nodeid=nodeid, outcome=outcome, reward=reward, repeat=repeat,
                      message=message, output="out", duration=0.1)


def test_records_round_trip_under_their_full_key(tmp_path: Path) -> None:
    with EvalCache(tmp_path / "eval.sqlite3") as cache:
        failed = rec("t.py::a", 1, "failed", 0.0, "assert 1 == 2")
        cache.put_many(A, F, [rec("t.py::a", 0), failed, rec("t.py::b", 0, "skipped", None)])
        assert cache.get(A, F, "t.py::a", 1) == failed
        assert cache.get(A, F, "t.py::a", 2) is None
        # any part of the key differing is a miss
        assert cache.get(B, F, "t.py::a", 0) is None
        assert cache.get(A, G, "t.py::a", 0) is None
        got = cache.get_many(A, F, [("t.py::a", 0), ("t.py::a", 1), ("t.py::b", 0),
                                    ("t.py::c", 0)])
        assert set(got) == {("t.py::a", 0), ("t.py::a", 1), ("t.py::b", 0)}
        assert got[("t.py::b", 0)].reward is None
        assert [r.repeat for r in cache.records(A, F, "t.py::a")] == [0, 1]
        assert len(cache) == 3
        # a re-run of the same key replaces the record
        cache.put(A, F, rec("t.py::a", 1, "passed", 0.5))
        assert cache.get(A, F, "t.py::a", 1) == rec("t.py::a", 1, "passed", 0.5)
        assert len(cache) == 3


def test_many_nodeids_are_looked_up_in_chunks(tmp_path: Path) -> None:
    with EvalCache(tmp_path / "eval.sqlite3") as cache:
        records = [rec(f"t.py::test_{i}") for i in range(1200)]
        cache.put_many(A, F, records)
        got = cache.get_many(A, F, [(r.nodeid, 0) for r in records] + [("t.py::x", 0)])
        assert len(got) == 1200


def test_verdicts_are_per_candidate(tmp_path: Path) -> None:
    with EvalCache(tmp_path / "eval.sqlite3") as cache:
        assert cache.verdict(A, F) is None
        verdict = Verdict("frozen-violation", "changed tests/test_x.py", "frozen-modified")
        cache.put_verdict(A, F, verdict)
        assert cache.verdict(A, F) == verdict
        assert cache.verdict(A, G) is None
        assert cache.verdict(B, F) is None
    with pytest.raises(ValueError, match="unknown verdict kind"):
        Verdict("bad-kind", "x")


def test_the_cache_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state" / "eval.sqlite3"
    first = EvalCache(path)
    first.put_many(A, F, [rec("t.py::a", 0), rec("t.py::a", 1, "failed", 0.0)])
    first.put_verdict(B, F, Verdict("collection-error", "SyntaxError in tests/test_x.py"))
    first.close()
    second = EvalCache(path)
    assert [r.outcome for r in second.records(A, F, "t.py::a")] == ["passed", "failed"]
    assert second.verdict(B, F) == Verdict("collection-error", "SyntaxError in tests/test_x.py")
    # two live instances on one file see each other's writes (WAL, separate connections)
    third = EvalCache(path)
    third.put(A, F, rec("t.py::b", 0))
    assert second.get(A, F, "t.py::b", 0) is not None
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    second.close()
    third.close()


def test_threads_share_one_instance(tmp_path: Path) -> None:
    cache = EvalCache(tmp_path / "eval.sqlite3")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(50):
                cache.put(A, F, rec(f"t.py::w{worker}", i))
                assert cache.get(A, F, f"t.py::w{worker}", i) is not None
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) == 400
    cache.close()
    with pytest.raises(EvalCacheError, match="closed"):
        cache.get(A, F, "t.py::w0", 0)


def test_a_file_that_is_not_a_cache_is_refused_with_advice(tmp_path: Path) -> None:
    path = tmp_path / "eval.sqlite3"
    path.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(EvalCacheError, match="delete the file"):
        EvalCache(path)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "eval.sqlite3"
    EvalCache(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(EvalCacheError, match="schema version 99"):
        EvalCache(path)
