"""``--evolve-model``: a model that answers ``pytest_evolve_propose`` when no hook does.

The model proposer is an ordinary implementation of the hook, registered
``trylast``: a conftest hook is asked first and the model answers only when it
returns None — one mechanism, no special case.  One call goes:

    reflector prompt -> ModelClient.complete -> parse_edit_answer
        -> FileTree.validate_ops -> Guardrails.check -> Edits(ops, rationale)

Anything wrong with the answer raises the RefusalError the step gave (no JSON,
a search that does not match, a frozen path, a secret ...); the engine counts
it by category like any other merge decision, and the proposer remembers it
per task so the next prompt for those tasks shows what was tried and why it
failed.  Proposals the aggregator turns down later (below threshold, a guard,
a disqualification) are matched back to the round's verdicts by the
candidate's content key or its worker (:mod:`pytest_agentdescent.pending`, the
matcher the hook proposer uses too), and are remembered the same way.  What
earlier runs and scheduled sessions tried arrives in ``context.history`` (the
memory of attempts) and joins that list.

When to stop instead of going on: the model endpoint failing before it ever
answered (a wrong base URL, a dead server) ends the run at once with the error
naming the endpoint — nothing suggests it will come back; after a first
answer a failure costs that proposal only.  The guardrails' violation limit
ends the run with their reason (GuardrailsTripped, from the run's one
Guardrails, which the workers share).  ``--evolve-max-usd`` and
``--evolve-max-tokens`` raise the budget's stop before a call that would take
the cost or the tokens past them (``max_usd`` / ``max_tokens``).
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from agentdescent_core.errors import BackendError, RefusalError, RunStopped
from agentdescent_core.evidence import MergeOutcome
from agentdescent_core.loop.budget import BudgetExhausted
from agentdescent_core.proposers.reflector import (
    DEFAULT_BUDGET,
    FailureInfo,
    PromptInputs,
    PromptTemplates,
    RejectedProposal,
    build_prompt,
)
from agentdescent_core.stops import StopReason
from pytest_agentdescent.hooks import ProposeContext
from pytest_agentdescent.pending import Pending, PendingProposals
from pytest_agentdescent.proposer import Edits

if TYPE_CHECKING:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.loop.result import RoundInfo
    from agentdescent_core.proposers.guardrails import Guardrails
    from agentdescent_core.proposers.llm_cache import LLMCache
    from agentdescent_core.proposers.models import ModelAnswer, ModelClient, Usage

PLUGIN_NAME = "agentdescent-model"

#: A first call is estimated from the prompt (about 4 characters a token) and this many
#: output tokens; later calls as the largest call so far (in USD, and in tokens).
_FIRST_OUTPUT_TOKENS = 1024
_SUMMARY_LINES = 12
_KEEP_PER_TASK = 6
_LABEL = re.compile(r"^(?:diff|fused) [0-9a-f]{8} by [^:]+: ")


class ProposerStopped(RunStopped):
    """The model proposer ends the run (a dead model endpoint, a cache miss).

    ``kind`` is ``BackendError`` or ``LLMCacheMiss``; tripped guardrails raise
    their own :class:`~agentdescent_core.errors.RunStopped`, GuardrailsTripped.
    """


def frozen_description(patterns: Sequence[str]) -> str:
    """The "Frozen" line of the prompt: what is always frozen, plus the project's globs."""
    text = ("test modules, conftest.py, configuration files and everything outside the "
            "artifact roots")
    if patterns:
        text += "; inside the roots also " + ", ".join(patterns)
    return text


@dataclass
class _Books:
    max_call_cost: float = 0.0
    max_call_tokens: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    proposals: list[dict[str, Any]] = field(default_factory=list)


class ModelProposer:
    """The ``pytest_evolve_propose`` implementation of ``--evolve-model`` (one per run)."""

    def __init__(
        self,
        client: ModelClient,
        *,
        spec: str,
        tree: FileTree,
        guardrails: Guardrails,
        templates: PromptTemplates,
        frozen: str,
        max_usd: float | None = None,
        max_tokens: int | None = None,
        cache: LLMCache | None = None,
        budget_chars: int = DEFAULT_BUDGET,
    ) -> None:
        self.client = client
        self.spec = spec
        self._tree = tree
        self._guardrails = guardrails
        self._templates = templates
        self._frozen = frozen
        self._max_usd = max_usd
        self._max_tokens = max_tokens
        self._cache = cache
        self._budget_chars = budget_chars
        self._lock = threading.Lock()
        self._succeeded = False
        self._books = _Books()
        self._rejected: dict[str, list[RejectedProposal]] = {}
        self._pending = PendingProposals()

    # ---------------------------------------------------------------- the hook

    @pytest.hookimpl(trylast=True)
    def pytest_evolve_propose(self, context: ProposeContext) -> Edits | None:
        if not context.failures:
            return None
        tasks = tuple(f.nodeid for f in context.failures)
        system, user = build_prompt(PromptInputs(
            files=context.files,
            roots=context.roots,
            failures=[FailureInfo(f.nodeid, f.message, f.output, f.source)
                      for f in context.failures],
            frozen=self._frozen,
            rejected=_with_history(context, self.rejected_for(tasks)),
            budget=self._budget_chars,
        ), self._templates)
        self._check_spend(system, user)
        completion = self._complete(system, user)
        ops: Mapping[str, str | None] = {}
        rationale = ""
        try:
            from agentdescent_core.proposers.protocol import parse_edit_answer

            proposal = parse_edit_answer(completion.text, context.files)
            rationale, ops = proposal.rationale, proposal.ops
            ops = self._tree.validate_ops(ops)
            # Checked here too (the workers check every proposal, this one included) so
            # that a refusal is remembered for the next prompt with its content
            # withheld; warnings are the workers' to give.  What the files already hold
            # is not the proposal's doing (base=).  The violation limit raises
            # GuardrailsTripped from check itself: the run ends.
            self._guardrails.check(ops, base=context.files)
        except RefusalError as refusal:
            summary = (_summary(context.files, ops, rationale) if ops
                       else f"an answer that was not a usable edit: {_clip(completion.text)}")
            self._refused(context, tasks, refusal, _withhold_secrets(summary, ops))
            raise
        changed = {p: v for p, v in sorted(ops.items())
                   if context.files.get(p) != v and not (v is None and p not in context.files)}
        if not changed:
            self._remember(tasks, RejectedProposal(
                _summary(context.files, ops, rationale) if ops else "an empty edit list",
                "it changes nothing in the current files"))
            return None
        summary = _summary(context.files, changed, rationale)
        from agentdescent_core.memory import content_key

        key = content_key(changed)
        with self._lock:
            ticket = len(self._books.proposals)
            self._books.proposals.append({
                "round": context.round, "worker": context.worker, "tasks": list(tasks),
                "paths": sorted(changed), "rationale": rationale, "outcome": "proposed",
            })
        self._pending.file(Pending(context.round, context.worker, tasks, key,
                                   summary=summary, ticket=ticket))
        return Edits(changed, rationale=rationale or f"{self.spec} proposal for "
                     + ", ".join(tasks[:3]))

    # ---------------------------------------------------------------- calls and money

    def _complete(self, system: str, user: str) -> ModelAnswer:
        from agentdescent_core.proposers.llm_cache import LLMCacheMiss

        try:
            completion = self.client.complete(system, user)
        except LLMCacheMiss as exc:
            raise ProposerStopped("LLMCacheMiss", str(exc)) from exc
        except BackendError as exc:
            if not self._succeeded:
                raise ProposerStopped(
                    "BackendError",
                    f"the model {self.spec} never answered, so the run stops rather than retry "
                    f"every round: {exc}",
                ) from exc
            raise
        with self._lock:
            self._succeeded = True
            if completion.cost_usd is not None:
                self._books.max_call_cost = max(self._books.max_call_cost, completion.cost_usd)
            self._books.max_call_tokens = max(self._books.max_call_tokens,
                                              completion.usage.total)
        return completion

    def _check_spend(self, system: str, user: str) -> None:
        """Raise the budget's stop when the next call could take the run past a budget.

        Both budgets read the client's budget figures (replayed answers included, so
        a replay stops where its recording did) and estimate the next call as the
        largest one so far, or from the prompt before the first answer.
        """
        if self._max_tokens is not None:
            spent_tokens = self.client.tokens
            with self._lock:
                tokens = self._books.max_call_tokens
            if tokens <= 0:
                tokens = self._first_call_usage(system, user).total
            if spent_tokens >= self._max_tokens or spent_tokens + tokens > self._max_tokens:
                raise BudgetExhausted(
                    StopReason.MAX_TOKENS,
                    f"the next model call (about {tokens} tokens) would take the run past "
                    f"--evolve-max-tokens {self._max_tokens} ({spent_tokens} input and output "
                    "tokens spent)",
                )
        if self._max_usd is None:
            return
        spent = self.client.cost_usd or 0.0
        with self._lock:
            estimate = self._books.max_call_cost
        if estimate <= 0.0:
            cost = self.client.prices.cost(self.client.spec.model,
                                           self._first_call_usage(system, user))
            estimate = float(cost) if cost is not None else 0.0
        if spent + estimate > self._max_usd:
            raise BudgetExhausted(
                StopReason.MAX_USD,
                f"the next model call (about {estimate:.4f} USD) would take the cost past "
                f"--evolve-max-usd {self._max_usd} ({spent:.4f} USD spent)",
            )

    @staticmethod
    def _first_call_usage(system: str, user: str) -> Usage:
        from agentdescent_core.proposers.models import Usage

        return Usage(input_tokens=(len(system) + len(user)) // 4,
                     output_tokens=_FIRST_OUTPUT_TOKENS)

    # ---------------------------------------------------------------- memory of rejections

    def rejected_for(self, tasks: Iterable[str]) -> list[RejectedProposal]:
        """What was already turned down for these tasks (oldest first, without repeats)."""
        with self._lock:
            seen: dict[tuple[str, str], RejectedProposal] = {}
            for task in tasks:
                for item in self._rejected.get(task, ()):
                    seen.setdefault((item.summary, item.reason), item)
            return list(seen.values())

    def _remember(self, tasks: Iterable[str], item: RejectedProposal) -> None:
        with self._lock:
            for task in tasks:
                kept = self._rejected.setdefault(task, [])
                if item not in kept:
                    kept.append(item)
                    del kept[:-_KEEP_PER_TASK]

    def _refused(self, context: ProposeContext, tasks: tuple[str, ...], refusal: RefusalError,
                 summary: str) -> None:
        self._remember(tasks, RejectedProposal(summary, f"{refusal.category} "
                                                        f"({refusal.code}): {refusal.message}"))
        with self._lock:
            key = f"{refusal.category}/{refusal.code}"
            self._books.refused[key] = self._books.refused.get(key, 0) + 1
            self._books.proposals.append({
                "round": context.round, "worker": context.worker, "tasks": list(tasks),
                "paths": [], "rationale": "", "outcome": refusal.category,
                "reason": f"{refusal.code}: {refusal.message}",
            })

    def observe_round(self, info: RoundInfo) -> None:
        """Settle this proposer's pending proposals from the round's verdicts.

        Each judged proposal's report entry takes the verdict's category; a
        rejection (neither committed nor a lost compare-and-swap, which stays
        pending for the re-filed card's verdict) is remembered for the next
        prompt about its tasks, with the verdict's reason.
        """
        for item, verdict in self._pending.settle(info):
            self._settle(item, verdict.category)
            if verdict.category in (MergeOutcome.COMMITTED, MergeOutcome.CAS_CONFLICT):
                continue
            # the candidate's label ("diff <key8> by worker-N: ") means nothing to the model
            reason = _LABEL.sub("", verdict.reason)
            self._remember(item.tasks, RejectedProposal(item.summary,
                                                        f"{verdict.category}: {reason}"))

    def _settle(self, item: Pending, category: str) -> None:
        """The outcome of ``item``'s report entry: the latest verdict about it."""
        with self._lock:
            if 0 <= item.ticket < len(self._books.proposals):
                self._books.proposals[item.ticket]["outcome"] = category

    # ---------------------------------------------------------------- reporting

    def close(self) -> None:
        self.client.close()
        if self._cache is not None:
            self._cache.close()

    def report(self) -> dict[str, Any]:
        """The ``model`` section of report.json.

        ``calls``, the tokens and ``cost_usd`` are what went over the wire (the
        requests the endpoint received, retries and invalid answers included);
        answers replayed from the LLM cache are counted apart, in ``cache_hits``
        and the ``replayed_*`` tokens.
        """
        client = self.client
        paid, replayed = client.wire_usage, client.replayed_usage
        with self._lock:
            return {
                "spec": self.spec,
                "calls": client.calls,
                "answers": client.answers,
                "failures": client.failures,
                "input_tokens": paid.input_tokens,
                "output_tokens": paid.output_tokens,
                "cost_usd": client.wire_cost_usd,
                "cache_hits": client.cache_hits,
                "replayed_input_tokens": replayed.input_tokens,
                "replayed_output_tokens": replayed.output_tokens,
                "endpoint": client.endpoint,
                "refused": dict(sorted(self._books.refused.items())),
                "guardrail_violations": self._guardrails.violations,
                "proposals": [dict(p) for p in self._books.proposals],
            }


# ---------------------------------------------------------------- helpers

def _with_history(context: ProposeContext, rejected: Sequence[RejectedProposal]
                  ) -> list[RejectedProposal]:
    """The rejected attempts of ``context.history`` (earlier runs and sessions too), then
    the ones this proposer remembers itself; an edit both know is shown once."""
    own = {r.summary for r in rejected}
    earlier = [RejectedProposal("\n".join(p for p in (
        f"rationale: {_clip(a.rationale)}" if a.rationale else "", a.summary) if p),
        f"{a.category}: {_LABEL.sub('', a.reason)}") for a in context.history if not a.accepted]
    return list(dict.fromkeys([*(r for r in earlier if r.summary not in own), *rejected]))


def _withhold_secrets(summary: str, ops: Mapping[str, str | None]) -> str:
    """The summary, unless it would show a secret back to the model (then only the paths)."""
    from agentdescent_core.proposers.guardrails import scan_ops

    if any(f.kind == "secret" for f in scan_ops({"summary.txt": summary})):
        paths = ", ".join(sorted(ops)) or "the answer"
        return f"an edit of {paths} (content withheld: it contained a secret)"
    return summary


def _clip(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + " ..."


def _summary(files: Mapping[str, str], ops: Mapping[str, str | None], rationale: str) -> str:
    """What an edit did, in a few diff lines (what the next prompt shows as rejected)."""
    lines: list[str] = []
    if rationale:
        lines.append(f"rationale: {_clip(rationale)}")
    for path, text in sorted(ops.items()):
        if text is None:
            lines.append(f"deleted {path}")
            continue
        old = files.get(path)
        if old is None:
            lines.append(f"created {path}: {_clip(text)}")
            continue
        changed = [
            line for line in difflib.unified_diff(old.splitlines(), text.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        lines.append(f"edited {path}:")
        lines.extend(f"  {line[:160]}" for line in changed[:_SUMMARY_LINES])
        if len(changed) > _SUMMARY_LINES:
            lines.append(f"  ... {len(changed) - _SUMMARY_LINES} more changed lines")
    return "\n".join(lines)
