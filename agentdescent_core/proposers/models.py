"""Model clients: one ``complete(system, user)`` over the official provider SDKs.

``anthropic:MODEL`` goes through the Messages API of the ``anthropic`` package and
``openai:MODEL`` through Chat Completions of the ``openai`` package, so any
OpenAI-compatible server (Ollama, vLLM, LM Studio) works via ``OPENAI_BASE_URL``.
The SDKs read their own environment variables (``ANTHROPIC_API_KEY``,
``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).

Transient failures (429, 408/409, 5xx, timeouts, dropped connections) are retried
by the SDKs themselves, with exponential backoff that honours ``retry-after``; we
only configure how many times.  Whatever is still failing after that becomes a
:class:`ModelBackendError` naming the endpoint and the last status, so a dead
endpoint ends a run with a message a user can act on.  A body that is not a valid
answer (truncated, not JSON, the wrong shape) is a backend error too.

A :class:`ModelClient` also keeps the run's accounting (calls, tokens, USD) that
the budget checks read, and goes through the record/replay cache when given one.
Its ``calls`` are the requests the endpoint received, counted as they leave
(:mod:`.wire`): SDK retries and answers that were not valid count, replayed
answers do not (they are ``cache_hits``).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentdescent_core.errors import BackendError, ModelBackendError as ModelBackendError
from agentdescent_core.extras import require_extra
from agentdescent_core.proposers.llm_cache import CachedAnswer, LLMCache, request_key
from agentdescent_core.proposers.pricing import PriceTable
from agentdescent_core.proposers.wire import WireMeter

if TYPE_CHECKING:
    # The SDKs are extras: imported where a client is built (see require_extra).
    import anthropic
    import openai

Provider = Literal["anthropic", "openai", "callable"]
_PROVIDERS = ("anthropic", "openai")
_KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
#: Sent as the API key to an OpenAI-compatible server when none is set (Ollama ignores it).
PLACEHOLDER_KEY = "not-needed-for-local-server"
# Status codes the SDKs retry; any other status fails on the first answer.
_RETRIED_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True)
class ModelSpec:
    """A parsed ``provider:model`` string."""

    provider: Provider
    model: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_model_spec(spec: str) -> ModelSpec:
    """``"anthropic:claude-haiku-4-5"`` / ``"openai:gpt-4o-mini"`` -> ModelSpec.

    Only the first colon separates, so Ollama tags (``openai:llama3.1:8b``) work.
    """
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if not sep or provider not in _PROVIDERS or not model:
        raise ValueError(
            f"model spec {spec!r} is not PROVIDER:MODEL with a provider of 'anthropic' or "
            "'openai' (e.g. 'anthropic:claude-haiku-4-5', 'openai:gpt-4o-mini'; use "
            "'openai:' with OPENAI_BASE_URL for Ollama, vLLM and other compatible servers)"
        )
    return ModelSpec("anthropic" if provider == "anthropic" else "openai", model)


def missing_key(spec: ModelSpec, env: Mapping[str, str] = os.environ) -> str | None:
    """The name of the API-key variable ``spec`` needs and ``env`` lacks, else None.

    Anthropic also accepts ``ANTHROPIC_AUTH_TOKEN`` (the SDK's bearer alternative).
    An OpenAI-compatible local server (``OPENAI_BASE_URL`` set) needs no key: a
    placeholder is sent, which Ollama and friends ignore.
    """
    if spec.provider == "anthropic":
        if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
            return None
        return "ANTHROPIC_API_KEY"
    if spec.provider == "openai":
        if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
            return None
        return "OPENAI_API_KEY"
    return None


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reported them."""

    input_tokens: int
    output_tokens: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    @property
    def total(self) -> int:
        """Input plus output tokens: the unit of ``--evolve-max-tokens``."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ModelAnswer:
    """One model answer: its text, usage, the model that answered, its price.

    What :meth:`ModelClient.complete` returns.  Not to be confused with a
    *completion* (:data:`agentdescent_core.proposers.Completion`), which is the
    ``prompt -> text`` callable the engine's LLM agent is built on.
    """

    text: str
    usage: Usage
    model: str
    cost_usd: float | None
    cached: bool = False  # replayed from the LLM cache (nothing was paid for it)


class _Backend(Protocol):
    endpoint: str

    def call(self, system: str, user: str) -> tuple[str, Usage, str]: ...

    def close(self) -> None: ...


def _describe_status(exc: Any, provider: str, max_retries: int) -> tuple[str, int]:
    status = int(exc.status_code)
    detail = exc.message if isinstance(getattr(exc, "message", None), str) else str(exc)
    response = getattr(exc, "response", None)
    told = response.headers.get("x-should-retry") if response is not None else None
    retried = told == "true" or (told != "false" and (status in _RETRIED_STATUSES or status >= 500))
    tail = f"still failing after {max_retries} retries" if retried else "not retried"
    hint = ""
    if status in (401, 403):
        hint = f"; check {_KEY_VARS.get(provider, 'the API key')}"
    elif status == 404:
        hint = "; check the model name and the base URL"
    elif status == 429:
        hint = "; the rate limit or quota is exhausted, wait or raise it"
    return f"HTTP {status} ({detail}), {tail}{hint}", status


class _SDKBackend:
    """What the two SDK backends share: their settings, client and error translation.

    A subclass only says how to build its SDK client (``_client``) and how to call it.
    """

    provider: str

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int,
        temperature: float,
        timeout: float,
        max_retries: int,
        api_key: str | None,
        base_url: str | None,
        meter: WireMeter,
    ) -> None:
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature
        self.timeout, self.max_retries = timeout, max_retries
        self.meter = meter
        self.client = self._client(api_key, base_url)
        self.endpoint = str(self.client.base_url).rstrip("/")

    def _client(self, api_key: str | None, base_url: str | None) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        self.client.close()

    def _fail(self, exc: Exception) -> ModelBackendError:
        where = f"the {self.provider} endpoint {self.endpoint}"
        status: int | None = None
        # only the SDK of this backend's provider is installed for sure
        sdk: Any
        if self.provider == "anthropic":
            import anthropic as sdk
        else:
            import openai as sdk
        if isinstance(exc, sdk.APIStatusError):
            what, status = _describe_status(exc, self.provider, self.max_retries)
            message = f"{where} answered {what}"
        elif isinstance(exc, sdk.APITimeoutError):
            message = (
                f"{where} did not answer within {self.timeout:g}s "
                f"({self.max_retries} retries); raise the timeout or check the server"
            )
        elif isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = f"{type(cause).__name__}: {cause}" if cause else str(exc)
            message = (
                f"{where} could not be reached or dropped the connection ({why}), "
                f"still failing after {self.max_retries} retries; check the base URL and "
                "that the server is up"
            )
        else:
            message = (
                f"{where} sent a body that is not a valid {self.provider} answer "
                f"({type(exc).__name__}: {exc}); check that the base URL points at a "
                f"{self.provider}-compatible API"
            )
        return ModelBackendError(message, endpoint=self.endpoint, status=status)

    def _malformed(self, what: str) -> ModelBackendError:
        return ModelBackendError(
            f"the {self.provider} endpoint {self.endpoint} sent an answer without {what}; "
            f"check that the base URL points at a {self.provider}-compatible API",
            endpoint=self.endpoint,
        )


class _AnthropicBackend(_SDKBackend):
    provider = "anthropic"
    client: anthropic.Anthropic

    def _client(self, api_key: str | None, base_url: str | None) -> anthropic.Anthropic:
        require_extra("anthropic")
        import anthropic

        return anthropic.Anthropic(
            api_key=api_key, base_url=base_url, timeout=self.timeout, max_retries=self.max_retries,
            http_client=self.meter.http_client(anthropic),
        )

    def call(self, system: str, user: str) -> tuple[str, Usage, str]:
        import anthropic

        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = system
        # No temperature: messages.create of the anthropic 2.x SDK has no sampling
        # parameters any more, so the model's own default applies.
        try:
            message = self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=[{"role": "user", "content": user}],
                **kwargs,
            )
        except (anthropic.AnthropicError, ValueError) as exc:
            raise self._fail(exc) from exc
        content = getattr(message, "content", None)
        if not isinstance(message, anthropic.types.Message) or not isinstance(content, list):
            raise self._malformed("a content list")
        text = "".join(block.text for block in content if getattr(block, "type", None) == "text")
        usage = getattr(message, "usage", None)
        tokens = Usage(
            int(getattr(usage, "input_tokens", 0) or 0),
            int(getattr(usage, "output_tokens", 0) or 0),
        )
        return text, tokens, str(message.model or self.model)


class _OpenAIBackend(_SDKBackend):
    provider = "openai"
    client: openai.OpenAI

    def __init__(self, model: str, **settings: Any) -> None:
        super().__init__(model, **settings)
        #: send the reasoning models' request shape (see _create)
        self._reasoning = is_reasoning_model(model)

    def _client(self, api_key: str | None, base_url: str | None) -> openai.OpenAI:
        local = base_url or os.environ.get("OPENAI_BASE_URL")
        if api_key is None and not os.environ.get("OPENAI_API_KEY") and local:
            api_key = PLACEHOLDER_KEY
        require_extra("openai")
        import openai

        return openai.OpenAI(
            api_key=api_key, base_url=base_url, timeout=self.timeout, max_retries=self.max_retries,
            http_client=self.meter.http_client(openai),
        )

    def _create(self, messages: list[Any]) -> Any:
        """One Chat Completions request in the shape the model takes.

        ``max_tokens`` and a temperature for every other model: every compatible
        server (Ollama, vLLM, LM Studio) understands those.  A model that refuses
        one of them by name (a new reasoning model) gets the other shape once,
        and keeps it for the rest of the run.
        """
        import openai

        try:
            return self.client.chat.completions.create(
                model=self.model, messages=messages, **self._shape())
        except openai.BadRequestError as exc:
            if self._reasoning or not _refuses_sampling_parameters(exc):
                raise
            self._reasoning = True
            return self.client.chat.completions.create(
                model=self.model, messages=messages, **self._shape())

    def _shape(self) -> dict[str, Any]:
        if self._reasoning:
            return {"max_completion_tokens": self.max_tokens}
        return {"max_tokens": self.max_tokens, "temperature": self.temperature}

    def call(self, system: str, user: str) -> tuple[str, Usage, str]:
        import openai

        messages: list[Any] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": user})
        try:
            response = self._create(messages)
        except (openai.OpenAIError, ValueError) as exc:
            raise self._fail(exc) from exc
        choices = getattr(response, "choices", None)
        if not isinstance(response, openai.types.chat.ChatCompletion) or not choices:
            raise self._malformed("choices")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise self._malformed("a message")
        text = message.content if isinstance(message.content, str) else ""
        if not text and isinstance(getattr(message, "refusal", None), str):
            text = message.refusal or ""
        usage = getattr(response, "usage", None)
        tokens = Usage(
            int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0),
        )
        return text, tokens, str(response.model or self.model)


def is_reasoning_model(model: str) -> bool:
    """OpenAI's reasoning models (o-series, gpt-5): ``max_completion_tokens``, no temperature.

    They refuse ``max_tokens`` and any ``temperature`` but the default with a 400;
    a provider prefix (``openai/gpt-5``, as routers write it) is ignored.
    """
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith(_REASONING_PREFIXES)


_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def _refuses_sampling_parameters(exc: openai.BadRequestError) -> bool:
    """Whether a 400 says the model takes no ``max_tokens`` / ``temperature``."""
    if getattr(exc, "param", None) in ("max_tokens", "temperature"):
        return True
    text = str(exc)
    return "max_completion_tokens" in text or "'temperature'" in text


class _CallableBackend:
    """Any ``prompt -> text`` function as a model (tests, local scripts, other SDKs)."""

    def __init__(self, fn: Callable[..., str], name: str, meter: WireMeter) -> None:
        self.fn, self.endpoint, self.meter = fn, f"callable:{name}", meter
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        required = [p for p in params if p.kind in positional and p.default is p.empty]
        variadic = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
        self.two_args = len(required) >= 2 or (variadic and not required)

    def call(self, system: str, user: str) -> tuple[str, Usage, str]:
        self.meter.count()  # the function is this model's wire: each call reaches it
        try:
            text = self.fn(system, user) if self.two_args else self.fn(f"{system}\n\n{user}")
        except Exception as exc:
            raise ModelBackendError(
                f"the model function {self.endpoint} raised {type(exc).__name__}: {exc}",
                endpoint=self.endpoint,
            ) from exc
        if not isinstance(text, str):
            raise ModelBackendError(
                f"the model function {self.endpoint} returned {type(text).__name__}, "
                "not the answer text (str)",
                endpoint=self.endpoint,
            )
        return text, Usage(0, 0), self.endpoint

    def close(self) -> None:
        return None


class ModelClient:
    """One client per run, shared by the workers (thread-safe).

    Accounting, in two units.  What went over the wire: ``calls`` the requests
    the endpoint received (the SDKs' retries and answers that were not valid
    included), ``answers`` the usable answers among them, ``wire_usage`` and
    ``wire_cost_usd`` the tokens the provider reported for them and their price
    — what the report shows as spent.  What the budgets count: ``usage``,
    ``tokens`` and ``cost_usd`` add the answers replayed from the LLM cache
    (``cache_hits``, ``replayed_usage``) as they were recorded, so a replay
    stops where its recording stopped.  ``failures`` counts ``complete`` calls
    that ended in an error; a cost is None when the model has no price.
    """

    def __init__(
        self,
        spec: ModelSpec,
        *,
        max_tokens: int = 4096,
        temperature: float = 0.2,
        timeout: float = 120.0,
        max_retries: int = 4,
        prices: PriceTable | None = None,
        cache: LLMCache | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be >= 1")
        if timeout <= 0:
            raise ValueError(f"timeout={timeout} must be > 0 seconds")
        if max_retries < 0:
            raise ValueError(f"max_retries={max_retries} must be >= 0")
        if spec.provider == "callable":
            raise ValueError("use ModelClient.from_callable(fn) for a function-backed model")
        cache_on = cache if cache is not None and cache.enabled else None
        if api_key is None and cache_on is not None and cache_on.mode == "replay":
            api_key = "replay-only"  # never sent: a replay answers from the recording
        if api_key is None:
            env_var = missing_key(spec)
            if env_var is not None and not (spec.provider == "openai" and base_url):
                raise ModelBackendError(
                    f"{env_var} is not set: the {spec.provider} SDK needs it to call "
                    f"{spec}; export it (or pick another --evolve-model)",
                    endpoint=spec.provider,
                )
        backend_cls = _AnthropicBackend if spec.provider == "anthropic" else _OpenAIBackend
        meter = WireMeter()
        backend = backend_cls(
            spec.model,
            max_tokens=max_tokens,
            temperature=temperature,
            timeout=timeout,
            max_retries=max_retries,
            api_key=api_key,
            base_url=base_url,
            meter=meter,
        )
        self._setup(spec, backend, meter, max_tokens, temperature, prices, cache_on)

    def _setup(
        self,
        spec: ModelSpec,
        backend: _Backend,
        meter: WireMeter,
        max_tokens: int,
        temperature: float,
        prices: PriceTable | None,
        cache: LLMCache | None,
    ) -> None:
        self.spec = spec
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.prices = prices if prices is not None else PriceTable.default()
        self.cache = cache if cache is not None and cache.enabled else None
        self._backend = backend
        self._meter = meter
        self._lock = threading.Lock()
        self.answers = 0
        self.cache_hits = 0
        self.failures = 0
        self.wire_usage = Usage(0, 0)
        self.replayed_usage = Usage(0, 0)
        self.last_error: str | None = None

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., str],
        *,
        name: str | None = None,
        cache: LLMCache | None = None,
    ) -> ModelClient:
        """A client whose "model" is ``fn(prompt) -> text`` or ``fn(system, user) -> text``.

        For tests, scripted demos and SDKs this package does not wrap; usage is
        not known (zero tokens) and the cost is None.
        """
        label = name or getattr(fn, "__name__", None) or type(fn).__name__
        self = cls.__new__(cls)
        meter = WireMeter()
        self._setup(ModelSpec("callable", label), _CallableBackend(fn, label, meter), meter, 0,
                    0.0, PriceTable({}), cache)
        return self

    def as_completion(self, system: str = "") -> Callable[[str], str]:
        """This client as a :data:`~agentdescent_core.proposers.Completion` (prompt -> text)."""

        def completion(prompt: str) -> str:
            return self.complete(system, prompt).text

        return completion

    @property
    def endpoint(self) -> str:
        """Where the calls go (the SDK's resolved base URL)."""
        return self._backend.endpoint

    @property
    def calls(self) -> int:
        """Requests the endpoint received: what the provider saw (and may bill)."""
        return self._meter.sent

    @property
    def usage(self) -> Usage:
        """Tokens of every answer this run used, replayed ones as recorded (the budgets' unit)."""
        with self._lock:
            return self.wire_usage + self.replayed_usage

    @property
    def tokens(self) -> int:
        """Input plus output tokens of :attr:`usage`: what ``--evolve-max-tokens`` counts."""
        return self.usage.total

    @property
    def cost_usd(self) -> float | None:
        """The price of :attr:`usage` (replays included, as the USD budget counts it)."""
        return self.prices.cost(self.spec.model, self.usage)

    @property
    def wire_cost_usd(self) -> float | None:
        """The price of :attr:`wire_usage`: what this run paid the provider."""
        with self._lock:
            usage = self.wire_usage
        return self.prices.cost(self.spec.model, usage)

    def complete(self, system: str, user: str) -> ModelAnswer:
        """Ask the model; raises ModelBackendError (a BackendError) when it cannot answer.

        With a replay cache the answer comes from the recording (LLMCacheMiss when
        it is not there); with a record cache it is stored after the call; with a
        read-through cache a fresh stored answer is used, else the call's answer is
        stored (its key adds the endpoint, so another server is another entry).
        """
        key: str | None = None
        occurrence: int | None = None
        if self.cache is not None:
            through = self.cache.mode == "read-through"
            key = request_key(
                provider=self.spec.provider,
                model=self.spec.model,
                system=system,
                user=user,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                base_url=self.endpoint if through else None,
            )
            if self.cache.mode == "replay":
                try:
                    hit = self.cache.fetch(key, self.cache.next_occurrence(key))
                except BackendError as exc:
                    self._record_failure(exc)
                    raise
                usage = Usage(hit.input_tokens, hit.output_tokens)
                return self._account(hit.text, usage, hit.model, cached=True)
            if through:
                occurrence = self.cache.next_occurrence(key)
                found = self.cache.lookup(key, occurrence)
                if found is not None:
                    usage = Usage(found.input_tokens, found.output_tokens)
                    return self._account(found.text, usage, found.model, cached=True)
        try:
            text, usage, model = self._backend.call(system, user)
        except BackendError as exc:
            self._record_failure(exc)
            raise
        if self.cache is not None and key is not None:
            # A recording claims its occurrence only for answers, so a failed call
            # does not leave a gap the replay would stumble into.
            self.cache.store(
                key,
                self.cache.next_occurrence(key) if occurrence is None else occurrence,
                self.spec.provider,
                CachedAnswer(text, usage.input_tokens, usage.output_tokens, model),
            )
        return self._account(text, usage, model, cached=False)

    def _account(self, text: str, usage: Usage, model: str, *, cached: bool) -> ModelAnswer:
        cost = self.prices.cost(self.spec.model, usage)
        with self._lock:
            if cached:
                self.cache_hits += 1
                self.replayed_usage = self.replayed_usage + usage
            else:
                self.answers += 1
                self.wire_usage = self.wire_usage + usage
        return ModelAnswer(text=text, usage=usage, model=model, cost_usd=cost, cached=cached)

    def _record_failure(self, exc: BaseException) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = str(exc)

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ModelClient({self.spec}, endpoint={self.endpoint!r}, calls={self.calls})"
