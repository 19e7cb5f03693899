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

from importlib import import_module
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentdescent_core.proposers' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from agentdescent_core.proposers.agent import Completion as Completion
    from agentdescent_core.proposers.agent import LLMAgent as LLMAgent
    from agentdescent_core.proposers.agent import from_callable as from_callable
    from agentdescent_core.proposers.completions import ModelCompletion as ModelCompletion
    from agentdescent_core.proposers.completions import claude as claude
    from agentdescent_core.proposers.completions import openai_compatible as openai_compatible
    from agentdescent_core.proposers.guardrails import Guardrails as Guardrails
    from agentdescent_core.proposers.guardrails import parse_guardrails as parse_guardrails
    from agentdescent_core.proposers.llm_cache import CachedAnswer as CachedAnswer
    from agentdescent_core.proposers.llm_cache import LLMCache as LLMCache
    from agentdescent_core.proposers.llm_cache import LLMCacheMiss as LLMCacheMiss
    from agentdescent_core.proposers.models import ModelAnswer as ModelAnswer
    from agentdescent_core.proposers.models import ModelBackendError as ModelBackendError
    from agentdescent_core.proposers.models import ModelClient as ModelClient
    from agentdescent_core.proposers.models import ModelSpec as ModelSpec
    from agentdescent_core.proposers.models import Usage as Usage
    from agentdescent_core.proposers.models import missing_key as missing_key
    from agentdescent_core.proposers.models import parse_model_spec as parse_model_spec
    from agentdescent_core.proposers.pricing import Price as Price
    from agentdescent_core.proposers.pricing import PriceTable as PriceTable
    from agentdescent_core.proposers.pricing import parse_price_lines as parse_price_lines
    from agentdescent_core.proposers.protocol import parse_edit_answer as parse_edit_answer
    from agentdescent_core.proposers.reflector import FailureInfo as FailureInfo
    from agentdescent_core.proposers.reflector import PromptInputs as PromptInputs
    from agentdescent_core.proposers.reflector import build_prompt as build_prompt
    from agentdescent_core.proposers.reflector import load_templates as load_templates
