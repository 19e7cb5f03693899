"""Record / replay of model calls: a replay answers from the recording and never calls out."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from wire_servers import Answer, start_anthropic_server, start_openai_server

from agentdescent_core.errors import BackendError
from agentdescent_core.proposers.llm_cache import (
    CachedAnswer,
    LLMCache,
    LLMCacheMiss,
    request_key,
)
from agentdescent_core.proposers.models import ModelClient, ModelSpec, Usage

HAIKU = ModelSpec("anthropic", "claude-haiku-4-5")
KEY_ARGS: dict[str, Any] = {
    "provider": "anthropic",
    "model": "claude-haiku-4-5",
    "system": "sys",
    "user": "usr",
    "max_tokens": 4096,
    "temperature": 0.2,
}


@pytest.fixture(autouse=True)
def clean_sdk_env(monkeypatch):
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(monkeypatch):
    with start_anthropic_server() as srv:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        yield srv


def test_request_key_depends_on_every_parameter():
    base = request_key(**KEY_ARGS)
    assert base == request_key(**KEY_ARGS)
    assert len(base) == 64
    assert int(base, 16) >= 0
    variants: list[dict[str, Any]] = [
        {"provider": "openai"},
        {"model": "claude-sonnet-4-5"},
        {"system": "sys2"},
        {"user": "usr "},
        {"max_tokens": 4095},
        {"temperature": 0.3},
    ]
    keys = {request_key(**{**KEY_ARGS, **v}) for v in variants}
    assert base not in keys
    assert len(keys) == len(variants)
    # Field boundaries matter: moving text between system and user is another request.
    assert request_key(**{**KEY_ARGS, "system": "sy", "user": "susr"}) != base


def record_run(server, path):
    """A run asking the same question twice (two answers) and another one once."""
    server.script(
        [
            Answer("first answer", input_tokens=100, output_tokens=10),
            Answer("second answer", input_tokens=100, output_tokens=20),
            Answer("other answer", input_tokens=50, output_tokens=5),
        ]
    )
    with LLMCache(path, "record") as cache:
        client = ModelClient(HAIKU, cache=cache)
        texts = [
            client.complete("sys", "failing test A").text,
            client.complete("sys", "failing test A").text,
            client.complete("sys", "failing test B").text,
        ]
        assert len(cache) == 3
    assert len(server.requests) == 3
    return texts, client


def test_replay_returns_the_recorded_answers_in_order_without_calling(server, tmp_path):
    path = tmp_path / "state" / "llm-cache.sqlite"
    texts, recorder = record_run(server, path)
    assert texts == ["first answer", "second answer", "other answer"]

    with LLMCache(path, "replay") as cache:
        client = ModelClient(HAIKU, cache=cache)
        replayed = [
            client.complete("sys", "failing test A").text,
            client.complete("sys", "failing test B").text,
            client.complete("sys", "failing test A").text,
        ]
    assert replayed == ["first answer", "other answer", "second answer"]
    assert len(server.requests) == 3  # nothing new reached the server
    # Budgets see the same numbers as in the recorded run; what went over the wire is
    # nothing: no call, no paid token, the hits counted apart.
    assert (client.calls, client.answers, client.cache_hits) == (0, 0, 3)
    assert (recorder.calls, recorder.answers, recorder.cache_hits) == (3, 3, 0)
    assert client.usage == recorder.usage == Usage(250, 35)
    assert client.tokens == recorder.tokens == 285
    assert client.cost_usd == pytest.approx(recorder.cost_usd)
    assert client.replayed_usage == Usage(250, 35)
    assert client.wire_usage == Usage(0, 0)
    assert client.wire_cost_usd == 0.0
    assert recorder.wire_cost_usd == pytest.approx(recorder.cost_usd)


def test_replay_needs_no_api_key(server, tmp_path, monkeypatch):
    path = tmp_path / "llm.sqlite"
    record_run(server, path)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with LLMCache(path, "replay") as cache:
        done = ModelClient(HAIKU, cache=cache).complete("sys", "failing test B")
    assert (done.text, done.cached) == ("other answer", True)


def test_a_request_that_was_not_recorded_is_an_error_not_a_call(server, tmp_path):
    path = tmp_path / "llm.sqlite"
    record_run(server, path)
    with LLMCache(path, "replay") as cache:
        client = ModelClient(HAIKU, cache=cache)
        with pytest.raises(LLMCacheMiss) as info:
            client.complete("sys", "a prompt that changed")
        err = info.value
        assert isinstance(err, BackendError)
        assert err.key == request_key(
            **{**KEY_ARGS, "system": "sys", "user": "a prompt that changed"}
        )
        assert err.key[:16] in str(err)
        assert str(path) in str(err)
        assert "re-record with --evolve-llm-cache record" in str(err)
        assert "prompt or the model parameters changed" in str(err)

        client.complete("sys", "failing test B")
        with pytest.raises(LLMCacheMiss, match=r"recorded 1 time\(s\)"):
            client.complete("sys", "failing test B")
    assert len(server.requests) == 3
    assert client.failures == 2


def test_a_failed_call_in_the_recording_leaves_no_gap(server, tmp_path):
    path = tmp_path / "llm.sqlite"
    server.script([(401, {}, None), "answered on the second ask"])
    with LLMCache(path, "record") as cache:
        client = ModelClient(HAIKU, cache=cache, max_retries=0)
        with pytest.raises(BackendError):
            client.complete("s", "u")
        client.complete("s", "u")
    with LLMCache(path, "replay") as cache:
        done = ModelClient(HAIKU, cache=cache).complete("s", "u")
    assert done.text == "answered on the second ask"


def test_other_model_parameters_miss_the_recording(server, tmp_path):
    path = tmp_path / "llm.sqlite"
    record_run(server, path)
    with LLMCache(path, "replay") as cache, pytest.raises(LLMCacheMiss):
        ModelClient(HAIKU, cache=cache, max_tokens=100).complete("sys", "failing test A")


def test_replay_without_a_recording_says_to_record_first(tmp_path):
    missing = tmp_path / "nothing.sqlite"
    with pytest.raises(BackendError, match="record first") as info:
        LLMCache(missing, "replay")
    assert str(missing) in str(info.value)
    assert not missing.exists()


def test_replay_of_a_file_that_is_not_a_recording_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("definitely not sqlite " * 100)
    with LLMCache(junk, "replay") as cache, pytest.raises(BackendError, match="cannot be read"):
        cache.fetch("0" * 64, 0)


def test_re_recording_replaces_the_answers(server, tmp_path):
    path = tmp_path / "llm.sqlite"
    record_run(server, path)
    server.script(["fresh answer"])
    with LLMCache(path, "record") as cache:
        assert ModelClient(HAIKU, cache=cache).complete("sys", "failing test A").text == (
            "fresh answer"
        )
        assert len(cache) == 3
    with LLMCache(path, "replay") as cache:
        assert ModelClient(HAIKU, cache=cache).complete("sys", "failing test A").text == (
            "fresh answer"
        )


def test_off_mode_calls_every_time_and_writes_nothing(server, tmp_path):
    path = tmp_path / "llm.sqlite"
    server.script(["a", "b"])
    cache = LLMCache(path, "off")
    client = ModelClient(HAIKU, cache=cache)
    assert [client.complete("s", "u").text for _ in range(2)] == ["a", "b"]
    assert len(server.requests) == 2
    assert not path.exists()
    assert len(cache) == 0


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="record, replay, off"):
        LLMCache(tmp_path / "x.sqlite", "write")  # type: ignore[arg-type]


def test_record_is_thread_safe_and_keeps_every_occurrence(tmp_path, monkeypatch):
    path = tmp_path / "llm.sqlite"
    with start_openai_server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        counter = iter(range(1000))
        lock = threading.Lock()

        def numbered(_req):
            with lock:
                return f"answer {next(counter)}"

        srv.script([], then=numbered)
        spec = ModelSpec("openai", "llama3.1:8b")
        with LLMCache(path, "record") as cache:
            client = ModelClient(spec, cache=cache)
            recorded: list[str] = []

            def work() -> None:
                for _ in range(5):
                    text = client.complete("s", "same question").text
                    with lock:
                        recorded.append(text)

            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(cache) == 20

        with LLMCache(path, "replay") as cache:
            client = ModelClient(spec, cache=cache)
            replayed = [client.complete("s", "same question").text for _ in range(20)]
        assert sorted(replayed) == sorted(recorded)
        assert len(set(replayed)) == 20
        assert len(srv.requests) == 20


def test_fetch_and_store_outside_their_modes(tmp_path):
    path = tmp_path / "llm.sqlite"
    with LLMCache(path, "record") as cache:
        with pytest.raises(ValueError, match="replay mode"):
            cache.fetch("k", 0)
        cache.store("k", cache.next_occurrence("k"), "anthropic", CachedAnswer("t", 1, 2, "m"))
        assert cache.next_occurrence("k") == 1
    with LLMCache(path, "replay") as cache:
        cache.store("k", 5, "anthropic", CachedAnswer("ignored", 0, 0, "m"))  # no-op
        assert cache.fetch("k", 0) == CachedAnswer("t", 1, 2, "m")
        assert len(cache) == 1
