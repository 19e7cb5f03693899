"""The proposer of ``pytest --evolve``: the ``pytest_evolve_propose`` hook, called per failure.

The engine asks a worker's proposer about one failing train task at a time;
the hook gets more: every train task known to fail at that state (the asked
one first), each with pytest's assertion message, the captured output and the
test's source, so one answer can fix several tests.  Holdout tasks never
appear in a context — not their names, messages or sources — or the
holdout reward would stop measuring generalisation.

A hook implementation that raises is a bug in the user's code: it becomes a
:class:`~agentdescent_core.errors.ContractError` at once (the engine does not
retry those) so the run ends with the hook's error instead of silently
retrying the same crash every round.  The engine's own errors pass through as
they are: a RefusalError (the answer is refused and counted by category), a
BackendError (the model proposer's client already retried), the budget's stop.

An answer may carry its reason: a mapping with a ``rationale`` attribute (such
as :class:`Edits`, which the model proposer returns) keeps it on its way to
the Diff, hence to the commit message and the report; a plain dict has none,
so the hook contract stays ``{path: text or None}``.

Memory of what was tried: with a :class:`~agentdescent_core.memory.AttemptMemory`
every answer is remembered until its round's verdicts come back
(:meth:`HookProposer.observe_round`), then kept with its verdict; a context's
``history`` shows the attempts made for its failing tests, never naming a
held-out test.
"""

from __future__ import annotations

import random
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agentdescent_core.errors import (
    AgentDescentError,
    BudgetExhausted,
    ContractError,
    RefusalError,
)
from agentdescent_core.evaluation.records import TestRecord
from agentdescent_core.evaluation.sandboxed import Observation, SandboxedVerifier, record_reward
from agentdescent_core.evidence import MergeOutcome
from agentdescent_core.loop.worker import ProposalSite
from agentdescent_core.tasks import Task
from pytest_agentdescent.hooks import Failure, ProposeContext
from pytest_agentdescent.pending import Pending, PendingProposals

if TYPE_CHECKING:
    from agentdescent_core.loop.result import RoundInfo
    from agentdescent_core.memory import AttemptMemory

#: The last lines of a hook's traceback worth showing in the error.
_TRACE_LINES = 12


class Edits(dict[str, "str | None"]):
    """A hook answer ``{path: text or None}`` that also says why (``rationale``)."""

    def __init__(self, ops: Mapping[str, str | None] | None = None, /, *,
                 rationale: str = "") -> None:
        super().__init__(ops or {})
        self.rationale = rationale


def hook_implementations(config: pytest.Config) -> list[str]:
    """Where ``pytest_evolve_propose`` is implemented (conftest paths or plugin names)."""
    found: list[str] = []
    for impl in config.pluginmanager.hook.pytest_evolve_propose.get_hookimpls():
        module_file = getattr(impl.plugin, "__file__", None)
        if module_file:
            try:
                found.append(Path(module_file).relative_to(config.rootpath).as_posix())
                continue
            except ValueError:
                pass
        found.append(module_file or impl.plugin_name)
    return found


def missing_proposer_message() -> str:
    return (
        "pytest --evolve has no proposer: implement pytest_evolve_propose in conftest.py "
        "or give a model with --evolve-model PROVIDER:MODEL. The hook gets a ProposeContext "
        "with the artifact files and the failing train tests (message, output, source) and returns "
        "{repo-relative path: new text or None to delete}."
    )


class HookProposer:
    """``propose(rendered, task, output, score, *, site)`` for the engine, backed by the hook.

    ``verifier`` answers which other train tasks fail at the same state (from
    what it already measured: nothing is run for it); ``sources`` maps node
    ids to the test functions' source.  ``calls`` counts hook calls, except one
    that a budget stopped before it asked anything (the model proposer's
    ``--evolve-max-usd`` / ``--evolve-max-tokens``): that call was never made.
    ``memory`` (optional) is shown to the hook as ``context.history`` and
    records every answer with its verdict; ``hidden`` are the held-out test
    ids, which are never shown.
    """

    wants_site = True
    #: The engine calls it once per attempt: a hook's error is never retried, and the
    #: model proposer's client has already retried with backoff.
    retries_itself = True

    def __init__(
        self,
        config: pytest.Config,
        verifier: SandboxedVerifier,
        *,
        roots: Sequence[str],
        train: Sequence[str],
        sources: Mapping[str, str],
        seed: int,
        memory: AttemptMemory | None = None,
        hidden: Sequence[str] = (),
    ) -> None:
        self._config = config
        self._verifier = verifier
        self._roots = tuple(roots)
        self._train = tuple(train)
        self._train_set = frozenset(train)
        self._sources = dict(sources)
        self._seed = seed
        self._lock = threading.Lock()
        self._calls = 0
        self.memory = memory
        self._hidden = tuple(hidden)
        self._pending = PendingProposals()

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    def __call__(self, rendered: str, task: Task, output: Any, score: float, *,
                 site: ProposalSite) -> dict[str, str | None] | None:
        files, record = _unpack(output, task, score)
        failures = self._failures(files, task.id, record, score)
        tasks = tuple(f.nodeid for f in failures)
        context = ProposeContext(
            files=dict(files),
            roots=self._roots,
            failures=failures,
            round=site.round,
            worker=site.worker,
            version=site.version,
            rng=random.Random(f"{self._seed}:{site.round}:{site.worker}:{site.version}"),
            history=(self.memory.for_tasks(tasks, hidden=self._hidden)
                     if self.memory is not None else ()),
        )
        with self._lock:
            self._calls += 1
        try:
            answer = self._config.hook.pytest_evolve_propose(context=context)
        except BudgetExhausted:
            with self._lock:
                self._calls -= 1  # stopped before the call: nothing was asked
            raise
        except RefusalError as refusal:
            self._remember_refusal(site, tasks, refusal)
            raise
        except AgentDescentError:
            raise  # a dead backend: the engine's vocabulary
        except Exception as exc:
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
            tail = "".join(lines[-_TRACE_LINES:]).rstrip()
            raise ContractError(
                f"pytest_evolve_propose raised {type(exc).__name__}: {exc} (round {site.round}, "
                f"{site.worker}); fix the hook — the run stops rather than retry it.\n{tail}"
            ) from exc
        edits = _checked(answer)
        if edits is not None and self.memory is not None:
            self._expect(site, tasks, files, edits)
        return edits

    # ---------------------------------------------------------------- memory

    def _expect(self, site: ProposalSite, tasks: tuple[str, ...], files: Mapping[str, str],
                edits: Mapping[str, str | None]) -> None:
        """Remember an answer until its round's verdict says what became of it."""
        from agentdescent_core.memory import content_key, describe_edit

        changed = {p: v for p, v in edits.items()
                   if files.get(p) != v and not (v is None and p not in files)}
        if not changed:
            return
        try:
            key = content_key(changed)
        except UnicodeError:
            # A name that is not UTF-8 (a lone surrogate) has no content hash; the
            # strategy refuses it next (not-utf8-name), and that verdict is matched
            # to this worker, so the memory still learns of it.
            return
        self._pending.file(Pending(
            site.round, site.worker, tasks, key, summary=describe_edit(files, changed),
            rationale=str(getattr(edits, "rationale", "")), paths=tuple(sorted(changed))))

    def _remember_refusal(self, site: ProposalSite, tasks: tuple[str, ...],
                          refusal: RefusalError) -> None:
        if self.memory is None:
            return
        from agentdescent_core.memory import Attempt

        self.memory.record(Attempt(
            key="", tasks=self._shown(tasks), category=refusal.category,
            reason=f"refused by the proposer ({refusal.code}): {refusal.message}",
            summary=f"an answer refused before it became an edit ({site.worker})",
            round=site.round).hiding(self._hidden))

    def observe_round(self, info: RoundInfo) -> int:
        """Keep this round's answers with their verdicts; how many were recorded.

        An answer is matched to a verdict as :mod:`pytest_agentdescent.pending`
        says: by the content hash of its edit, else by its worker (a rebased or
        fused candidate).  A lost compare-and-swap is no verdict yet (the card
        is re-filed); an answer no verdict names (it lost the round's
        tournament, or failed its own re-run) is dropped.
        """
        if self.memory is None:
            return 0
        from agentdescent_core.memory import Attempt

        recorded = 0
        for item, verdict in self._pending.settle(info):
            if verdict.category == MergeOutcome.CAS_CONFLICT:
                continue
            self.memory.record(Attempt(
                key=item.key, tasks=self._shown(item.tasks), category=verdict.category,
                reason=verdict.reason, summary=item.summary, rationale=item.rationale,
                paths=item.paths, p_improvement=verdict.p_improvement,
                reward_before=verdict.reward_before, reward_after=verdict.reward_after,
                flips=tuple(f for f in verdict.flips if f[0] in self._train_set),
                round=item.round).hiding(self._hidden))
            recorded += 1
        return recorded

    def _shown(self, tasks: Sequence[str]) -> tuple[str, ...]:
        return tuple(t for t in tasks if t in self._train_set)

    def _failures(self, files: Mapping[str, str], asked: str, record: TestRecord | None,
                  score: float) -> tuple[Failure, ...]:
        """The failing train tasks at ``files``, the asked one first; never a holdout task."""
        found: list[Failure] = []
        if asked in self._train_set:
            found.append(self._failure(asked, record, score))
        for nodeid in self._train:
            if nodeid == asked:
                continue
            known = self._verifier.records(files, nodeid)
            failing = [r for r in known if r.counts and record_reward(r) < 1.0]
            if failing:
                found.append(self._failure(nodeid, failing[0], record_reward(failing[0])))
        return tuple(found)

    def _failure(self, nodeid: str, record: TestRecord | None, reward: float) -> Failure:
        return Failure(
            nodeid=nodeid,
            outcome=record.outcome if record is not None else "failed",
            reward=float(reward),
            message=record.message if record is not None else "",
            output=record.output if record is not None else "",
            source=self._sources.get(nodeid, ""),
        )


def _unpack(output: Any, task: Task, score: float
            ) -> tuple[Mapping[str, str], TestRecord | None]:
    if isinstance(output, Observation):
        return output.files, output.record
    raise ContractError(  # pragma: no cover - the sandboxed verifier always returns one
        f"the proposer expected an Observation for task {task.id!r}, got "
        f"{type(output).__name__} (score {score})"
    )


def _checked(answer: object) -> dict[str, str | None] | None:
    """The hook's answer as ``{path: text or None}``; a ContractError for anything else."""
    if answer is None:
        return None
    if not isinstance(answer, Mapping):
        raise ContractError(
            f"pytest_evolve_propose returned {type(answer).__name__} ({answer!r:.80}); return "
            "a dict {repo-relative path: new text, or None to delete} or None for no proposal"
        )
    edits: dict[str, str | None] = {}
    for path, text in answer.items():
        if not isinstance(path, str) or not (text is None or isinstance(text, str)):
            raise ContractError(
                f"pytest_evolve_propose returned the entry {path!r}: {text!r:.60}; keys must be "
                "repo-relative paths (str) and values the new text (str) or None to delete"
            )
        edits[path] = text
    if not edits:
        return None
    rationale = getattr(answer, "rationale", "")
    return Edits(edits, rationale=rationale if isinstance(rationale, str) else "")
