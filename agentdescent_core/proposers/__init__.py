"""Proposers: the model clients and the LLM reflector that turn failing tasks into edits.

Submodules, one role each: ``models`` (SDK-backed model clients and their
accounting), ``pricing`` (USD per token), ``llm_cache`` (record / replay of model
calls), ``protocol`` (the edit answer format), ``guardrails`` (secrets and risky
scripts in proposals), ``reflector`` (the prompt).  The names below load on first
use, so importing one submodule does not pay for importing both provider SDKs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "ModelSpec": "agentdescent_core.proposers.models",
    "ModelClient": "agentdescent_core.proposers.models",
    "ModelBackendError": "agentdescent_core.proposers.models",
    "Completion": "agentdescent_core.proposers.models",
    "Usage": "agentdescent_core.proposers.models",
    "parse_model_spec": "agentdescent_core.proposers.models",
    "missing_key": "agentdescent_core.proposers.models",
    "Price": "agentdescent_core.proposers.pricing",
    "PriceTable": "agentdescent_core.proposers.pricing",
    "parse_price_lines": "agentdescent_core.proposers.pricing",
    "LLMCache": "agentdescent_core.proposers.llm_cache",
    "LLMCacheMiss": "agentdescent_core.proposers.llm_cache",
    "CachedAnswer": "agentdescent_core.proposers.llm_cache",
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
    from agentdescent_core.proposers.llm_cache import CachedAnswer as CachedAnswer
    from agentdescent_core.proposers.llm_cache import LLMCache as LLMCache
    from agentdescent_core.proposers.llm_cache import LLMCacheMiss as LLMCacheMiss
    from agentdescent_core.proposers.models import Completion as Completion
    from agentdescent_core.proposers.models import ModelBackendError as ModelBackendError
    from agentdescent_core.proposers.models import ModelClient as ModelClient
    from agentdescent_core.proposers.models import ModelSpec as ModelSpec
    from agentdescent_core.proposers.models import Usage as Usage
    from agentdescent_core.proposers.models import missing_key as missing_key
    from agentdescent_core.proposers.models import parse_model_spec as parse_model_spec
    from agentdescent_core.proposers.pricing import Price as Price
    from agentdescent_core.proposers.pricing import PriceTable as PriceTable
    from agentdescent_core.proposers.pricing import parse_price_lines as parse_price_lines
