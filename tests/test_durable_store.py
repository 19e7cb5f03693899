"""The durable run store: runs, the idempotent event log, leases, snapshots, concurrency."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone

import pytest

from agentdescent_core.errors import AgentDescentError
from agentdescent_core.loop.durable import (
    Lease,
    LeaseHeld,
    RunStoreError,
    SqliteRunStore,
    UnknownRunError,
    holder_alive,
    holder_id,
)


@pytest.fixture
def store(tmp_path):
    with SqliteRunStore(tmp_path / "state" / "runs.sqlite3") as opened:
        yield opened


def test_the_file_is_created_in_wal_mode_with_its_parent(tmp_path) -> None:
    path = tmp_path / "deep" / "dir" / "runs.sqlite3"
    SqliteRunStore(path).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_run_goes_from_pending_to_a_final_status_with_its_result(store) -> None:
    run_id = store.create_run({"tenant": "t", "max_generations": 3})
    record = store.get_run(run_id)
    assert (record.status, record.key, record.result) == ("pending", None, None)
    assert record.config == {"tenant": "t", "max_generations": 3}
    store.set_status(run_id, "running")
    store.set_status(run_id, "completed", result={"stopped_reason": "target"})
    record = store.get_run(run_id)
    assert record.status == "completed"
    assert record.terminal
    assert record.result == {"stopped_reason": "target"}
    assert record.updated_at >= record.created_at


def test_a_terminal_status_is_final(store) -> None:
    run_id = store.create_run({})
    store.set_status(run_id, "failed", result={"stopped_reason": "error"})
    store.set_status(run_id, "failed")  # the same status again is harmless
    with pytest.raises(RunStoreError, match=r"already ended as 'failed'.*submit a new run"):
        store.set_status(run_id, "running")
    with pytest.raises(RunStoreError, match="unknown run status 'paused'"):
        store.set_status(run_id, "paused")


def test_submitting_with_a_key_returns_the_unfinished_run_of_that_key(store) -> None:
    first = store.create_run({"n": 1}, key="evolve:abc")
    assert store.create_run({"n": 2}, key="evolve:abc") == first
    assert store.create_run({"n": 3}, key="other") != first
    assert store.create_run({"n": 4}) != store.create_run({"n": 4})  # no key: always new
    store.set_status(first, "completed")
    second = store.create_run({"n": 5}, key="evolve:abc")
    assert second != first
    assert store.get_run(second).config == {"n": 5}


def test_runs_are_listed_newest_first_and_limited(store) -> None:
    ids = [store.create_run({"i": i}) for i in range(4)]
    assert [r.run_id for r in store.runs()] == ids[::-1]
    assert [r.run_id for r in store.runs(limit=2)] == ids[:1:-1]


def test_an_unknown_run_is_an_error_naming_it(store) -> None:
    with pytest.raises(UnknownRunError, match=r"no run 'nope' in the run store .*runs.sqlite3"):
        store.get_run("nope")
    with pytest.raises(KeyError):
        store.append_event("nope", "k", "kind", {})
    assert isinstance(UnknownRunError("x", store.path), AgentDescentError)


def test_appending_an_existing_key_is_a_no_op(store) -> None:
    run_id = store.create_run({})
    assert store.append_event(run_id, "generation:0", "generation", {"reward": 0.5})
    assert store.append_event(run_id, "generation:1", "generation", {"reward": 0.6})
    assert not store.append_event(run_id, "generation:0", "generation", {"reward": 0.9})
    events = store.events(run_id)
    assert [(e.seq, e.key, e.payload) for e in events] == [
        (1, "generation:0", {"reward": 0.5}), (2, "generation:1", {"reward": 0.6})]
    other = store.create_run({})
    assert store.append_event(other, "generation:0", "generation", {})  # keys are per run
    assert store.events(other)[0].seq == 1


def test_a_payload_that_is_not_json_is_refused_and_nothing_is_written(store) -> None:
    run_id = store.create_run({})
    with pytest.raises(RunStoreError, match="JSON-serialisable"):
        store.append_event(run_id, "k", "kind", {"bad": object()})
    with pytest.raises(RunStoreError, match="JSON-serialisable"):
        store.append_event(run_id, "k", "kind", {"nan": float("nan")})
    assert store.events(run_id) == []


def test_the_lease_is_held_by_one_holder_at_a_time(store) -> None:
    lease = store.acquire_lease("run-1", "worker-a", 60)
    assert isinstance(lease, Lease)
    assert lease.holder == "worker-a"
    assert lease.expires_at == pytest.approx(time.time() + 60, abs=5)
    with pytest.raises(LeaseHeld) as caught:
        store.acquire_lease("run-1", "worker-b", 60)
    err = caught.value
    assert (err.name, err.holder, err.expires_at) == ("run-1", "worker-a", lease.expires_at)
    message = str(err)
    assert "'worker-a'" in message
    iso = datetime.fromtimestamp(lease.expires_at, tz=timezone.utc).isoformat(timespec="seconds")
    assert f"until {iso}" in message
    assert "expires in 60 s" in message or "expires in 59 s" in message
    # The same holder renews; another name is independent.
    assert store.acquire_lease("run-1", "worker-a", 120).expires_at > lease.expires_at
    assert store.acquire_lease("run-2", "worker-b", 60).holder == "worker-b"


def test_an_expired_lease_is_taken_over_and_the_old_holder_has_lost_it(store) -> None:
    store.acquire_lease("run-1", "worker-a", 0.2)
    time.sleep(0.3)
    taken = store.acquire_lease("run-1", "worker-b", 60)
    assert taken.holder == "worker-b"
    with pytest.raises(LeaseHeld, match=r"was lost: it is now held by 'worker-b'"):
        store.renew_lease("run-1", "worker-a", 60)
    assert store.lease("run-1") == taken


def test_release_and_break(store) -> None:
    store.acquire_lease("run-1", "worker-a", 60)
    store.release_lease("run-1", "worker-b")  # not the holder: nothing happens
    assert store.lease("run-1") is not None
    store.release_lease("run-1", "worker-a")
    assert store.lease("run-1") is None
    store.acquire_lease("run-1", "worker-a", 60)
    store.break_lease("run-1")  # the caller knows worker-a is dead
    assert store.acquire_lease("run-1", "worker-b", 60).holder == "worker-b"
    with pytest.raises(RunStoreError, match="positive number of seconds"):
        store.acquire_lease("run-1", "worker-b", 0)


def test_a_snapshot_is_json_ready_and_complete(store) -> None:
    run_id = store.create_run({"a": 1}, key="k")
    store.append_event(run_id, "generation:0", "generation", {"reward": 0.5})
    store.acquire_lease(run_id, "worker-a", 60)
    snap = store.snapshot(run_id)
    assert json.loads(json.dumps(snap)) == snap
    assert snap["run"]["run_id"] == run_id
    assert snap["run"]["config"] == {"a": 1}
    assert [e["key"] for e in snap["events"]] == ["generation:0"]
    assert snap["leases"] == [{"name": run_id, "holder": "worker-a",
                               "expires_at": store.lease(run_id).expires_at}]
    with pytest.raises(UnknownRunError):
        store.snapshot("missing")


def test_threads_sharing_one_store_append_without_losing_or_duplicating(store) -> None:
    run_id = store.create_run({})

    def append(worker: int) -> None:
        for i in range(50):
            store.append_event(run_id, f"own:{worker}:{i}", "e", {})
            store.append_event(run_id, f"shared:{i}", "e", {"by": worker})

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = store.events(run_id)
    assert [e.seq for e in events] == list(range(1, 4 * 50 + 50 + 1))
    assert len({e.key for e in events}) == len(events)


_APPENDER = textwrap.dedent("""
    import sys
    from agentdescent_core.loop.durable import SqliteRunStore
    path, run_id, name = sys.argv[1:4]
    store = SqliteRunStore(path)
    new = 0
    for i in range(40):
        new += store.append_event(run_id, f"{name}:{i}", "e", {})
        new += store.append_event(run_id, f"shared:{i}", "e", {"by": name})
    print(new)
""")


def test_two_processes_append_to_the_same_file(tmp_path) -> None:
    path = tmp_path / "runs.sqlite3"
    with SqliteRunStore(path) as store:
        run_id = store.create_run({})
    children = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), run_id, name],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("p1", "p2")
    ]
    results = [child.communicate(timeout=60) for child in children]
    assert all(child.returncode == 0 for child in children), results
    written = sum(int(out) for out, _ in results)
    with SqliteRunStore(path) as store:
        events = store.events(run_id)
    assert written == len(events) == 40 * 3  # each shared key went in once
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len({e.key for e in events}) == len(events)


def test_a_lease_is_refused_across_processes(tmp_path) -> None:
    path = tmp_path / "runs.sqlite3"
    with SqliteRunStore(path) as store:
        store.acquire_lease("run-x", "pid-1@host", 60)
    code = ("import sys\n"
            "from agentdescent_core.loop.durable import SqliteRunStore, LeaseHeld\n"
            "try:\n"
            "    SqliteRunStore(sys.argv[1]).acquire_lease('run-x', 'pid-2@host', 60)\n"
            "except LeaseHeld as exc:\n"
            "    print(exc.holder)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.strip() == "pid-1@host"


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "runs.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RunStoreError, match=r"cannot use the run store .*runs.sqlite3"):
        SqliteRunStore(path)


def test_a_closed_store_says_so(tmp_path) -> None:
    store = SqliteRunStore(tmp_path / "runs.sqlite3")
    store.close()
    store.close()
    with pytest.raises(RunStoreError, match="is closed"):
        store.runs()


def test_a_worker_id_tells_whether_its_process_is_alive(tmp_path) -> None:
    me = holder_id("pytest-evolve")
    assert me.startswith(f"pytest-evolve:{os.getpid()}@")
    assert holder_alive(me) is True
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = f"pytest-evolve:{child.stdout.strip()}@{socket.gethostname()}"
    assert holder_alive(dead) is False  # that process has ended
    assert holder_alive("worker:1@some-other-host") is None
    assert holder_alive("a name of our own") is None
