"""Kill switches and the replay-safe decision log."""

from __future__ import annotations

import pytest

from agentdescent_core.decisions import (
    AnyKillSwitch,
    DecisionLog,
    DecisionLogError,
    EnvKillSwitch,
    FileKillSwitch,
    KillSwitch,
)
from agentdescent_core.loop.durable import SqliteRunStore


def test_the_file_switch_is_engaged_while_the_file_exists(tmp_path) -> None:
    stop = tmp_path / ".agentdescent" / "STOP"
    switch = FileKillSwitch(stop)
    assert not switch.engaged()
    stop.parent.mkdir()
    stop.write_text("")
    assert switch.engaged()
    assert switch.reason() == f"STOP file {stop} present"
    stop.write_text("\n  \nrelease freeze until Monday\nsecond line\n")
    assert switch.reason() == "release freeze until Monday"
    stop.unlink()
    assert not switch.engaged()


@pytest.mark.parametrize(("value", "engaged"), [
    (None, False), ("", False), ("0", False), (" 0 ", False), ("1", True), ("incident", True)])
def test_the_environment_switch(monkeypatch, value: str | None, engaged: bool) -> None:
    if value is None:
        monkeypatch.delenv("AGENTDESCENT_STOP", raising=False)
    else:
        monkeypatch.setenv("AGENTDESCENT_STOP", value)
    switch = EnvKillSwitch()
    assert switch.engaged() is engaged
    if engaged:
        assert value is not None
        assert "AGENTDESCENT_STOP" in switch.reason()
        assert value in switch.reason()


def test_any_switch_reports_the_first_engaged_one(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MY_STOP", raising=False)
    file_switch = FileKillSwitch(tmp_path / "STOP")
    env_switch = EnvKillSwitch("MY_STOP")
    both = AnyKillSwitch(file_switch, env_switch)
    assert not both.engaged()
    monkeypatch.setenv("MY_STOP", "yes")
    assert both.engaged()
    assert "MY_STOP" in both.reason()
    (tmp_path / "STOP").write_text("file first\n")
    assert both.reason() == "file first"
    for switch in (file_switch, env_switch, both):
        assert isinstance(switch, KillSwitch)


def test_a_record_is_stored_and_read_back(tmp_path) -> None:
    with DecisionLog(tmp_path / "log.sqlite3") as log:
        record = log.record(kind="merge", artifact_id="skills/greet", accepted=True,
                            category="merged", detail="p=0.01", evidence={"gain": 0.2},
                            cost=3.5, record_id="merge:1")
        assert record.record_id == "merge:1"
        assert record.created_at > 0
    with DecisionLog(tmp_path / "log.sqlite3") as log:  # it is durable
        assert log.records() == [record]


def test_a_known_record_id_is_a_no_op_returning_the_stored_record(tmp_path) -> None:
    with DecisionLog(tmp_path / "log.sqlite3") as log:
        first = log.record(kind="loop", artifact_id="a", accepted=True, category="accept",
                           record_id="run-1:generation:0")
        again = log.record(kind="loop", artifact_id="other", accepted=False,
                           category="reject", record_id="run-1:generation:0")
        assert again == first
        assert len(log.records()) == 1


def test_without_an_id_the_content_decides_it(tmp_path) -> None:
    with DecisionLog(tmp_path / "log.sqlite3") as log:
        a = log.record(kind="session", artifact_id="session:0", accepted=True,
                       category="baseline", evidence={"reward": 0.5, "calls": 2})
        b = log.record(kind="session", artifact_id="session:0", accepted=True,
                       category="baseline", evidence={"calls": 2, "reward": 0.5})
        c = log.record(kind="session", artifact_id="session:0", accepted=True,
                       category="baseline", evidence={"reward": 0.6, "calls": 2})
    assert a.record_id == b.record_id != c.record_id
    assert a.record_id.startswith("session:")
    with DecisionLog(tmp_path / "other.sqlite3") as log:  # the id does not depend on the file
        assert log.record(kind="session", artifact_id="session:0", accepted=True,
                          category="baseline",
                          evidence={"reward": 0.5, "calls": 2}).record_id == a.record_id


def test_records_filter_by_kind_in_order(tmp_path) -> None:
    with DecisionLog(tmp_path / "log.sqlite3") as log:
        for n, kind in enumerate(["session", "loop", "merge", "loop"]):
            log.record(kind=kind, artifact_id=f"x{n}", accepted=False, category="c")
        assert [r.artifact_id for r in log.records(kind="loop")] == ["x1", "x3"]
        assert [r.kind for r in log.records()] == ["session", "loop", "merge", "loop"]


def test_bad_records_are_refused(tmp_path) -> None:
    with DecisionLog(tmp_path / "log.sqlite3") as log:
        with pytest.raises(DecisionLogError, match="unknown decision kind 'round'"):
            log.record(kind="round", artifact_id="a", accepted=True, category="c")
        with pytest.raises(DecisionLogError, match="must be finite"):
            log.record(kind="loop", artifact_id="a", accepted=True, category="c",
                       cost=float("inf"))
        odd = log.record(kind="loop", artifact_id="a", accepted=True, category="c",
                         evidence={"path": tmp_path})
        assert odd.evidence == {"path": str(tmp_path)}


def test_the_log_can_share_the_run_store_file(tmp_path) -> None:
    path = tmp_path / ".agentdescent" / "runs.sqlite3"
    with SqliteRunStore(path) as store, DecisionLog(path) as log:
        run_id = store.create_run({})
        store.append_event(run_id, "generation:0", "generation", {})
        log.record(kind="loop", artifact_id="a", accepted=True, category="accept",
                   record_id=f"{run_id}:generation:0")
        assert len(store.events(run_id)) == 1
        assert len(log.records()) == 1


def test_a_closed_log_says_so(tmp_path) -> None:
    log = DecisionLog(tmp_path / "log.sqlite3")
    log.close()
    with pytest.raises(DecisionLogError, match="is closed"):
        log.records()
