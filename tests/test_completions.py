"""``claude()`` and ``openai_compatible()`` over the real SDKs and real HTTP.

Each test points the helper at a local server from tests/wire_servers.py and
asserts on what the server received; nothing mocks an SDK.  The end-to-end
tests run a whole evolve() whose agent and reflector are the helper's
completion, as seed 001 shows: ``evolve(tasks, reward, agent=LLMAgent(claude(...)))``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from wire_servers import Received, start_anthropic_server, start_openai_server

from agentdescent_core import (
    AggregatorConfig,
    AppendRules,
    LLMAgent,
    Task,
    claude,
    evolve,
    openai_compatible,
    reflector,
)
from agentdescent_core.errors import BackendError
from agentdescent_core.proposers import ModelBackendError

SDK_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
            "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID")
CENTS = "Give money amounts as integer cents, without a currency sign."


@pytest.fixture(autouse=True)
def clean_sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SDK_VARS:
        monkeypatch.delenv(name, raising=False)


def pens(n: int) -> Task:
    return Task(id=f"q{n}", prompt=f"What do {n} pens at $4 cost?", meta={"gold": str(n * 400)})


def reward(task: Task, output: str) -> float:
    return 1.0 if output.strip() == task.meta["gold"] else 0.0


def model_reply(received: Received) -> str:
    """The scripted model: reflects with the cents rule, answers in cents once told to."""
    prompt = received.user
    if prompt.startswith("You are improving"):
        return f"Rule: {CENTS}"
    n = int(prompt.split("What do ")[1].split()[0])
    return str(n * 400) if "integer cents" in prompt else f"${n * 4}.00"


def run_evolve(completion: Callable[[str], str]) -> tuple[float | None, float | None, str]:
    tasks = [pens(n) for n in range(1, 17)]
    result = evolve(tasks, reward, agent=LLMAgent(completion), strategy=AppendRules(),
                    n_workers=1, rounds=2, target_reward=1.0,
                    agg_config=AggregatorConfig(repeats=1, baseline_repeats=2))
    assert result.error is None, result.error
    return result.initial_reward, result.final_reward, result.rendered


def test_claude_drives_an_evolve_run_over_the_messages_api() -> None:
    with start_anthropic_server() as server:
        server.script([], then=model_reply)
        completion = claude(model="claude-haiku-4-5", api_key="sk-ant-test",
                            base_url=server.base_url, system="Be exact.")
        before, after, rendered = run_evolve(completion)
        calls = server.calls
    assert (before, after) == (0.0, 1.0)
    assert CENTS in rendered
    assert calls
    assert all(c.model == "claude-haiku-4-5" for c in calls)
    assert all(c.system == "Be exact." for c in calls)
    # the key reaches the server (this SDK sends it as a bearer token)
    assert all("sk-ant-test" in c.headers.get("x-api-key", c.headers.get("authorization", ""))
               for c in calls)
    assert any(c.user.startswith("You are improving") for c in calls)  # the reflector
    assert completion.client.calls == len(calls)
    assert "sk-ant-test" not in repr(completion)


def test_openai_compatible_drives_an_evolve_run_over_chat_completions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with start_openai_server() as server:
        server.script([], then=model_reply)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # a local server: no key
        completion = openai_compatible(model="glm-4.6")
        before, after, rendered = run_evolve(completion)
        calls = server.calls
    assert (before, after) == (0.0, 1.0)
    assert CENTS in rendered
    assert calls
    assert all(c.model == "glm-4.6" for c in calls)
    assert all(c.system == "" for c in calls)  # no system prompt unless one is given
    assert completion.client.usage.input_tokens > 0


def test_a_completion_is_a_reflector_on_its_own() -> None:
    with start_openai_server() as server:
        server.script(["Rule: Answer in cents."])
        propose = reflector(openai_compatible(model="gpt-4o-mini", api_key="sk-test",
                                              base_url=server.base_url))
        rule = propose("", pens(3), "$12.00", 0.0)
        sent = server.calls[0]
    assert rule == "Answer in cents."
    assert "What do 3 pens at $4 cost?" in sent.user
    assert sent.headers.get("authorization") == "Bearer sk-test"


def test_a_failing_endpoint_is_a_backend_error_naming_it() -> None:
    with start_anthropic_server() as server:
        server.script([(401, {"x-should-retry": "false"}, None)])
        completion = claude(api_key="wrong", base_url=server.base_url, max_retries=0)
        with pytest.raises(BackendError, match=r"HTTP 401.*check ANTHROPIC_API_KEY"):
            completion("hello")


def test_missing_keys_and_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(ModelBackendError, match=r"claude\(\): ANTHROPIC_API_KEY is not set"):
        claude()
    with pytest.raises(ModelBackendError, match="OPENAI_API_KEY is not set and no base URL"):
        openai_compatible(model="gpt-4o-mini")
    with pytest.raises(ValueError, match=r"openai_compatible\(model=...\) needs the model's name"):
        openai_compatible(model=" ", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"claude\(max_tokens=...\) must be an integer >= 1"):
        claude(api_key="k", max_tokens=0)
