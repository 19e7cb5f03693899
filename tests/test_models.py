"""Model clients over the real SDKs and real HTTP, against tests/wire_servers.py.

Nothing here mocks an SDK: each test points ``anthropic`` / ``openai`` at a local
server (through the SDKs' own environment variables unless the test is about
explicit arguments) and asserts on the requests the server received.
"""

from __future__ import annotations

import threading
import time

import pytest
from wire_servers import Answer, start_anthropic_server, start_openai_server

from agentdescent_core.errors import BackendError
from agentdescent_core.proposers.models import (
    PLACEHOLDER_KEY,
    ModelBackendError,
    ModelClient,
    ModelSpec,
    Usage,
    missing_key,
    parse_model_spec,
)
from agentdescent_core.proposers.pricing import Price, PriceTable, parse_price_lines

SDK_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
)
FAST_RETRY = {"retry-after-ms": "10"}  # keeps retry tests quick; the SDKs honour it


@pytest.fixture(autouse=True)
def clean_sdk_env(monkeypatch):
    for name in SDK_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def anthropic_server(monkeypatch):
    with start_anthropic_server() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-anthropic")
        yield server


@pytest.fixture
def openai_server(monkeypatch):
    with start_openai_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
        yield server


@pytest.fixture(params=["anthropic", "openai"])
def provider_server(request):
    """Either server (env configured), with the matching spec."""
    server = request.getfixturevalue(f"{request.param}_server")
    model = "claude-haiku-4-5" if request.param == "anthropic" else "gpt-4o-mini"
    return ModelSpec(request.param, model), server


def sent_key(req):
    """The API key a request carried (``x-api-key``, or a Bearer token in newer SDKs)."""
    return req.headers.get("x-api-key") or req.headers.get("authorization", "").removeprefix(
        "Bearer "
    )


# -- specs and keys ----------------------------------------------------------------------


def test_parse_model_spec_accepts_both_providers_and_ollama_tags():
    assert parse_model_spec("anthropic:claude-haiku-4-5") == ModelSpec(
        "anthropic", "claude-haiku-4-5"
    )
    assert parse_model_spec(" OpenAI:gpt-4o-mini ") == ModelSpec("openai", "gpt-4o-mini")
    assert parse_model_spec("openai:llama3.1:8b").model == "llama3.1:8b"
    assert str(parse_model_spec("openai:gpt-4o")) == "openai:gpt-4o"


@pytest.mark.parametrize("bad", ["gemini:pro", "claude-haiku-4-5", "anthropic:", ":gpt-4o", ""])
def test_parse_model_spec_names_the_spec_and_the_prefixes(bad):
    with pytest.raises(ValueError, match="'anthropic' or 'openai'") as info:
        parse_model_spec(bad)
    assert repr(bad) in str(info.value)


def test_missing_key_names_the_variable():
    claude, gpt = ModelSpec("anthropic", "claude-haiku-4-5"), ModelSpec("openai", "gpt-4o")
    assert missing_key(claude, {}) == "ANTHROPIC_API_KEY"
    assert missing_key(claude, {"ANTHROPIC_API_KEY": ""}) == "ANTHROPIC_API_KEY"
    assert missing_key(claude, {"ANTHROPIC_API_KEY": "k"}) is None
    assert missing_key(claude, {"ANTHROPIC_AUTH_TOKEN": "t"}) is None
    assert missing_key(gpt, {"ANTHROPIC_API_KEY": "k"}) == "OPENAI_API_KEY"
    assert missing_key(gpt, {"OPENAI_API_KEY": "k"}) is None
    # An OpenAI-compatible local server (Ollama) needs no key.
    assert missing_key(gpt, {"OPENAI_BASE_URL": "http://localhost:11434/v1"}) is None


def test_client_refuses_to_start_without_a_key():
    with pytest.raises(ModelBackendError, match="ANTHROPIC_API_KEY is not set"):
        ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"))
    with pytest.raises(ModelBackendError, match="OPENAI_API_KEY is not set"):
        ModelClient(ModelSpec("openai", "gpt-4o-mini"))


# -- what goes over the wire -------------------------------------------------------------


def test_anthropic_request_and_usage_over_http(anthropic_server):
    anthropic_server.script([Answer("the answer", input_tokens=1200, output_tokens=300)])
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"), max_tokens=777)

    done = client.complete("You improve skills.", "test_x failed: assert 'hi' == 'hello'")

    assert done.text == "the answer"
    assert done.usage == Usage(1200, 300)
    assert done.model == "claude-haiku-4-5"
    assert done.cost_usd == pytest.approx((1200 * 1.0 + 300 * 5.0) / 1e6)
    [req] = anthropic_server.requests
    assert req.path == "/v1/messages"
    assert req.body["model"] == "claude-haiku-4-5"
    assert req.body["max_tokens"] == 777
    assert req.body["system"] == "You improve skills."
    assert req.body["messages"] == [
        {"role": "user", "content": "test_x failed: assert 'hi' == 'hello'"}
    ]
    assert "temperature" not in req.body  # the 2.x Messages API takes no sampling params
    assert sent_key(req) == "sk-test-anthropic"
    assert "anthropic-version" in req.headers
    assert client.endpoint == anthropic_server.base_url
    assert (client.calls, client.usage) == (1, Usage(1200, 300))
    assert client.cost_usd == pytest.approx(done.cost_usd)


def test_openai_request_and_usage_over_http(openai_server):
    openai_server.script([Answer("edits", input_tokens=1000, output_tokens=2000)])
    client = ModelClient(ModelSpec("openai", "gpt-4o-mini"), temperature=0.7, max_tokens=321)

    done = client.complete("SYSTEM RULES", "USER FAILURES")

    assert (done.text, done.usage) == ("edits", Usage(1000, 2000))
    assert done.cost_usd == pytest.approx((1000 * 0.15 + 2000 * 0.6) / 1e6)
    [req] = openai_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body["model"] == "gpt-4o-mini"
    assert req.body["messages"] == [
        {"role": "system", "content": "SYSTEM RULES"},
        {"role": "user", "content": "USER FAILURES"},
    ]
    assert req.body["max_tokens"] == 321
    assert req.body["temperature"] == 0.7
    assert req.headers["authorization"] == "Bearer sk-test-openai"
    assert client.endpoint == openai_server.base_url


def _like_openai_reasoning_models(received):
    """What api.openai.com answers a reasoning model sent the classic request shape."""
    body = received.body
    for param, code in (("max_tokens", "unsupported_parameter"),
                        ("temperature", "unsupported_value")):
        if param in body:
            error = {"message": f"Unsupported parameter: '{param}' is not supported with "
                                "this model. Use 'max_completion_tokens' instead.",
                     "type": "invalid_request_error", "param": param, "code": code}
            return (400, {"x-should-retry": "false"}, {"error": error})
    return Answer("reasoned", input_tokens=10, output_tokens=20)


@pytest.mark.parametrize("model", ["gpt-5", "o3-mini", "o4-mini", "openai/gpt-5-mini"])
def test_reasoning_models_get_max_completion_tokens_and_no_temperature(openai_server, model):
    openai_server.script([], then=_like_openai_reasoning_models)
    client = ModelClient(ModelSpec("openai", model), temperature=0.7, max_tokens=321)

    done = client.complete("s", "u")

    assert done.text == "reasoned"
    [req] = openai_server.requests  # the right shape at once: no refused first try
    assert req.body["max_completion_tokens"] == 321
    assert "max_tokens" not in req.body
    assert "temperature" not in req.body


def test_a_model_that_refuses_max_tokens_is_asked_again_in_its_shape(openai_server):
    """A reasoning model we do not know by name costs one refused request, once per run."""
    openai_server.script([], then=_like_openai_reasoning_models)
    client = ModelClient(ModelSpec("openai", "thinker-2"), temperature=0.3, max_tokens=99)

    first = client.complete("s", "u")
    second = client.complete("s", "u2")

    assert (first.text, second.text) == ("reasoned", "reasoned")
    shapes = [sorted(k for k in r.body if k in ("max_tokens", "max_completion_tokens",
                                                  "temperature"))
              for r in openai_server.requests]
    assert shapes == [["max_tokens", "temperature"], ["max_completion_tokens"],
                      ["max_completion_tokens"]]
    # the refused request reached the server too: it is a call, but not an answer
    assert (client.calls, client.answers) == (3, 2) == (len(openai_server.requests), 2)


def test_other_bad_requests_are_not_retried_in_another_shape(openai_server):
    error = {"message": "messages: too long", "type": "invalid_request_error",
             "param": "messages", "code": "context_length_exceeded"}
    openai_server.script([(400, {"x-should-retry": "false"}, {"error": error})])
    client = ModelClient(ModelSpec("openai", "gpt-4o-mini"), max_retries=0)

    with pytest.raises(ModelBackendError, match="too long"):
        client.complete("s", "u")
    assert len(openai_server.requests) == 1


def test_openai_compatible_local_server_needs_no_key(monkeypatch):
    with start_openai_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.script(["local answer"])
        spec = parse_model_spec("openai:llama3.1:8b")
        assert missing_key(spec) is None
        client = ModelClient(spec)
        done = client.complete("s", "u")
        assert done.text == "local answer"
        assert done.cost_usd is None
        assert client.cost_usd is None
        assert server.requests[0].headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
        assert server.requests[0].body["model"] == "llama3.1:8b"


def test_explicit_base_url_and_key_win_over_the_environment(anthropic_server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    anthropic_server.script(["direct"])
    client = ModelClient(
        ModelSpec("anthropic", "claude-haiku-4-5"),
        api_key="sk-explicit",
        base_url=anthropic_server.base_url,
    )
    assert client.complete("s", "u").text == "direct"
    assert sent_key(anthropic_server.requests[0]) == "sk-explicit"


# -- retries and failures ----------------------------------------------------------------


def test_429_with_retry_after_is_waited_out_then_answered(provider_server):
    spec, server = provider_server
    server.script([(429, {"retry-after": "1"}, None), "after the wait"])
    client = ModelClient(spec, max_retries=2)

    started = time.monotonic()
    done = client.complete("s", "u")
    waited = time.monotonic() - started

    assert done.text == "after the wait"
    assert len(server.requests) == 2
    # The SDK's own first backoff is at most 0.5 s: a 1 s wait means retry-after was honoured.
    assert waited >= 0.95
    assert server.requests[1].headers.get("x-stainless-retry-count") == "1"
    # the SDK's retry went over the wire: two calls the server saw, one answer
    assert (client.calls, client.answers, client.failures) == (2, 1, 0)


def test_persistent_500_becomes_a_backend_error_naming_the_endpoint(provider_server):
    spec, server = provider_server
    server.script([(500, FAST_RETRY, None)] * 3)
    client = ModelClient(spec, max_retries=2)

    with pytest.raises(ModelBackendError) as info:
        client.complete("s", "u")

    err = info.value
    assert isinstance(err, BackendError)
    assert len(server.requests) == 3  # the first try and two retries
    assert server.base_url in str(err)
    assert "HTTP 500" in str(err)
    assert "after 2 retries" in str(err)
    assert (err.status, err.endpoint) == (500, server.base_url)
    assert (client.calls, client.answers, client.failures) == (3, 0, 1)
    assert client.last_error == str(err)


def test_a_rejected_key_is_not_retried_and_names_the_variable(anthropic_server):
    anthropic_server.script([(401, {}, None)])
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"), max_retries=3)
    with pytest.raises(ModelBackendError, match=r"HTTP 401.*not retried.*ANTHROPIC_API_KEY"):
        client.complete("s", "u")
    assert len(anthropic_server.requests) == 1


def test_a_hanging_endpoint_times_out_after_the_retries(provider_server):
    spec, server = provider_server
    server.script(["hang", "hang"])
    client = ModelClient(spec, timeout=0.4, max_retries=1)

    started = time.monotonic()
    with pytest.raises(ModelBackendError, match=r"did not answer within 0\.4s"):
        client.complete("s", "u")

    assert len(server.requests) == 2
    assert time.monotonic() - started < 10


def test_a_timeout_then_an_answer_recovers(openai_server):
    openai_server.script(["hang", "late but fine"])
    client = ModelClient(ModelSpec("openai", "gpt-4o-mini"), timeout=0.4, max_retries=1)
    assert client.complete("s", "u").text == "late but fine"


def test_a_truncated_body_is_retried_then_reported(provider_server):
    spec, server = provider_server
    server.script(["truncated", "truncated"])
    client = ModelClient(spec, max_retries=1)
    with pytest.raises(ModelBackendError, match="dropped the connection") as info:
        client.complete("s", "u")
    assert server.base_url in str(info.value)
    assert len(server.requests) == 2


def test_a_truncated_body_then_a_good_one_succeeds(anthropic_server):
    anthropic_server.script(["truncated", "whole"])
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"), max_retries=1)
    assert client.complete("s", "u").text == "whole"


def test_calls_are_the_requests_the_server_received(provider_server):
    """Retries, a dropped body and an answer that is not one are calls; tokens are the answers'."""
    spec, server = provider_server
    server.script([
        "truncated",  # dropped mid-body: the SDK sends it again
        Answer("first", input_tokens=11, output_tokens=2),
        (200, {}, {"unexpected": True}),  # a 200 that is no answer: an error, not retried
        (429, FAST_RETRY, None),  # rate limited once, then answered
        Answer("second", input_tokens=5, output_tokens=3),
    ])
    client = ModelClient(spec, max_retries=1)

    assert client.complete("s", "one").text == "first"
    assert client.calls == len(server.calls) == 2
    with pytest.raises(ModelBackendError, match="without"):
        client.complete("s", "two")
    assert client.calls == len(server.calls) == 3
    assert client.complete("s", "three").text == "second"

    assert client.calls == len(server.calls) == 5
    assert (client.answers, client.failures, client.cache_hits) == (2, 1, 0)
    assert client.wire_usage == client.usage == Usage(16, 5)
    assert client.tokens == 21


def test_a_refused_connection_is_no_call():
    client = ModelClient(ModelSpec("openai", "gpt-4o-mini"), api_key="k",
                         base_url="http://127.0.0.1:9/v1", max_retries=1)
    with pytest.raises(ModelBackendError, match="could not be reached"):
        client.complete("s", "u")
    assert (client.calls, client.failures) == (0, 1)  # nothing reached a server


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((200, {}, "this is not json {"), "not a valid"),
        ((200, {"content-type": "text/html"}, "<html>proxy login</html>"), "without"),
        ((200, {}, {"unexpected": True}), "without"),
    ],
    ids=["non-json", "html-page", "wrong-shape"],
)
def test_a_body_that_is_not_an_answer_is_a_backend_error(provider_server, reply, message):
    spec, server = provider_server
    server.script([reply])
    client = ModelClient(spec, max_retries=2)
    with pytest.raises(ModelBackendError, match=message) as info:
        client.complete("s", "u")
    assert server.base_url in str(info.value)
    assert client.failures == 1


def test_a_dead_endpoint_fails_quickly(monkeypatch):
    with start_anthropic_server() as server:
        dead_url = server.base_url
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    client = ModelClient(
        ModelSpec("anthropic", "claude-haiku-4-5"), base_url=dead_url, max_retries=0
    )
    with pytest.raises(ModelBackendError, match="could not be reached") as info:
        client.complete("s", "u")
    assert dead_url in str(info.value)


# -- accounting --------------------------------------------------------------------------


def test_accounting_is_exact_under_concurrent_calls(openai_server):
    openai_server.script([], then=Answer("ok", input_tokens=10, output_tokens=3))
    client = ModelClient(ModelSpec("openai", "gpt-4o-mini"))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                client.complete("s", "u")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert client.calls == 30 == len(openai_server.requests)
    assert client.usage == Usage(300, 90)
    assert client.cost_usd == pytest.approx(30 * (10 * 0.15 + 3 * 0.6) / 1e6)


def test_price_overrides_apply_to_the_client(anthropic_server):
    anthropic_server.script([Answer("x", input_tokens=1_000_000, output_tokens=0)])
    prices = PriceTable().with_overrides({"claude-haiku-4-5": (2.0, 4.0)})
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"), prices=prices)
    assert client.complete("s", "u").cost_usd == pytest.approx(2.0)
    assert client.cost_usd == pytest.approx(2.0)


def test_from_callable_takes_one_or_two_argument_functions():
    seen: list[tuple[str, ...]] = []

    def one(prompt: str) -> str:
        seen.append((prompt,))
        return "one"

    def two(system: str, user: str) -> str:
        seen.append((system, user))
        return "two"

    assert ModelClient.from_callable(one).complete("S", "U").text == "one"
    client = ModelClient.from_callable(two, name="scripted")
    done = client.complete("S", "U")
    assert (done.text, done.usage, done.cost_usd) == ("two", Usage(0, 0), None)
    assert seen == [("S\n\nU",), ("S", "U")]
    assert client.endpoint == "callable:scripted"
    assert client.calls == 1


def test_from_callable_failures_are_backend_errors():
    def broken(prompt: str) -> str:
        raise RuntimeError("quota")

    with pytest.raises(ModelBackendError, match="RuntimeError: quota"):
        ModelClient.from_callable(broken).complete("s", "u")
    with pytest.raises(ModelBackendError, match="returned int"):
        ModelClient.from_callable(lambda p: 3).complete("s", "u")  # type: ignore[arg-type,return-value]


def test_as_completion_plugs_into_the_llm_agent_api(anthropic_server):
    anthropic_server.script(["reply"])
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"))
    completion = client.as_completion(system="be brief")
    assert completion("question") == "reply"
    assert anthropic_server.requests[0].body["system"] == "be brief"


# -- prices ------------------------------------------------------------------------------


def test_price_table_defaults_snapshots_and_unknown_models():
    table = PriceTable()
    assert table.price("claude-haiku-4-5") == Price(1.0, 5.0)
    assert table.price("claude-haiku-4-5-20251001") == Price(1.0, 5.0)
    assert table.price("gpt-4o-2024-08-06") == Price(2.5, 10.0)
    assert table.price("GPT-4o-mini") == Price(0.15, 0.6)
    assert table.price("o3-pro") is None  # never priced as "o3" by prefix
    assert table.price("llama3.1:8b") is None
    assert table.cost("llama3.1:8b", Usage(10, 10)) is None
    assert table.cost("gpt-4o", Usage(2_000_000, 1_000_000)) == pytest.approx(15.0)
    assert "gpt-4o" in table
    assert "mystery" not in table


def test_price_overrides_replace_and_add_without_touching_the_original():
    base = PriceTable()
    lines = ["# local prices", "gpt-4o = 1 2", "", "my-vllm-model = 0.0 0.0  # free"]
    custom = base.with_overrides(parse_price_lines(lines))
    assert custom.price("gpt-4o") == Price(1.0, 2.0)
    assert custom.price("my-vllm-model") == Price(0.0, 0.0)
    assert base.price("gpt-4o") == Price(2.5, 10.0)


@pytest.mark.parametrize("line", ["gpt-4o 1 2", "gpt-4o = 1", "= 1 2", "gpt-4o = one two"])
def test_a_malformed_price_line_is_quoted(line):
    with pytest.raises(ValueError, match="evolve_prices line") as info:
        parse_price_lines([line])
    assert repr(line.strip()) in str(info.value)


@pytest.mark.parametrize("values", [(-1.0, 1.0), (1.0, float("nan")), (float("inf"), 0.0)])
def test_prices_must_be_finite_and_non_negative(values):
    with pytest.raises(ValueError, match="finite number >= 0"):
        Price(*values)


def test_an_exhausted_script_fails_loudly_and_is_not_retried(anthropic_server):
    """The wire server's own guard: more calls than scripted is an error, at once."""
    anthropic_server.script(["only one"])
    client = ModelClient(ModelSpec("anthropic", "claude-haiku-4-5"), max_retries=3)
    client.complete("s", "u")
    with pytest.raises(ModelBackendError, match=r"script exhausted.*not retried"):
        client.complete("s", "u")
    assert len(anthropic_server.requests) == 2
    assert anthropic_server.pending == 0
