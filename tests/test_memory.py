"""Memory of what was tried: proposals kept with their verdicts across runs and sessions.

The engine part (``agentdescent_core.memory``) is driven directly and through
``evolve()`` with the engine's ``reflector()``; the plugin part runs
``pytest --evolve`` twice on a real agent repository (the one of
test_session_runs) and reads what the second run's conftest hook saw in
``context.history``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git, write
from test_session_runs import RULES, evolve, explain, make_agent_repo, report_of

from agentdescent_core.artifacts.strategies import AppendRules
from agentdescent_core.errors import LedgerError, RefusalError
from agentdescent_core.loop import evolve as engine_evolve
from agentdescent_core.loop.schedule import SessionEntry, SessionHistory, sessions_ref
from agentdescent_core.memory import (
    ATTEMPTS_FILE,
    Attempt,
    AttemptMemory,
    content_key,
    render_attempts,
)
from agentdescent_core.proposers.agent import reflector
from agentdescent_core.tasks import Task

KEY_A = content_key({"skills/a.md": "one\n"})
KEY_B = content_key({"skills/a.md": "two\n"})


def attempt(key: str = KEY_A, *, tasks: tuple[str, ...] = ("t::a",), category: str =
            "below-threshold", reason: str = "reward 0.500 -> 0.500", recorded_at: float = 1.0,
            **more: Any) -> Attempt:
    more.setdefault("summary", "edited skills/a.md:\n  +one")
    return Attempt(key=key, tasks=tasks, category=category, reason=reason,
                   recorded_at=recorded_at, **more)


# ---------------------------------------------------------------- the memory itself


def test_the_same_edit_twice_is_one_attempt_with_the_newest_verdict() -> None:
    memory = AttemptMemory()
    memory.record(attempt(recorded_at=1.0))
    memory.record(attempt(tasks=("t::b",), category="guard-failed", reason="title lost",
                          recorded_at=2.0))
    memory.record(attempt(KEY_B, recorded_at=3.0))
    assert [a.key for a in memory.attempts] == [KEY_A, KEY_B]
    first = memory.attempts[0]
    assert (first.category, first.reason, first.times) == ("guard-failed", "title lost", 2)
    assert first.tasks == ("t::a", "t::b")
    assert content_key({"skills/a.md": "one\n"}) == KEY_A != KEY_B


def test_the_memory_is_capped_by_bytes_dropping_the_oldest() -> None:
    memory = AttemptMemory(max_bytes=4_000)
    for index in range(60):
        memory.record(attempt(content_key({"f": str(index)}), recorded_at=float(index),
                              reason=f"attempt {index} " + "x" * 40))
    text = memory.to_text()
    assert len(text.encode("utf-8")) <= 4_000
    kept = AttemptMemory.from_text(text, origin="test").attempts
    assert 0 < len(kept) < 60
    assert kept[-1].reason.startswith("attempt 59 ")  # the newest survive
    assert not any(a.reason.startswith("attempt 0 ") for a in kept)


def test_held_out_tests_never_appear_in_what_a_proposer_is_shown() -> None:
    memory = AttemptMemory()
    memory.record(attempt(tasks=("t::a", "t::hidden"), reason="t::hidden flipped too",
                          flips=(("t::a", "fail->pass"), ("t::hidden", "fail->pass"))))
    shown = memory.for_tasks(["t::a"], hidden=["t::hidden"])
    assert len(shown) == 1
    assert "t::hidden" not in json.dumps([a.to_json() for a in shown])
    assert shown[0].flips == (("t::a", "fail->pass"),)
    assert "t::hidden" not in render_attempts(shown)
    assert memory.for_tasks(["t::other"]) == ()


def test_secrets_are_withheld_from_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AD_TEST_TOKEN", "tok-1234567890-secret")
    memory = AttemptMemory()
    memory.record(attempt(category="secret", paths=("skills/a.md",),
                          summary="edited skills/a.md:\n  +key sk-live-abcdefabcdef"))
    memory.record(attempt(KEY_B, rationale="use tok-1234567890-secret to log in"))
    text = memory.to_text()
    assert "sk-live-abcdefabcdef" not in text
    assert "tok-1234567890-secret" not in text
    assert "content withheld" in text
    assert "[REDACTED:AD_TEST_TOKEN]" in text


def test_bad_input_names_the_memory_and_says_what_to_do(tmp_path: Path) -> None:
    broken = tmp_path / ATTEMPTS_FILE
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{ATTEMPTS_FILE}.*delete it"):
        AttemptMemory.load(broken)
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        AttemptMemory(max_bytes=0)
    assert len(AttemptMemory.load(tmp_path / "absent.json")) == 0


def test_the_memory_rides_on_the_sessions_ref_beside_the_history(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_agent_repo(repo)
    entry = SessionEntry(started_at=0.0, base="b" * 40, baseline=0.5, final=0.5,
                         evolved=True, decision="evolve", reason="first")
    with SessionHistory(repo) as history:
        history.append(entry, memory=AttemptMemory([attempt(KEY_A)]))
        history.append(entry, memory=AttemptMemory([attempt(KEY_B, recorded_at=2.0)]))
        history.append(entry)  # a session without attempts carries the memory over
        assert len(history.entries()) == 3
        assert [a.key for a in history.memory().attempts] == [KEY_A, KEY_B]
    listed = user_git(repo, "ls-tree", "--name-only", sessions_ref("agentdescent/"))
    assert listed.split() == [ATTEMPTS_FILE, "sessions.json"]
    # a memory file that is not one: the error names it and says what to do
    user_git(repo, "checkout", "--quiet", "--orphan", "broken")
    user_git(repo, "rm", "-r", "--quiet", "--cached", ".")
    write(repo / ATTEMPTS_FILE, "{not json")
    user_git(repo, "add", ATTEMPTS_FILE)
    user_git(repo, "commit", "--quiet", "-m", "broken memory")
    user_git(repo, "update-ref", sessions_ref("agentdescent/"), "HEAD")
    with SessionHistory(repo) as history, pytest.raises(LedgerError) as caught:
        history.memory()
    assert ATTEMPTS_FILE in str(caught.value)
    assert "delete it" in str(caught.value)


# ---------------------------------------------------------------- evolve() and reflector()


def test_the_engines_reflector_sees_what_an_earlier_evolve_run_tried(tmp_path: Path) -> None:
    tasks = [Task(id=f"price-{n}", prompt=f"What do {n} pens at $4 cost?") for n in range(8)]

    def run(rendered: str, task: Task) -> str:
        return "cents" if "cents" in rendered else "dollars"

    def reward(task: Task, output: object) -> float:
        return 1.0 if output == "cents" else 0.0

    saved = tmp_path / ATTEMPTS_FILE
    first = AttemptMemory()
    engine_evolve(tasks, reward, run=run, strategy=AppendRules(), rounds=2, n_workers=1,
                  propose=reflector(lambda prompt: "Rule: Be polite.", history=first),
                  on_round=first.observe_round, held_out_frac=0.5)
    first.save(saved)
    assert [a.category for a in first.attempts] == ["below-threshold"]

    prompts: list[str] = []

    def model(prompt: str) -> str:
        prompts.append(prompt)
        return "Rule: Give prices in cents."

    second = AttemptMemory.load(saved)
    result = engine_evolve(tasks, reward, run=run, strategy=AppendRules(), rounds=2,
                           n_workers=1, propose=reflector(model, history=second),
                           on_round=second.observe_round, held_out_frac=0.5)
    assert result.final_reward == 1.0
    assert "## Already tried for this task" in prompts[0]
    assert "Be polite." in prompts[0]
    assert "below-threshold" in prompts[0]
    assert {a.category for a in second.attempts} == {"below-threshold", "committed"}
    committed = next(a for a in second.attempts if a.accepted)
    assert committed.p_improvement is not None
    assert committed.reward_after == 1.0
    # acceptance measured (and flipped) the held-out tasks; the memory keeps none of them
    flipped = {n for info in result.history for v in info.verdicts for n, _ in v.flips}
    assert flipped
    assert not flipped & set(committed.tasks)
    assert not any(name in second.to_text() for name in flipped)


# ---------------------------------------------------------------- pytest --evolve, twice

#: Round 1 of the first session: a rules file that fixes "hello" (a held-out case too)
#: but drops the title the guard checks.  Afterwards: learn the missing rules.
REMEMBERING = '''\
import json
import os
import re


def pytest_evolve_propose(context):
    with open(os.environ["AD_PROPOSER_LOG"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"round": context.round,
                                 "history": [a.to_json() for a in context.history]}) + "\\n")
    path = next(p for p in context.files if p.endswith("rules.md"))
    text = context.files[path]
    if not any("hello" in a.summary for a in context.history):
        return {path: "- hello: hi\\n"}
    for failure in context.failures:
        found = re.search(r"missing rule: (\\w+)", failure.message)
        if found and f"- {found.group(1)}" not in text:
            return {path: text + f"- {found.group(1)}: answer it\\n"}
    return None
'''

FETCH = ("+refs/heads/agentdescent/*:refs/heads/agentdescent/*",
         "+refs/agentdescent/*:refs/agentdescent/*")
PUSH = ("refs/heads/agentdescent/dev", "refs/heads/agentdescent/stable",
        "refs/agentdescent/sessions")


def session(remote: Path, clone: Path, log: Path, *args: str) -> dict[str, Any]:
    """One scheduled job on a runner with an empty disk: clone, fetch, evolve, push."""
    subprocess.run(["git", "clone", "--quiet", str(remote), str(clone)], check=True)
    user_git(clone, "fetch", "--quiet", "origin", *FETCH)
    result = evolve(clone, "--evolve-workers", "1", "-o", "evolve_session_patience=3", *args,
                    env={"AD_PROPOSER_LOG": str(log)})
    assert result.returncode == 0, explain(result)
    user_git(clone, "push", "--quiet", "--force", "origin", *PUSH)
    return report_of(clone)


def seen(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_the_next_scheduled_session_sees_what_the_last_one_tried_and_why(
        tmp_path: Path) -> None:
    source = tmp_path / "source"
    make_agent_repo(source, proposer=REMEMBERING)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(source), str(remote)], check=True)

    first = session(remote, tmp_path / "job1", tmp_path / "first.log", "--evolve-rounds", "1")
    assert first["accepted"] == 0
    assert seen(tmp_path / "first.log")[0]["history"] == []
    held_out = [t["nodeid"] for t in first["tasks"] if t["holdout"]]
    assert held_out
    assert all(n.endswith("-2]") for n in held_out)
    # the rejected candidate fixed a held-out test: its verdict says so, the memory must not
    judged = [v for info in first["history"] for v in info["verdicts"]]
    assert any(flip[0] in held_out for v in judged for flip in v["flips"]), judged

    second = session(remote, tmp_path / "job2", tmp_path / "second.log")
    assert second["session"]["code"] == "improving"
    assert second["reward_after"] == 1.0
    shown = seen(tmp_path / "second.log")[0]["history"]
    assert len(shown) == 1, shown
    tried = shown[0]
    assert tried["category"] in ("below-threshold", "guard-failed")
    assert "- hello: hi" in tried["summary"]
    assert RULES in tried["paths"]
    assert tried["reason"]
    assert tried["tasks"]
    assert not set(tried["tasks"]) & set(held_out)
    assert all(flip[0] not in held_out for flip in tried["flips"])
    assert not any(name in json.dumps(shown) for name in held_out)
    # the fresh clone had no state dir: the attempt came from the sessions ref
    stored = user_git(remote, "show", f"{sessions_ref('agentdescent/')}:{ATTEMPTS_FILE}")
    assert "- hello: hi" in stored
    assert not any(name in stored for name in held_out)


@pytest.mark.slow
def test_a_second_local_run_sees_the_first_runs_attempts_from_the_state_dir(
        tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=REMEMBERING)
    log = tmp_path / "proposer.log"
    first = evolve(repo, "--evolve-workers", "1", "--evolve-rounds", "1",
                   env={"AD_PROPOSER_LOG": str(log)})
    assert first.returncode == 0, explain(first)
    assert (repo / ".agentdescent" / ATTEMPTS_FILE).is_file()
    calls = len(seen(log))
    again = evolve(repo, "--evolve-workers", "1", "--evolve-rounds", "1",
                   env={"AD_PROPOSER_LOG": str(log)})
    assert again.returncode == 0, explain(again)
    shown = seen(log)[calls]["history"]
    assert [a["summary"].splitlines()[-1].strip() for a in shown] == ["+- hello: hi"]
    assert user_git(repo, "for-each-ref", "refs/agentdescent/") == ""  # no session ref


def test_the_model_proposer_is_shown_earlier_sessions_rejections_once() -> None:
    import random

    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.proposers.guardrails import Guardrails
    from agentdescent_core.proposers.models import ModelClient
    from agentdescent_core.proposers.reflector import load_templates
    from pytest_agentdescent.hooks import Failure, ProposeContext
    from pytest_agentdescent.model_proposer import ModelProposer

    prompts: list[str] = []

    def model(system: str, user: str) -> str:
        prompts.append(user)
        return "no edit today"

    proposer = ModelProposer(ModelClient.from_callable(model), spec="callable:test",
                             tree=FileTree(["skills"]), guardrails=Guardrails(env={}),
                             templates=load_templates(), frozen="tests")
    failure = Failure("tests/test_bot.py::test_hello", "failed", 0.0,
                      "AssertionError: missing rule: hello", "", "def test_hello(): ...")
    history = (
        attempt(tasks=(failure.nodeid,), summary="edited skills/rules.md:\n  +- hello: wave",
                reason="diff 0123abcd by worker-0: P(improvement) 0.40 < 0.95",
                rationale="greet"),
        attempt(KEY_B, tasks=(failure.nodeid,), category="committed", reason="v1",
                summary="edited skills/rules.md:\n  +- bye: wave"),
    )
    context = ProposeContext(files={"skills/rules.md": "# Rules\n"}, roots=("skills",),
                             failures=(failure,), round=1, worker="worker-0", version=0,
                             rng=random.Random(0), history=history)
    with pytest.raises(RefusalError):
        proposer.pytest_evolve_propose(context=context)
    assert "+- hello: wave" in prompts[0]
    assert "rationale: greet" in prompts[0]
    assert "rejected because: below-threshold: P(improvement) 0.40 < 0.95" in prompts[0]
    assert "+- bye: wave" not in prompts[0]  # what worked is not fed back as rejected


# ---------------------------------------------------------------- proposals meet their verdicts


def test_each_pending_proposal_meets_the_verdict_about_it() -> None:
    from agentdescent_core.artifacts.diff import Diff
    from agentdescent_core.evidence import MergeReport
    from agentdescent_core.loop.result import round_info
    from pytest_agentdescent.pending import Pending, PendingProposals

    def ops(text: str) -> dict[str, str | None]:
        return {f"skills/{text}.md": f"{text}\n"}

    def filed(round_: int, worker: str, name: str) -> Pending:
        return Pending(round_, worker, ("t::a",), content_key(ops(name)), summary=name)

    def judged(category: str, author: str, *names: str) -> MergeReport:
        both = {k: v for n in names for k, v in ops(n).items()}
        return MergeReport("skills", category, f"{category} {'+'.join(names)}",
                           diff=Diff(both, author=author))

    pending = PendingProposals()
    items = {name: filed(r, w, name) for r, w, name in (
        (1, "worker-0", "x"), (1, "worker-0", "y"), (1, "worker-1", "z"),
        (1, "worker-2", "w"), (1, "worker-3", "u"), (2, "worker-0", "v"))}
    for item in items.values():
        pending.file(item)
    refused = MergeReport("skills", "no-json", "worker-0's answer was refused by the proposer",
                          extra={"refused_by": "proposer", "worker": "worker-0", "task": "t::a"})
    first = round_info(1, 0.5, [
        refused,  # worker-0's proposer raised: that answer was never filed
        judged("committed", "worker-0", "x"),  # by content; names worker-0 too
        judged("below-threshold", "worker-0,worker-1", "y", "z"),  # fused: by worker
        judged("cas-conflict", "worker-3", "u"),
    ])
    assert first.verdicts[0].refused_by == "proposer"
    assert first.verdicts[1].refused_by == ""
    settled = {item.summary: verdict.reason for item, verdict in pending.settle(first)}
    assert settled == {"x": "committed x", "y": "below-threshold y+z",
                       "z": "below-threshold y+z", "u": "cas-conflict u"}
    assert len(pending) == 2  # u waits for its re-filed card, v for its round; w is gone

    second = round_info(2, 0.5, [judged("below-threshold", "worker-3", "u"),
                                 judged("guard-failed", "worker-0", "q")])
    again = {item.summary: verdict.category for item, verdict in pending.settle(second)}
    assert again == {"u": "below-threshold", "v": "guard-failed"}
    assert len(pending) == 0
