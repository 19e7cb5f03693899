"""Proposers: the LLM agent, the model clients and the reflector that turn failing tasks into edits.

Submodules, one role each: ``agent`` (an actor built on any ``prompt -> text``
completion: :class:`LLMAgent`, ``reflector``), ``completions`` (``claude()`` and
``openai_compatible()``: a model as such a completion), ``models`` (SDK-backed model
clients and their accounting), ``pricing`` (USD per token), ``llm_cache``
(record / replay of model calls), ``protocol`` (the edit answer format),
``guardrails`` (secrets and risky scripts in proposals), ``reflector`` (the
edit prompt of the model proposer).  The names below load on first use, so
importing one submodule does not pay for importing both provider SDKs.

The ``reflector(completion)`` function is imported from the top of
``agentdescent_core``: here ``reflector`` is the prompt submodule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Completion": "agentdescent_core.proposers.agent",
    "LLMAgent": "agentdescent_core.proposers.agent",
    "from_callable": "agentdescent_core.proposers.agent",
    "ModelCompletion": "agentdescent_core.proposers.completions",
    "claude": "agentdescent_core.proposers.completions",
    "openai_compatible": "agentdescent_core.proposers.completions",
    "ModelSpec": "agentdescent_core.proposers.models",
    "ModelClient": "agentdescent_core.proposers.models",
    "ModelBackendError": "agentdescent_core.proposers.models",
    "ModelAnswer": "agentdescent_core.proposers.models",
    "Usage": "agentdescent_core.proposers.models",
    "parse_model_spec": "agentdescent_core.proposers.models",
    "missing_key": "agentdescent_core.proposers.models",
    "Price": "agentdescent_core.proposers.pricing",
    "PriceTable": "agentdescent_core.proposers.pricing",
    "parse_price_lines": "agentdescent_core.proposers.pricing",
    "LLMCache": "agentdescent_core.proposers.llm_cache",
    "LLMCacheMiss": "agentdescent_core.proposers.llm_cache",
    "CachedAnswer": "agentdescent_core.proposers.llm_cache",
    "parse_edit_answer": "agentdescent_core.proposers.protocol",
    "Guardrails": "agentdescent_core.proposers.guardrails",
    "parse_guardrails": "agentdescent_core.proposers.guardrails",
    "FailureInfo": "agentdescent_core.proposers.reflector",
    "PromptInputs": "agentdescent_core.proposers.reflector",
    "build_prompt": "agentdescent_core.proposers.reflector",
    "load_templates": "agentdescent_core.proposers.reflector",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from agentdescent_core.proposers.agent import (
        Completion as Completion,
        LLMAgent as LLMAgent,
        from_callable as from_callable,
    )
    from agentdescent_core.proposers.completions import (
        ModelCompletion as ModelCompletion,
        claude as claude,
        openai_compatible as openai_compatible,
    )
    from agentdescent_core.proposers.guardrails import (
        Guardrails as Guardrails,
        parse_guardrails as parse_guardrails,
    )
    from agentdescent_core.proposers.llm_cache import (
        CachedAnswer as CachedAnswer,
        LLMCache as LLMCache,
        LLMCacheMiss as LLMCacheMiss,
    )
    from agentdescent_core.proposers.models import (
        ModelAnswer as ModelAnswer,
        ModelBackendError as ModelBackendError,
        ModelClient as ModelClient,
        ModelSpec as ModelSpec,
        Usage as Usage,
        missing_key as missing_key,
        parse_model_spec as parse_model_spec,
    )
    from agentdescent_core.proposers.pricing import (
        Price as Price,
        PriceTable as PriceTable,
        parse_price_lines as parse_price_lines,
    )
    from agentdescent_core.proposers.protocol import parse_edit_answer as parse_edit_answer
    from agentdescent_core.proposers.reflector import (
        FailureInfo as FailureInfo,
        PromptInputs as PromptInputs,
        build_prompt as build_prompt,
        load_templates as load_templates,
    )
