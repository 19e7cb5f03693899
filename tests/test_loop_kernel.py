"""LoopKernel: order, decisions, stop rules, recorded failures, replay and real crashes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentdescent_core.decisions import DecisionLog, FileKillSwitch
from agentdescent_core.loop.durable import LeaseHeld, SqliteRunStore
from agentdescent_core.loop.kernel import (
    LoopConfig,
    LoopContext,
    LoopKernel,
    LoopObservation,
    RetryableStepError,
    load_report,
)


@pytest.fixture
def store(tmp_path):
    with SqliteRunStore(tmp_path / "runs.sqlite3") as opened:
        yield opened


def config(**overrides: object) -> LoopConfig:
    values: dict[str, object] = {"tenant": "tenant-a", "workspace": "ws-1", "max_generations": 5}
    values.update(overrides)
    return LoopConfig(**values)  # type: ignore[arg-type]


def stepper(rewards: list[float], calls: list[int] | None = None, cost: float = 1.0):
    def step(ctx: LoopContext) -> LoopObservation:
        if calls is not None:
            calls.append(ctx.generation)
        return LoopObservation(reward=rewards[ctx.generation], cost=cost,
                               artifact_id=f"cand-{ctx.generation}")
    return step


def keys(store: SqliteRunStore, run_id: str) -> list[str]:
    return [e.key for e in store.events(run_id)]


# ---------------------------------------------------------------- order and decisions


def test_one_generation_is_step_then_gates_then_apply_then_record(store) -> None:
    seen: list[str] = []

    def step(ctx: LoopContext) -> LoopObservation:
        seen.append(f"step {ctx.generation}")
        return LoopObservation(reward=0.1 * (ctx.generation + 1))

    def gate(ctx: LoopContext, obs: LoopObservation) -> bool:
        seen.append(f"gate {ctx.generation}")
        return True

    def apply(ctx: LoopContext, obs: LoopObservation) -> None:
        recorded = f"generation:{ctx.generation}" in keys(store, ctx.run_id)
        seen.append(f"apply {ctx.generation} recorded={recorded}")

    kernel = LoopKernel(store, config(max_generations=2, gates=(gate,)))
    run_id = kernel.submit()
    report = kernel.run(run_id, "worker-1", step, apply=apply)
    assert seen == ["step 0", "gate 0", "apply 0 recorded=False",
                    "step 1", "gate 1", "apply 1 recorded=False"]
    assert keys(store, run_id) == ["generation:0", "generation:1", "stop"]
    assert report.status == "completed"
    assert report.terminal
    assert report.stopped_reason == "max_generations"
    assert [g.action for g in report.generations] == ["accept", "accept"]
    assert all(g.applied for g in report.generations)
    assert report.generations[-1].stopped
    assert store.lease(run_id) is None  # released at the end


def test_accept_reject_and_the_context_each_step_sees(store) -> None:
    contexts: list[LoopContext] = []
    rewards = [0.5, 0.4, 0.8, 0.8, 0.85]

    def step(ctx: LoopContext) -> LoopObservation:
        contexts.append(ctx)
        return LoopObservation(reward=rewards[ctx.generation], cost=1.0,
                               evidence={"n": ctx.generation, "odd": {1, 2}})

    kernel = LoopKernel(store, config(max_cost=10.0, seed=7, min_gain=0.01))
    report = kernel.run(kernel.submit(), "w", step)
    assert [g.action for g in report.generations] == [
        "accept", "reject", "accept", "reject", "accept"]
    assert report.generations[0].gain is None
    assert report.generations[1].gain == pytest.approx(-0.1)
    assert report.best_reward == 0.85
    assert report.total_cost == 5.0
    assert [c.seed for c in contexts] == [7, 8, 9, 10, 11]
    assert [c.best_reward for c in contexts] == [None, 0.5, 0.5, 0.8, 0.8]
    assert [len(c.history) for c in contexts] == [0, 1, 2, 3, 4]
    assert [c.budget_scale for c in contexts] == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6])
    assert report.generations[0].evidence["odd"] in ("{1, 2}", "{2, 1}")  # stored as text
    assert json.loads(json.dumps(report.to_dict())) == report.to_dict()
    assert load_report(store, report.run_id) == report
    assert len({g.span_id for g in report.generations}) == 5


def test_target_stops_the_run(store) -> None:
    calls: list[int] = []
    kernel = LoopKernel(store, config(target=0.9))
    report = kernel.run(kernel.submit(), "w", stepper([0.5, 0.95, 1.0, 1.0, 1.0], calls))
    assert calls == [0, 1]
    assert (report.status, report.stopped_reason) == ("completed", "target")
    assert "0.95 reached the target 0.9" in (report.reason or "")


def test_the_cost_budget_stops_the_run(store) -> None:
    kernel = LoopKernel(store, config(max_cost=2.5))
    report = kernel.run(kernel.submit(), "w", stepper([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert len(report.generations) == 3
    assert report.stopped_reason == "budget"
    assert report.total_cost == 3.0


def test_patience_counts_generations_without_an_accepted_candidate(store) -> None:
    kernel = LoopKernel(store, config(patience=2, max_generations=10))
    report = kernel.run(kernel.submit(), "w", stepper([0.5, 0.4, 0.6, 0.6, 0.2, 0.9]))
    assert [g.action for g in report.generations] == ["accept", "reject", "accept", "reject",
                                                      "reject"]
    assert report.stopped_reason == "patience"


def test_a_risky_candidate_is_rolled_back_and_stops_the_run(store) -> None:
    effects: list[str] = []

    def step(ctx: LoopContext) -> LoopObservation:
        return LoopObservation(reward=0.5 + ctx.generation, risk=0.9 if ctx.generation else 0.1)

    kernel = LoopKernel(store, config(risk_limit=0.5))
    report = kernel.run(kernel.submit(), "w", step,
                        apply=lambda c, o: effects.append(f"apply {c.generation}"),
                        rollback=lambda c, o: effects.append(f"rollback {c.generation}"))
    assert effects == ["apply 0", "rollback 1"]
    assert [g.action for g in report.generations] == ["accept", "rollback"]
    assert (report.status, report.stopped_reason) == ("completed", "risk")
    assert report.best_reward == 0.5  # the risky one never became the best


def test_gates_reject_defer_or_pass_and_run_only_for_candidates(store) -> None:
    verdicts: dict[int, bool | str | None] = {0: True, 1: False, 2: "too long", 3: None, 4: True}
    called: list[int] = []

    def gate(ctx: LoopContext, obs: LoopObservation) -> bool | str | None:
        called.append(ctx.generation)
        return verdicts[ctx.generation]

    kernel = LoopKernel(store, config(gates=(gate,), max_generations=6))
    report = kernel.run(kernel.submit(), "w", stepper([0.1, 0.2, 0.3, 0.4, 0.5, 0.05]))
    assert [g.action for g in report.generations] == [
        "accept", "reject", "reject", "defer", "accept", "reject"]
    assert "gate" in report.generations[1].reason
    assert "too long" in report.generations[2].reason
    assert "deferred" in report.generations[3].reason
    assert called == [0, 1, 2, 3, 4]  # generation 5 did not improve: no gate asked
    assert report.best_reward == 0.5


def test_a_gate_that_raises_is_a_recorded_error(store) -> None:
    def gate(ctx: LoopContext, obs: LoopObservation) -> bool:
        raise ValueError("gate exploded")

    kernel = LoopKernel(store, config(gates=(gate,)))
    report = kernel.run(kernel.submit(), "w", stepper([0.5] * 5))
    assert (report.status, report.stopped_reason) == ("failed", "error")
    assert "gate exploded" in report.failures[0]["message"]
    assert report.generations == ()


def test_the_step_can_ask_the_run_to_stop(store) -> None:
    def step(ctx: LoopContext) -> LoopObservation:
        if ctx.generation == 1:
            return LoopObservation(reward=0.1, stop=True, evidence={
                "stopped_reason": "budget", "reason": "the driver spent its call budget"})
        return LoopObservation(reward=0.5)

    kernel = LoopKernel(store, config())
    report = kernel.run(kernel.submit(), "w", step)
    assert [g.action for g in report.generations] == ["accept", "stop"]
    assert report.stopped_reason == "budget"
    assert report.reason == "the driver spent its call budget"


# ---------------------------------------------------------------- recorded failures


def test_a_missing_max_generations_is_a_recorded_config_failure(store) -> None:
    calls: list[int] = []
    kernel = LoopKernel(store, config(max_generations=None))
    run_id = kernel.submit()
    report = kernel.run(run_id, "w", stepper([0.5], calls))
    assert calls == []
    assert (report.status, report.stopped_reason) == ("failed", "config")
    assert "max_generations is not set" in (report.reason or "")
    assert report.failures[0]["code"] == "config"
    assert store.get_run(run_id).config["max_generations"] is None


def test_invalid_config_values_are_named(store) -> None:
    kernel = LoopKernel(store, config(patience=0, max_cost=math.inf, min_gain=-1.0))
    report = kernel.run(kernel.submit(), "w", stepper([0.5]))
    assert report.stopped_reason == "config"
    for name in ("patience", "max_cost", "min_gain"):
        assert f"LoopConfig.{name}" in (report.reason or "")


@pytest.mark.parametrize(("returned", "complaint"), [
    (0.5, "returned float, expected a LoopObservation"),
    (None, "returned NoneType"),
    (LoopObservation(reward=math.nan), "reward=nan"),
    (LoopObservation(reward=0.5, cost=-1.0), "cost=-1.0"),
])
def test_a_step_returning_the_wrong_thing_is_a_recorded_failure(store, returned: object,
                                                                complaint: str) -> None:
    kernel = LoopKernel(store, config())
    report = kernel.run(kernel.submit(), "w", lambda ctx: returned)  # type: ignore[arg-type,return-value]
    assert (report.status, report.stopped_reason) == ("failed", "error")
    assert complaint in report.failures[0]["message"]
    assert report.best_reward is None
    assert report.generations == ()


def test_an_exception_in_the_step_fails_the_run_with_its_message(store) -> None:
    def step(ctx: LoopContext) -> LoopObservation:
        if ctx.generation == 2:
            raise OSError("disk on fire")
        return LoopObservation(reward=0.5)

    kernel = LoopKernel(store, config())
    report = kernel.run(kernel.submit(), "w", step)
    assert (report.status, report.stopped_reason) == ("failed", "error")
    assert "generation 2 failed: OSError: disk on fire" in (report.reason or "")
    assert len(report.generations) == 2


def test_retryable_failures_leave_the_run_running_for_the_caller_to_resume(store) -> None:
    attempts: list[int] = []

    def step(ctx: LoopContext) -> LoopObservation:
        attempts.append(ctx.generation)
        if ctx.generation == 1 and len(attempts) <= 5:
            raise RetryableStepError("rate limited")
        return LoopObservation(reward=0.5)

    kernel = LoopKernel(store, config(max_generations=3, max_step_failures=3))
    run_id = kernel.submit()
    report = kernel.run(run_id, "w", step)
    assert report.status == "running"
    assert not report.terminal
    assert report.stopped_reason is None
    assert len(report.generations) == 1
    assert [f["retryable"] for f in report.failures] == [True, True, True]
    assert store.lease(run_id) is None  # released, so anyone can resume
    report = kernel.run(run_id, "w", step)
    assert report.status == "completed"
    assert len(report.generations) == 3
    assert len(report.failures) == 4  # one more retry, then success
    assert len({f["message"] for f in report.failures}) == 1
    assert len(set(keys(store, run_id))) == len(keys(store, run_id))


# ---------------------------------------------------------------- replay and control


def test_a_resumed_run_replays_without_calling_a_gate_or_a_recorded_step(store, tmp_path) -> None:
    gate_calls: list[int] = []
    step_calls: list[int] = []

    def gate(ctx: LoopContext, obs: LoopObservation) -> bool:
        gate_calls.append(ctx.generation)
        return True

    log = DecisionLog(tmp_path / "runs.sqlite3")
    kernel = LoopKernel(store, config(gates=(gate,), decision_log=log))
    run_id = kernel.submit(key="evolve:x")
    step = stepper([0.1, 0.2, 0.3, 0.4, 0.5], step_calls)
    report = kernel.run(run_id, "w", step, max_generations_this_call=2)
    assert (report.status, len(report.generations)) == ("running", 2)
    assert gate_calls == [0, 1]
    assert kernel.submit(key="evolve:x") == run_id  # the restarted command finds its run
    report = kernel.run(run_id, "w2", step)
    assert step_calls == [0, 1, 2, 3, 4]
    assert gate_calls == [0, 1, 2, 3, 4]
    assert report.status == "completed"
    before = len(log.records())
    assert kernel.report(run_id) == report
    assert kernel.run(run_id, "w3", step) == report  # terminal: nothing runs
    assert gate_calls == [0, 1, 2, 3, 4]
    records = log.records(kind="loop")
    assert len(records) == before == 5
    assert [r.record_id for r in records] == [f"{run_id}:generation:{n}" for n in range(5)]
    assert [r.accepted for r in records] == [True] * 5
    snapshot = kernel.snapshot(run_id)
    assert [e["key"] for e in snapshot["events"]] == [f"generation:{n}" for n in range(5)] + [
        "stop"]
    log.close()


def test_cancel_stops_the_worker_at_the_next_generation(store) -> None:
    kernel = LoopKernel(store, config())
    run_id = kernel.submit()

    def step(ctx: LoopContext) -> LoopObservation:
        if ctx.generation == 1:
            LoopKernel(store, config()).cancel(run_id, reason="operator stop")
        return LoopObservation(reward=0.5 + ctx.generation)

    report = kernel.run(run_id, "w", step)
    assert len(report.generations) == 2  # the generation in flight was completed and kept
    assert (report.status, report.stopped_reason, report.reason) == (
        "cancelled", "cancelled", "operator stop")
    kernel.cancel(run_id, reason="again")  # already ended: nothing changes
    assert kernel.report(run_id).reason == "operator stop"


def test_a_cancelled_pending_run_never_steps(store) -> None:
    calls: list[int] = []
    kernel = LoopKernel(store, config())
    run_id = kernel.submit()
    kernel.cancel(run_id)
    report = kernel.run(run_id, "w", stepper([0.5] * 5, calls))
    assert calls == []
    assert (report.status, report.stopped_reason) == ("cancelled", "cancelled")


def test_the_kill_switch_stops_cleanly_at_a_generation_boundary(store, tmp_path) -> None:
    stop_file = tmp_path / ".agentdescent" / "STOP"
    switch = FileKillSwitch(stop_file)

    def step(ctx: LoopContext) -> LoopObservation:
        if ctx.generation == 1:
            stop_file.parent.mkdir(parents=True, exist_ok=True)
            stop_file.write_text("release freeze\n")
        return LoopObservation(reward=0.5)

    kernel = LoopKernel(store, config())
    report = kernel.run(kernel.submit(), "w", step,
                        cancel=lambda: switch.reason() if switch.engaged() else None)
    assert len(report.generations) == 2
    assert (report.status, report.stopped_reason, report.reason) == (
        "cancelled", "kill-switch", "release freeze")


def test_a_run_held_by_another_worker_is_refused_at_once(store) -> None:
    calls: list[int] = []
    kernel = LoopKernel(store, config())
    run_id = kernel.submit()
    store.acquire_lease(run_id, "pid-4242@ci-runner", 120)
    with pytest.raises(LeaseHeld, match=r"held by 'pid-4242@ci-runner' until .* in 1[12]\d s"):
        kernel.run(run_id, "me", stepper([0.5] * 5, calls))
    assert calls == []
    assert store.lease(run_id).holder == "pid-4242@ci-runner"  # not released by the loser


def test_a_worker_that_lost_its_lease_records_nothing_more(store) -> None:
    kernel = LoopKernel(store, config())
    run_id = kernel.submit()

    def step(ctx: LoopContext) -> LoopObservation:
        if ctx.generation == 1:
            store.break_lease(run_id)
            store.acquire_lease(run_id, "usurper", 60)
        return LoopObservation(reward=0.5)

    with pytest.raises(LeaseHeld, match="was lost: it is now held by 'usurper'"):
        kernel.run(run_id, "w", step)
    assert keys(store, run_id) == ["generation:0"]
    assert store.lease(run_id).holder == "usurper"


# ---------------------------------------------------------------- real crashes

_CHILD = textwrap.dedent("""
    import os, sys, time
    from agentdescent_core.decisions import DecisionLog
    from agentdescent_core.loop.durable import SqliteRunStore
    from agentdescent_core.loop.kernel import LoopConfig, LoopKernel, LoopObservation

    db, effects, marker, point, at, ttl = sys.argv[1:7]
    at = int(at)
    REWARDS = [0.2, 0.5, 0.4, 0.7, 0.9]

    def effect(line):
        with open(effects, "a") as f:
            f.write(line + "\\n")
            f.flush()
            os.fsync(f.fileno())

    def hang(n, where):
        if point == where and n == at:
            with open(marker, "w") as f:
                f.write(where)
            time.sleep(120)

    def step(ctx):
        effect(f"step {ctx.generation}")
        hang(ctx.generation, "in-step")
        return LoopObservation(reward=REWARDS[ctx.generation], cost=1.0,
                               artifact_id=f"cand-{ctx.generation}")

    def gate(ctx, obs):
        effect(f"gate {ctx.generation}")
        return True

    def apply(ctx, obs):
        effect(f"apply {ctx.generation}")
        hang(ctx.generation, "after-apply")

    class Log(DecisionLog):
        def record(self, **kw):  # called right after the generation event is recorded
            hang(int(kw["record_id"].rsplit(":", 1)[1]), "after-event")
            return super().record(**kw)

    store = SqliteRunStore(db)
    kernel = LoopKernel(store, LoopConfig("t", "w", max_generations=5, gates=(gate,),
                                          lease_seconds=float(ttl), decision_log=Log(db)))
    run_id = kernel.submit(key="evolve:crash")
    kernel.run(run_id, f"child-{os.getpid()}", step, apply=apply)
""")

REWARDS = [0.2, 0.5, 0.4, 0.7, 0.9]
ACCEPTED = [0, 1, 3, 4]


def _kill_child_at(tmp_path: Path, point: str, at: int, ttl: float) -> int:
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "runs.sqlite3"), str(tmp_path / "effects"),
         str(marker), point, str(at), str(ttl)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before the kill point: {child.communicate()}")
        assert time.monotonic() < deadline, "the child never reached the kill point"
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return child.pid


@pytest.mark.parametrize(("point", "at", "ttl"), [
    ("in-step", 2, 1.0),        # nothing of generation 2 recorded: it runs again; the dead
                                # worker's short lease expires and is taken over
    ("after-apply", 1, 300.0),  # applied, not recorded: applied again (at-least-once)
    ("after-event", 2, 300.0),  # recorded, killed before its decision-log record
    ("after-event", 4, 300.0),  # the final generation recorded, the run not yet completed
])
def test_a_run_killed_with_sigkill_resumes_where_it_stopped(tmp_path, point: str, at: int,
                                                            ttl: float) -> None:
    pid = _kill_child_at(tmp_path, point, at, ttl=ttl)
    effects = tmp_path / "effects"
    gate_calls: list[int] = []

    def step(ctx: LoopContext) -> LoopObservation:
        with effects.open("a") as f:
            f.write(f"step {ctx.generation}\n")
        return LoopObservation(reward=REWARDS[ctx.generation], cost=1.0,
                               artifact_id=f"cand-{ctx.generation}")

    def gate(ctx: LoopContext, obs: LoopObservation) -> bool:
        gate_calls.append(ctx.generation)
        return True

    def apply(ctx: LoopContext, obs: LoopObservation) -> None:
        with effects.open("a") as f:
            f.write(f"apply {ctx.generation}\n")

    db = tmp_path / "runs.sqlite3"
    with SqliteRunStore(db) as store, DecisionLog(db) as log:
        kernel = LoopKernel(store, LoopConfig("t", "w", max_generations=5, gates=(gate,),
                                              decision_log=log))
        run_id = kernel.submit(key="evolve:crash")
        assert store.get_run(run_id).status == "running"
        lease = store.lease(run_id)
        assert lease is not None
        assert lease.holder == f"child-{pid}"
        if ttl > 60:
            with pytest.raises(LeaseHeld, match=f"held by 'child-{pid}' until "):
                kernel.run(run_id, "resumer", step, apply=apply)
            store.break_lease(run_id)  # we saw the child die
        else:  # wait for the dead worker's lease to run out, then take the run over
            time.sleep(max(0.0, lease.expires_at - time.time()) + 0.05)
        report = kernel.run(run_id, "resumer", step, apply=apply)

        events = store.events(run_id)
        assert [e.key for e in events] == [f"generation:{n}" for n in range(5)] + ["stop"]
        assert [e.seq for e in events] == list(range(1, 7))
        assert [r.record_id for r in log.records(kind="loop")] == [
            f"{run_id}:generation:{n}" for n in range(5)]
    assert (report.status, report.stopped_reason) == ("completed", "max_generations")
    assert [g.action for g in report.generations] == [
        "accept", "accept", "reject", "accept", "accept"]
    assert report.best_reward == 0.9
    assert report.total_cost == 5.0

    lines = effects.read_text().splitlines()
    steps = [int(line.split()[1]) for line in lines if line.startswith("step")]
    applies = [int(line.split()[1]) for line in lines if line.startswith("apply")]
    rerun = at if point in ("in-step", "after-apply") else None
    assert sorted(steps) == sorted([*range(5), *([rerun] if rerun is not None else [])])
    assert sorted(set(applies)) == ACCEPTED  # no accepted generation lost
    assert sorted(applies) == sorted([*ACCEPTED, *([at] if point == "after-apply" else [])])
    first_new = at if rerun is not None else at + 1
    assert gate_calls == [n for n in ACCEPTED if n >= first_new]  # replay asked no gate
