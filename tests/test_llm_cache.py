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
    with pytest.raises(ValueError, match="record, replay, read-through, off"):
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


# ---------------------------------------------------------------- read-through

class Clock:
    """An explicit clock: entries are stamped and aged by what the test says."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


DAY = 86400.0


def test_read_through_calls_once_then_answers_from_the_store(server, tmp_path):
    path = tmp_path / "state" / "llm-cache.sqlite3"
    clock = Clock()
    server.script([Answer("asked", input_tokens=40, output_tokens=4)])
    with LLMCache(path, "read-through", clock=clock) as cache:
        first = ModelClient(HAIKU, cache=cache)
        done = first.complete("sys", "failing test A")
        assert (done.text, done.cached) == ("asked", False)
        assert (first.calls, first.cache_hits) == (1, 0)
    assert len(server.requests) == 1

    clock.now += 6 * DAY  # the next scheduled session, within the default week
    with LLMCache(path, "read-through", clock=clock) as cache:
        second = ModelClient(HAIKU, cache=cache)
        again = second.complete("sys", "failing test A")
    assert (again.text, again.cached) == ("asked", True)
    assert len(server.requests) == 1  # the server saw nothing new
    assert (second.calls, second.cache_hits) == (0, 1)
    assert second.replayed_usage == Usage(40, 4)
    assert second.wire_cost_usd == 0.0


def test_read_through_asks_again_for_a_second_occurrence_and_keeps_both(server, tmp_path):
    path = tmp_path / "llm.sqlite3"
    server.script(["one", "two", "three"])
    with LLMCache(path, "read-through") as cache:
        client = ModelClient(HAIKU, cache=cache)
        assert [client.complete("s", "same").text for _ in range(2)] == ["one", "two"]
    with LLMCache(path, "read-through") as cache:
        client = ModelClient(HAIKU, cache=cache)
        assert [client.complete("s", "same").text for _ in range(3)] == ["one", "two", "three"]
        assert (client.calls, client.cache_hits) == (1, 2)
    assert len(server.requests) == 3


def test_an_expired_entry_is_a_miss_and_is_replaced(server, tmp_path):
    path = tmp_path / "llm.sqlite3"
    clock = Clock()
    server.script(["old answer", "new answer"])
    with LLMCache(path, "read-through", ttl=2 * DAY, clock=clock) as cache:
        ModelClient(HAIKU, cache=cache).complete("s", "u")
    clock.now += 2 * DAY  # exactly the ttl: no longer fresh
    with LLMCache(path, "read-through", ttl=2 * DAY, clock=clock) as cache:
        done = ModelClient(HAIKU, cache=cache).complete("s", "u")
        assert (done.text, done.cached) == ("new answer", False)
        assert (cache.expired, len(cache)) == (1, 1)
    assert len(server.requests) == 2
    clock.now += DAY  # the replacement carries its own time
    with LLMCache(path, "read-through", ttl=2 * DAY, clock=clock) as cache:
        done = ModelClient(HAIKU, cache=cache).complete("s", "u")
    assert (done.text, done.cached) == ("new answer", True)
    assert len(server.requests) == 2


def test_an_entry_written_long_ago_expires_under_the_real_clock(server, tmp_path):
    path = tmp_path / "llm.sqlite3"
    key = request_key(**{**KEY_ARGS, "system": "s", "user": "u"},
                      base_url=server.base_url)
    with LLMCache(path, "read-through", clock=lambda: 0.0) as cache:  # stamped at the epoch
        cache.store(key, 0, "anthropic", CachedAnswer("ancient", 1, 1, "claude-haiku-4-5"))
    server.script(["current"])
    with LLMCache(path, "read-through") as cache:
        assert cache.lookup(key, 0) is None
        assert cache.expired == 1
        assert ModelClient(HAIKU, cache=cache).complete("s", "u").text == "current"
    assert len(server.requests) == 1


def test_another_base_url_or_model_misses(server, tmp_path, monkeypatch):
    path = tmp_path / "llm.sqlite3"
    server.script(["from the first server", "from another model"])
    with LLMCache(path, "read-through") as cache:
        ModelClient(HAIKU, cache=cache).complete("s", "u")
        other_model = ModelClient(ModelSpec("anthropic", "claude-sonnet-4-5"), cache=cache)
        assert other_model.complete("s", "u").text == "from another model"
    assert len(server.requests) == 2
    with start_anthropic_server() as other:
        other.script(["from the second server"])
        monkeypatch.setenv("ANTHROPIC_BASE_URL", other.base_url)
        with LLMCache(path, "read-through") as cache:
            done = ModelClient(HAIKU, cache=cache).complete("s", "u")
        assert (done.text, done.cached) == ("from the second server", False)
        assert len(other.requests) == 1
    assert len(server.requests) == 2


def test_the_read_through_key_adds_the_base_url_and_record_keys_stay_as_they_were():
    plain = request_key(**KEY_ARGS)
    assert request_key(**KEY_ARGS, base_url=None) == plain  # existing recordings still replay
    here = request_key(**KEY_ARGS, base_url="http://127.0.0.1:8000/v1")
    assert here != plain
    assert here == request_key(**KEY_ARGS, base_url="http://127.0.0.1:8000/v1/")
    assert here != request_key(**KEY_ARGS, base_url="http://127.0.0.1:8001/v1")


def test_a_failed_call_in_read_through_stores_nothing(server, tmp_path):
    path = tmp_path / "llm.sqlite3"
    server.script([(401, {}, None)])
    with LLMCache(path, "read-through") as cache:
        with pytest.raises(BackendError):
            ModelClient(HAIKU, cache=cache, max_retries=0).complete("s", "u")
        assert len(cache) == 0


def test_read_through_settings_are_checked(tmp_path):
    from agentdescent_core.proposers.llm_cache import DEFAULT_TTL_SECONDS, parse_duration
    from pytest_agentdescent.settings import DEFAULT_LLM_CACHE_TTL, EvolveSettings

    assert DEFAULT_LLM_CACHE_TTL == DEFAULT_TTL_SECONDS == parse_duration("7d")
    assert EvolveSettings().llm_cache_ttl == DEFAULT_TTL_SECONDS
    assert [parse_duration(t) for t in ("90", "90s", "30m", "12h", "1.5d", "2w")] == [
        90.0, 90.0, 1800.0, 43200.0, 129600.0, 1209600.0]
    for bad in ("", "7 days", "-1d", "0", "d"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    with pytest.raises(ValueError, match="ttl"):
        LLMCache(tmp_path / "x.sqlite3", "read-through", ttl=0)
    with LLMCache(tmp_path / "r.sqlite3", "record") as cache, pytest.raises(
            ValueError, match="read-through mode"):
        cache.lookup("k", 0)


def test_read_through_on_a_file_that_is_not_a_store_says_to_delete_it(tmp_path):
    junk = tmp_path / "llm.sqlite3"
    junk.write_text("definitely not sqlite " * 100)
    with pytest.raises(BackendError, match="delete it") as info:
        LLMCache(junk, "read-through")
    assert str(junk) in str(info.value)
