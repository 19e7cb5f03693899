"""``pytest --evolve skills --evolve-model openai:...`` end to end, against a real HTTP server.

The proposer is the model: the ``openai`` SDK in the controller process talks
to :mod:`wire_servers`' Chat Completions server through ``OPENAI_BASE_URL``,
and the server's scripted answers play the model.  The tests assert on what
the run did (report.json, the dev branch) and on what the server received
(the prompt: the failing assertion message in, holdout tasks out).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git
from test_session_runs import evolve, explain, make_agent_repo, report_of
from wire_servers import Answer, WireServer, start_openai_server

from agentdescent_core.errors import RefusalError

slow = pytest.mark.slow

KEY = "test-openai-key-value-1234"
MODEL = "openai:test-model"
NO_HOOK = "# no pytest_evolve_propose here: the model proposes\n"
HOLDOUT = ("test_answers[hello-2]", "test_answers[refund-2]", "test_answers[shipping-2]")

IMPROVING = {
    "rationale": "Answer every topic the support desk covers with its own rule.",
    "edits": [{
        "path": "skills/support/rules.md",
        "search": "- greeting: say hi\n",
        "replace": "- greeting: say hi\n- hello: greet back\n- refund: explain the refund "
                   "policy\n- shipping: give the shipping times\n",
    }],
}


def answer(obj: dict[str, Any], prose: str = "Here is my edit:") -> str:
    return f"{prose}\n```json\n{json.dumps(obj)}\n```\n"


def model_env(server: WireServer | None, base_url: str | None = None) -> dict[str, str]:
    return {"OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": base_url or (server.base_url if server else "")}


def run(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return evolve(repo, "--evolve-model", MODEL, *args, env=env)


@pytest.fixture
def server() -> Any:
    with start_openai_server(hang_seconds=5) as srv:
        yield srv


@slow
def test_a_model_run_refuses_bad_answers_by_category_and_accepts_the_improving_edit(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    server.script([
        # a frozen file (frozen by --evolve-frozen below)
        answer({"rationale": "tone", "edits": [
            {"path": "skills/support/style.md", "content": "Be verbose.\n"}]}),
        # a path that climbs out of the repository
        answer({"rationale": "escape", "edits": [
            {"path": "skills/../../outside.md", "content": "x\n"}]}),
        # a secret: the value of OPENAI_API_KEY, present in the controller's environment
        answer({"rationale": "key", "edits": [
            {"path": "skills/support/rules.md", "content": f"# Support rules\nkey {KEY}\n"}]}),
        # a search that does not occur in the file
        answer({"rationale": "nope", "edits": [
            {"path": "skills/support/rules.md", "search": "- farewell: wave",
             "replace": "- farewell: wave twice"}]}),
        # no JSON at all
        "I would add more rules about refunds and shipping.",
        # finally, a general rule for every topic, with trailing prose around it
        answer(IMPROVING, prose="After the rejections above, a general rule:"),
    ], then="no edit today")

    result = run(repo, model_env(server), "--evolve-frozen", "skills/support/style.md",
                 "--evolve-rounds", "5")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    outcomes = report["outcomes"]
    assert outcomes.get("committed") == 1, outcomes
    assert outcomes.get("frozen-violation") == 1, outcomes
    assert outcomes.get("secret") == 1, outcomes
    assert outcomes.get("invalid-proposal") == 3, outcomes  # `..`, search, no JSON
    assert report["error"] is None
    assert report["reward_before"] < report["reward_after"] == 1.0
    model = report["model"]
    assert (model["calls"], model["spec"]) == (6, MODEL)
    assert min(model["input_tokens"], model["output_tokens"]) > 0
    assert f"model     {MODEL}: 6 call(s) sent, " in result.stdout
    assert model["refused"] == {
        "frozen-violation/frozen-path": 1, "invalid-proposal/no-json": 1,
        "invalid-proposal/parent-traversal": 1, "invalid-proposal/search-not-found": 1,
        "secret/secret-in-proposal": 1,
    }
    # the rationale is the commit's message on dev
    message = user_git(repo, "log", "-1", "--format=%B", "agentdescent/dev")
    assert "Answer every topic the support desk covers" in message

    calls = server.calls
    assert len(calls) == 6
    first = calls[0]
    assert first.model == "test-model"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert "missing rule: hello" in first.user  # pytest's assertion message
    assert "def test_answers" in first.user  # the test's source
    assert '"edits"' in first.system  # the edit protocol
    assert "skills/support/style.md" in first.user  # frozen glob named as frozen
    for received in calls:
        for nodeid in HOLDOUT:
            assert nodeid not in received.text
    # refusals are fed back: the last prompt shows what was rejected and why
    last = calls[-1].user
    for seen in ("search-not-found", "- farewell: wave", "no-json", "frozen-path",
                 "secret-in-proposal"):
        assert seen in last
    assert KEY not in last  # a refused secret is never shown back to the model


@slow
def test_max_calls_stops_the_run_cleanly_before_the_next_call(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    server.script([], then="nothing useful")

    result = run(repo, model_env(server), "--evolve-max-calls", "2")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "max_calls"
    assert report["error"] is None
    assert len(server.calls) == 2
    assert report["model"]["calls"] == 2


@slow
def test_max_usd_stops_before_a_call_that_would_exceed_it(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK,
                    ini="evolve_prices =\n    test-model = 1000 1000\n")
    server.script([], then="nothing useful")

    result = run(repo, model_env(server), "--evolve-max-usd", "0.01")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "max_usd"
    assert server.calls == []
    assert report["cost_usd"] == 0.0
    # the proposer call the budget stopped was never made: no call is reported
    assert report["calls"] == report["model"]["calls"] == 0


@slow
def test_max_tokens_stops_before_the_call_that_would_pass_it(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)  # no price: the token budget needs none
    server.script([], then=Answer("nothing useful", input_tokens=1500, output_tokens=500))

    # 2,000 tokens a call: after three (6,000) the next one would pass 7,000
    result = run(repo, model_env(server), "--evolve-max-tokens", "7000",
                 "--evolve-workers", "1", "--evolve-rounds", "10")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert (report["stop_reason"], report["error"]) == ("max_tokens", None)
    assert report["max_tokens"] == 7000
    assert len(server.calls) == 3
    model = report["model"]
    assert (model["calls"], model["answers"], report["calls"]) == (3, 3, 3)
    assert (model["input_tokens"], model["output_tokens"]) == (4500, 1500)
    assert "stopped   max_tokens after " in result.stdout
    # the run store records a spent budget as a finished run, not a failed one
    assert (report["run"]["status"], report["run"]["stopped_reason"]) == ("completed", "budget")
    assert "3 proposer call(s)" in result.stdout


@slow
def test_a_token_budget_without_a_model_is_a_warning(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)  # a conftest hook proposes: its own calls are not seen

    result = evolve(repo, "--evolve-max-tokens", "1000", "--evolve-rounds", "0",
                    "--evolve-dry-run")

    assert result.returncode == 0, explain(result)
    warning = report_of(repo)["warnings"][-1]
    assert warning.startswith("--evolve-max-tokens 1000 counts the --evolve-model proposer's")
    assert "use --evolve-max-calls" in warning
    assert f"warning: {warning}" in result.stdout


@slow
def test_the_report_counts_the_requests_the_server_received(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    server.script([
        (500, {"retry-after-ms": "10"}, None),  # round 1: the SDK retries it ...
        "no edit",                              # ... and gets an answer
        (200, {}, {"unexpected": True}),        # round 2: a 200 that is not an answer
    ], then="no edit either")                   # round 3

    result = run(repo, model_env(server), "--evolve-workers", "1", "--evolve-rounds", "3")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    model = report["model"]
    assert model["calls"] == len(server.calls) == 4
    assert (model["answers"], model["failures"], model["cache_hits"]) == (2, 1, 0)
    assert report["calls"] == 3  # the proposer was asked three times
    assert f"model     {MODEL}: 4 call(s) sent, " in result.stdout
    text = (repo / ".agentdescent/report.md").read_text()
    assert "| requests sent |" in text


@slow
def test_a_dead_endpoint_ends_the_run_quickly_naming_it(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there

    started = time.monotonic()
    result = run(repo, model_env(None, base_url=dead), "--evolve-rounds", "10")
    elapsed = time.monotonic() - started

    assert result.returncode == 1, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "error"
    assert "127.0.0.1:9" in report["error"], report["error"]
    assert report["error"].startswith("BackendError:")
    assert report["rounds"] <= 1
    assert elapsed < 120


@slow
def test_rejected_edits_are_fed_back_with_the_aggregators_reason(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    useless = {"rationale": "style only", "edits": [
        {"path": "skills/support/style.md", "content": "Be brief and kind.\n"}]}
    server.script([answer(useless)], then="no edit")

    result = run(repo, model_env(server), "--evolve-rounds", "2", "--evolve-workers", "1")

    assert result.returncode == 0, explain(result)
    assert report_of(repo)["outcomes"].get("below-threshold") == 1
    second = server.calls[1].user
    assert "Be brief and kind." in second
    assert "below-threshold" in second


@slow
@pytest.mark.parametrize(("spec", "variable"), [("openai:gpt-4o-mini", "OPENAI_API_KEY"),
                                                ("anthropic:claude-haiku-4-5",
                                                 "ANTHROPIC_API_KEY")])
@slow
def test_a_missing_key_is_a_usage_error_naming_the_variable(
        tmp_path: Path, spec: str, variable: str) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    result = subprocess.run(
        [*_pytest(), "--evolve", "skills", "--evolve-model", spec],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 4, explain(result)
    assert f"needs {variable}" in result.stderr
    assert not (repo / ".agentdescent").exists()


@slow
def test_an_unknown_provider_is_a_usage_error(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    result = evolve(repo, "--evolve-model", "mistral:large")
    assert result.returncode == 4, explain(result)
    assert "'anthropic:MODEL' or 'openai:MODEL'" in result.stderr


@slow
def test_max_usd_without_a_price_is_a_usage_error(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    result = evolve(repo, "--evolve-model", MODEL, "--evolve-max-usd", "1",
                    env=model_env(None, base_url="http://127.0.0.1:9/v1"))
    assert result.returncode == 4, explain(result)
    assert "add a line 'test-model = INPUT_USD OUTPUT_USD'" in result.stderr


def _pytest() -> list[str]:
    import sys

    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:benchmark",
            "--evolve-sandbox", "local"]


@slow
def test_repeated_secrets_trip_the_guardrails_and_end_the_run(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK, ini="evolve_violation_limit = 2\n")
    leaky = answer({"rationale": "key", "edits": [
        {"path": "skills/support/notes.md", "content": f"use {KEY}\n"}]})
    server.script([], then=leaky)

    result = run(repo, model_env(server), "--evolve-rounds", "6")

    assert result.returncode == 1, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "error"
    assert report["error"].startswith("Guardrails: guardrails stopped the run after 2 critical")
    assert len(server.calls) == 2
    assert report["model"]["guardrail_violations"] == 2
    assert KEY not in (repo / ".agentdescent/report.json").read_text()


@slow
def test_record_then_replay_gives_the_same_run_without_the_server(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    server.script([answer(IMPROVING)])

    recorded = run(repo, model_env(server), "--evolve-llm-cache", "record", "--evolve-dry-run",
                   "--evolve-workers", "1")

    assert recorded.returncode == 0, explain(recorded)
    first = report_of(repo)
    assert first["outcomes"] == {"committed": 1}
    assert (repo / ".agentdescent/llm-cache.sqlite3").is_file()
    assert (first["model"]["calls"], first["model"]["cache_hits"]) == (len(server.calls), 0)
    assert len(server.calls) == 1
    server.close()
    dead = model_env(None, base_url="http://127.0.0.1:9/v1")

    replayed = run(repo, dead, "--evolve-llm-cache", "replay", "--evolve-dry-run",
                   "--evolve-workers", "1")

    assert replayed.returncode == 0, explain(replayed)
    second = report_of(repo)
    assert second["outcomes"] == first["outcomes"]
    assert second["reward_after"] == first["reward_after"] == 1.0
    # the replayed answer was not sent: no call, no paid token, counted apart
    replay = second["model"]
    assert (replay["calls"], replay["cache_hits"], replay["answers"]) == (0, 1, 0)
    assert (replay["input_tokens"], replay["output_tokens"]) == (0, 0)
    assert replay["replayed_input_tokens"] == first["model"]["input_tokens"] > 0
    assert replay["replayed_output_tokens"] == first["model"]["output_tokens"] > 0
    assert f"model     {MODEL}: 0 call(s) sent (and 1 replayed, not sent)" in replayed.stdout

    # another artifact means another prompt: replay refuses to call the model for it
    (repo / "skills/support/style.md").write_text("Be brief. Be kind.\n")
    user_git(repo, "commit", "--quiet", "-am", "kinder")
    missed = run(repo, dead, "--evolve-llm-cache", "replay", "--evolve-dry-run",
                 "--evolve-workers", "1")

    assert missed.returncode == 1, explain(missed)
    assert report_of(repo)["error"].startswith("LLMCacheMiss:")


@slow
def test_replay_without_a_recording_is_a_usage_error(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    dead = model_env(None, base_url="http://127.0.0.1:9/v1")

    result = run(repo, dead, "--evolve-llm-cache", "replay")

    assert result.returncode == 4, explain(result)
    assert "--evolve-llm-cache replay: " in result.stderr
    assert "record first" in result.stderr


SILENT_HOOK = '''\
import os


def pytest_evolve_propose(context):
    with open(os.environ["AD_HOOK_LOG"], "a", encoding="utf-8") as handle:
        handle.write(context.worker + "\\n")
    return None
'''


@slow
def test_a_conftest_hook_is_asked_first_and_the_model_answers_when_it_returns_none(
        tmp_path: Path, server: WireServer) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=SILENT_HOOK)
    log = tmp_path / "hook.log"
    server.script([answer(IMPROVING)], then="no edit")

    result = run(repo, {**model_env(server), "AD_HOOK_LOG": str(log)}, "--evolve-workers", "1")

    assert result.returncode == 0, explain(result)
    assert "proposer: pytest_evolve_propose (conftest.py), then model openai:test-model" \
        in result.stdout
    assert report_of(repo)["outcomes"] == {"committed": 1}
    assert len(log.read_text().splitlines()) == len(server.calls) == 1


@slow
def test_a_hook_that_answers_leaves_the_model_unasked(
        tmp_path: Path, server: WireServer) -> None:
    from test_session_runs import PROPOSER

    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=PROPOSER)
    server.script([], then="no edit")

    result = run(repo, model_env(server))

    assert result.returncode == 0, explain(result)
    assert report_of(repo)["accepted"] >= 1
    assert server.calls == []


@slow
def test_the_anthropic_provider_proposes_through_the_messages_api(tmp_path: Path) -> None:
    from wire_servers import start_anthropic_server

    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK)
    with start_anthropic_server() as server:
        server.script([answer(IMPROVING)], then="no edit")
        env = {"ANTHROPIC_API_KEY": "anthropic-test-key-5678",
               "ANTHROPIC_BASE_URL": server.base_url}
        result = evolve(repo, "--evolve-model", "anthropic:claude-haiku-4-5",
                        "--evolve-workers", "1", env=env)
        calls = server.calls

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["outcomes"] == {"committed": 1}
    assert report["cost_usd"] > 0  # claude-haiku-4-5 has a price
    assert report["model"]["cost_usd"] == report["cost_usd"]
    assert len(calls) == 1
    assert calls[0].model == "claude-haiku-4-5"
    headers = calls[0].headers  # this SDK version sends the key as x-api-key or a bearer
    assert "anthropic-test-key-5678" in (headers.get("x-api-key", "")
                                         + headers.get("authorization", ""))
    assert '"edits"' in calls[0].system
    assert "missing rule:" in calls[0].user


# ---------------------------------------------------------------- the proposer on its own
# (a callable model: ModelClient.from_callable, no network; the wire format is tested above)


def _proposer(answers: list[str], **kw: Any) -> Any:
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
        return answers.pop(0)

    proposer = ModelProposer(ModelClient.from_callable(model), spec="callable:test",
                             tree=FileTree(["skills"]), guardrails=Guardrails(env={}),
                             templates=load_templates(), frozen="tests", **kw)
    failure = Failure("tests/test_bot.py::test_hello", "failed", 0.0,
                      "AssertionError: missing rule: hello", "", "def test_hello(): ...")
    files = {"skills/rules.md": "# Rules\n- greeting: say hi\n"}

    def context(round_: int, worker: str = "worker-0") -> ProposeContext:
        return ProposeContext(files=files, roots=("skills",), failures=(failure,),
                              round=round_, worker=worker, version=0, rng=random.Random(0))

    return proposer, context, prompts


def _judged(round_: int, *decisions: tuple[str, str, dict[str, str | None] | None, str]
            ) -> Any:
    """The RoundInfo the engine builds from merge reports: (category, reason, ops, author);
    ops None is a refusal by the proposer before anything became a candidate."""
    from agentdescent_core.artifacts.diff import Diff
    from agentdescent_core.evidence import MergeReport
    from agentdescent_core.loop.result import round_info

    reports = [
        MergeReport("skills", category, reason, diff=Diff(ops, author=author))
        if ops is not None else
        MergeReport("skills", category, reason, extra={
            "code": "no-json", "refused_by": "proposer", "worker": author,
            "task": "tests/test_bot.py::test_hello"})
        for category, reason, ops, author in decisions
    ]
    return round_info(round_, 0.0, reports)


HELLO = {"rationale": "say hello", "edits": [
    {"path": "skills/rules.md", "search": "- greeting: say hi\n",
     "replace": "- greeting: say hi\n- hello: wave\n"}]}


def test_an_edit_the_aggregator_turns_down_is_shown_in_the_next_prompt() -> None:
    from agentdescent_core.memory import content_key

    proposer, context, prompts = _proposer([answer(HELLO), answer(HELLO)])
    ops = proposer.pytest_evolve_propose(context=context(1))
    assert ops.rationale == "say hello"
    key = content_key(dict(ops))[:8]
    proposer.observe_round(_judged(1, ("below-threshold", f"diff {key} by worker-0: "
                                       "P(improvement) 0.40 < 0.95", dict(ops), "worker-0")))
    proposer.pytest_evolve_propose(context=context(2))
    assert "(none yet)" in prompts[0]
    assert "+- hello: wave" in prompts[1]
    assert "rejected because: below-threshold: P(improvement) 0.40 < 0.95" in prompts[1]
    assert proposer.report()["proposals"][0]["outcome"] == "below-threshold"


def test_a_committed_edit_is_not_fed_back_as_rejected() -> None:
    from agentdescent_core.memory import content_key

    edit = {"rationale": "r", "edits": [{"path": "skills/new.md", "content": "x\n"}]}
    proposer, context, prompts = _proposer([answer(edit), "nothing"])
    ops = proposer.pytest_evolve_propose(context=context(1))
    key = content_key(dict(ops))[:8]
    proposer.observe_round(_judged(1, ("committed", f"diff {key} by worker-0 committed as "
                                       "v1: ok", dict(ops), "worker-0")))
    with pytest.raises(RefusalError, match=r"JSON"):
        proposer.pytest_evolve_propose(context=context(2))
    assert "(none yet)" in prompts[1]
    assert proposer.report()["proposals"][0]["outcome"] == "committed"


def test_a_fused_candidate_is_settled_for_each_worker_that_proposed_a_part() -> None:
    from agentdescent_core.memory import content_key

    bye = {"rationale": "say bye", "edits": [
        {"path": "skills/bye.md", "content": "- bye: wave\n"}]}
    proposer, context, prompts = _proposer([answer(HELLO), answer(bye), "nothing", "nothing"])
    hello_ops = dict(proposer.pytest_evolve_propose(context=context(1, "worker-0")))
    bye_ops = dict(proposer.pytest_evolve_propose(context=context(1, "worker-1")))
    fused = {**hello_ops, **bye_ops}
    label = f"fused {content_key(fused)[:8]} by worker-0, worker-1"
    proposer.observe_round(_judged(
        1,
        # worker-0's proposer refused an answer of the same round first: that answer was
        # never handed on, so it is not the verdict about worker-0's edit
        ("no-json", "worker-0's proposal for task 'tests/test_bot.py::test_hello' was "
                    "refused by the proposer (no-json): no JSON", None, "worker-0"),
        ("below-threshold", f"{label}: P(improvement) 0.60 < 0.95", fused,
         "worker-0,worker-1"),
    ))
    assert [p["outcome"] for p in proposer.report()["proposals"]] == \
        ["below-threshold", "below-threshold"]
    for worker in ("worker-0", "worker-1"):
        with pytest.raises(RefusalError):
            proposer.pytest_evolve_propose(context=context(2, worker))
    for prompt in prompts[2:]:  # each worker's next prompt shows the fused rejection
        assert "+- hello: wave" in prompt
        assert "created skills/bye.md" in prompt
        assert "rejected because: below-threshold: P(improvement) 0.60 < 0.95" in prompt
        assert label not in prompt  # the candidate's label means nothing to the model


def test_a_lost_compare_and_swap_waits_for_the_refiled_cards_verdict() -> None:
    from agentdescent_core.memory import content_key

    proposer, context, prompts = _proposer([answer(HELLO), "nothing", "nothing"])
    ops = dict(proposer.pytest_evolve_propose(context=context(1)))
    label = f"diff {content_key(ops)[:8]} by worker-0"
    proposer.observe_round(_judged(1, ("cas-conflict", f"{label}: the head moved", ops,
                                       "worker-0")))
    assert proposer.report()["proposals"][0]["outcome"] == "cas-conflict"
    with pytest.raises(RefusalError):
        proposer.pytest_evolve_propose(context=context(2))
    assert "(none yet)" in prompts[1]  # no verdict yet: nothing was rejected
    # round 2 judges the re-filed card (its content, not its worker: another round)
    proposer.observe_round(_judged(2, ("below-threshold", f"{label}: P(improvement) 0.30 < "
                                       "0.95", ops, "worker-0")))
    assert proposer.report()["proposals"][0]["outcome"] == "below-threshold"
    with pytest.raises(RefusalError):
        proposer.pytest_evolve_propose(context=context(3))
    assert "rejected because: below-threshold: P(improvement) 0.30 < 0.95" in prompts[2]


def test_an_answer_without_changes_is_no_proposal_and_is_remembered() -> None:
    same = {"rationale": "r", "edits": [
        {"path": "skills/rules.md", "content": "# Rules\n- greeting: say hi\n"}]}
    proposer, context, prompts = _proposer([answer(same), "nothing"])
    assert proposer.pytest_evolve_propose(context=context(1)) is None
    with pytest.raises(RefusalError):
        proposer.pytest_evolve_propose(context=context(2))
    assert "it changes nothing in the current files" in prompts[1]


def test_no_failures_means_no_call() -> None:
    import dataclasses

    proposer, context, prompts = _proposer([])
    quiet = dataclasses.replace(context(1), failures=())
    assert proposer.pytest_evolve_propose(context=quiet) is None
    assert prompts == []


def test_a_replay_needs_no_key_but_a_live_model_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentdescent.session import _model_setup
    from pytest_agentdescent.settings import EvolveSettings

    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    live = EvolveSettings(model="anthropic:claude-haiku-4-5")
    with pytest.raises(pytest.UsageError, match="needs ANTHROPIC_API_KEY"):
        _model_setup(live)
    replay = EvolveSettings(model="anthropic:claude-haiku-4-5", llm_cache="replay")
    assert _model_setup(replay).spec.provider == "anthropic"
