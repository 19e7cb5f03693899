"""``claude()`` and ``openai_compatible()``: a model as a completion in one call.

A completion is the ``prompt -> text`` callable that ``LLMAgent`` and
``reflector`` are built on.  These two helpers build one over the official
SDKs (through :class:`~agentdescent_core.proposers.models.ModelClient`, so the
SDKs' retries, the error messages naming the endpoint and the token / USD
accounting all apply):

    agent = LLMAgent(claude(model="claude-haiku-4-5"))
    propose = reflector(openai_compatible(model="glm-4.6", base_url="http://host/v1"))

The SDKs' environment variables apply as everywhere else (``ANTHROPIC_API_KEY``,
``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); ``api_key=`` and
``base_url=`` override them.  A key is never part of the completion's repr.
"""

from __future__ import annotations

from agentdescent_core.errors import ModelBackendError
from agentdescent_core.proposers.models import ModelClient, ModelSpec, missing_key


class ModelCompletion:
    """A ModelClient as a completion: ``completion(prompt)`` returns the model's text.

    ``client`` is the ModelClient behind it, for its accounting (``calls``,
    ``usage``, ``cost_usd``).  Thread-safe, so one completion can serve every
    worker.  A failing endpoint raises ModelBackendError (a BackendError, which
    the engine retries and tolerates like any backend failure).
    """

    def __init__(self, client: ModelClient, *, system: str = "") -> None:
        self.client = client
        self.system = system

    def __call__(self, prompt: str) -> str:
        return self.client.complete(self.system, prompt).text

    def __repr__(self) -> str:
        spec = self.client.spec
        return f"ModelCompletion({spec}, endpoint={self.client.endpoint!r})"

    def close(self) -> None:
        """Close the SDK client's connections (the completion cannot be used after)."""
        self.client.close()


def _check(helper: str, model: object, system: object, max_tokens: object) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"{helper}(model=...) needs the model's name as a non-empty str, "
                         f"got {model!r}")
    if not isinstance(system, str):
        raise ValueError(f"{helper}(system=...) must be a str, got {type(system).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"{helper}(max_tokens=...) must be an integer >= 1, got {max_tokens!r}")


def claude(
    model: str = "claude-haiku-4-5",
    *,
    system: str = "",
    api_key: str | None = None,
    base_url: str | None = None,
    max_tokens: int = 4096,
    timeout: float = 120.0,
    max_retries: int = 4,
) -> ModelCompletion:
    """A completion on Anthropic's Messages API (the ``anthropic`` SDK).

    When: to run an agent, or reflect, on a Claude model without writing the
    SDK call.  ``system`` is sent as the system prompt of every call.  Raises
    ModelBackendError at once when no key is set (``ANTHROPIC_API_KEY`` or
    ``ANTHROPIC_AUTH_TOKEN``, or ``api_key=``), rather than at the first rollout.
    """
    _check("claude", model, system, max_tokens)
    spec = ModelSpec("anthropic", model.strip())
    if api_key is None and missing_key(spec) is not None:
        raise ModelBackendError(
            "claude(): ANTHROPIC_API_KEY is not set; export it or pass api_key=",
            endpoint="anthropic",
        )
    client = ModelClient(spec, api_key=api_key, base_url=base_url, max_tokens=max_tokens,
                         timeout=timeout, max_retries=max_retries)
    return ModelCompletion(client, system=system)


def openai_compatible(
    model: str,
    *,
    system: str = "",
    api_key: str | None = None,
    base_url: str | None = None,
    max_tokens: int = 4096,
    temperature: float = 0.2,
    timeout: float = 120.0,
    max_retries: int = 4,
) -> ModelCompletion:
    """A completion on any OpenAI-compatible Chat Completions server (the ``openai`` SDK).

    When: OpenAI itself, or GLM, DeepSeek, Ollama, vLLM, LM Studio and other
    servers speaking that API (``base_url=`` or ``OPENAI_BASE_URL``).  A local
    server needs no key (a placeholder is sent); without a base URL a key is
    required, and its absence raises ModelBackendError at once.
    """
    _check("openai_compatible", model, system, max_tokens)
    spec = ModelSpec("openai", model.strip())
    if api_key is None and base_url is None and missing_key(spec) is not None:
        raise ModelBackendError(
            "openai_compatible(): OPENAI_API_KEY is not set and no base URL is given; "
            "export OPENAI_API_KEY, or pass base_url= (or set OPENAI_BASE_URL) for a "
            "server that needs no key",
            endpoint="openai",
        )
    client = ModelClient(spec, api_key=api_key, base_url=base_url, max_tokens=max_tokens,
                         temperature=temperature, timeout=timeout, max_retries=max_retries)
    return ModelCompletion(client, system=system)
