"""Provider-agnostic actors: turn any ``prompt -> text`` function into something evolve() can drive.

The engine needs two things from an actor: ``run(rendered, task)`` solves a task
with the current artifact, and ``propose(rendered, task, output, score)`` looks
at a result and suggests a change.  Both can be plain functions; this module
builds them from a *completion* — a callable taking a prompt and returning the
model's text — so one adapter works for every model provider (the SDK-backed
clients are in :mod:`.models`, whose ``ModelClient.as_completion`` is one;
here any function qualifies).

* ``from_callable(fn)`` checks ``fn`` can be called with one prompt string and
  wraps it so a reply that is not text is caught as a caller bug.
* ``reflector(completion)`` is the proposer: it shows the model the artifact,
  the task, the output, the score and (unless withheld) the task's ``meta``, and
  asks for ONE general rule.  Its reply is parsed leniently; "NONE" or an empty
  reply means "no proposal".  The rule is a string, which is what ``AppendRules``
  (and ``SingleSlot``, replacing the value) take as a proposal.
  With ``history=`` (an :class:`~agentdescent_core.memory.AttemptMemory`, or
  any function of the task returning attempts) the prompt also lists what was
  already tried for the task and why it was turned down.
* ``LLMAgent(completion)`` bundles both: its ``run`` places the artifact as the
  instructions above the task prompt.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentdescent_core.errors import ContractError
from agentdescent_core.tasks import Task

if TYPE_CHECKING:
    from agentdescent_core.memory import Attempt, AttemptMemory

Completion = Callable[[str], str]
"""A model behind one call: the prompt text in, the reply text out."""

Proposer = Callable[[str, Task, object, float], str | None]
"""``propose(rendered, task, output, score)`` -> a proposal, or None for none."""

DEFAULT_META_CHARS = 600
DEFAULT_OUTPUT_CHARS = 2_000


def _name_of(fn: object) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


class _CheckedCompletion:
    """A completion whose replies are checked to be text (a non-str reply is a caller bug)."""

    def __init__(self, fn: Callable[[str], Any]) -> None:
        self.fn = fn
        self.name = _name_of(fn)

    def __repr__(self) -> str:
        return f"from_callable({self.name})"

    def __call__(self, prompt: str) -> str:
        reply = self.fn(prompt)
        if not isinstance(reply, str):
            raise ContractError(
                f"completion {self.name} returned {type(reply).__name__} ({reply!r:.80}); "
                "a completion must return the model's reply as a str"
            )
        return reply


def from_callable(fn: Callable[[str], str]) -> Completion:
    """Adapt any ``prompt -> text`` function into a Completion, checking it fits first.

    Raises ContractError when ``fn`` is not callable or its signature cannot take
    a single positional prompt (too many required parameters, keyword-only ones
    without defaults, none at all).  The returned completion raises ContractError
    if ``fn`` ever replies with something other than a str.  Wrapping twice is a
    no-op.
    """
    if isinstance(fn, _CheckedCompletion):
        return fn
    if not callable(fn):
        raise ContractError(
            f"completion must be callable as complete(prompt) -> str, got "
            f"{type(fn).__name__} ({fn!r:.80})"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None  # a builtin without introspection: trust it, the reply check remains
    if signature is not None:
        try:
            signature.bind("prompt")
        except TypeError as exc:
            raise ContractError(
                f"completion {_name_of(fn)}{signature} cannot be called with one positional "
                f"prompt string ({exc}); pass a function like `def complete(prompt: str) -> str`"
            ) from None
    return _CheckedCompletion(fn)


def _check_options(show_meta: object, meta_chars: object) -> None:
    if not isinstance(show_meta, bool):
        raise ContractError(f"show_meta must be True or False, got {show_meta!r}")
    if isinstance(meta_chars, bool) or not isinstance(meta_chars, int) or meta_chars < 0:
        raise ContractError(
            f"meta_chars must be a non-negative int (characters of Task.meta shown), "
            f"got {meta_chars!r}"
        )


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated, {len(text) - limit} more characters]"


def _render_meta(meta: Mapping[str, object]) -> str:
    return "\n".join(f"{key}: {value}" for key, value in meta.items())


def build_reflection_prompt(
    rendered: str,
    task: Task,
    output: object,
    score: float,
    *,
    show_meta: bool = True,
    meta_chars: int = DEFAULT_META_CHARS,
    output_chars: int = DEFAULT_OUTPUT_CHARS,
    tried: Sequence[Attempt] = (),
) -> str:
    """The text the reflector sends: artifact, task, output, score, meta, what was
    already ``tried`` for the task (with its verdicts), and the ask.

    ``meta`` is what lets the model learn a convention it could not guess (a unit,
    a format) — so it is shown by default, cut to ``meta_chars`` so a large meta
    cannot swamp the prompt, and left out entirely when ``show_meta`` is False.
    The ask insists on a general rule: a rule naming this task's answer would
    memorise one task instead of teaching the agent anything.
    """
    shown_output = output if isinstance(output, str) else repr(output)
    sections = [
        "You are improving the instructions an AI agent follows. The agent was given the "
        f"instructions below and a task; its output scored {score:.3f} on a scale where "
        "1.0 is fully correct.",
        f"## Current instructions\n{rendered.strip() or '(none yet)'}",
        f"## Task\n{task.prompt}",
        f"## Agent output\n{_truncate(shown_output, output_chars) or '(empty)'}",
    ]
    if show_meta and task.meta:
        sections.append(
            "## Reference information for this task\n"
            + _truncate(_render_meta(task.meta), meta_chars)
        )
    if tried:
        from agentdescent_core.memory import render_attempts

        sections.append(
            "## Already tried for this task\n" + render_attempts(tried)
            + "\nDo not propose a rule that was rejected again; learn from why it failed."
        )
    sections.append(
        "State ONE general rule that, added to the instructions, would make the agent "
        "handle this task and others like it correctly. Phrase it about the kind of task, "
        "not about this one: do not state this task's expected answer or its specific "
        "values. If the instructions already cover it or no rule would help, reply NONE.\n"
        "Reply with a single line:\nRule: <the rule>"
    )
    return "\n\n".join(sections)


_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)
_RULE_LINE = re.compile(
    r"^[\s>*#_-]*(?:\d+[.)]\s*)?\**\s*rule(?:\s*\d+)?\s*\**\s*[:：]\s*\**(.*)$", re.I
)
_NONE = {"none", "n/a", "na", "no rule", "nothing", "no change", "no changes"}
_STRIP = " \t\r\n\"'`*_"
_DECLINE = re.compile(r"^NONE\b(?!-)")


def parse_rule(reply: str) -> str | None:
    """The rule in a model's reply, or None when it declines.

    Lenient by design, because models decorate: a fenced block is unwrapped, a
    ``Rule:`` line (bold, bulleted, numbered or not) is preferred over the rest,
    and surrounding quotes and markdown emphasis are removed.  An empty reply or
    one that amounts to "NONE" gives None.
    """
    text = reply.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = _RULE_LINE.match(line)
        if match:
            rest = [match.group(1)]
            for follow in lines[index + 1 :]:
                if not follow.strip() or _RULE_LINE.match(follow):
                    break
                rest.append(follow.strip())
            text = " ".join(part.strip() for part in rest if part.strip())
            break
    text = text.strip(_STRIP)
    if not text or text.rstrip(".!").strip(_STRIP).lower() in _NONE:
        return None
    if _DECLINE.match(text):  # "NONE — the instructions already cover this"
        return None
    return text


def reflector(
    completion: Completion,
    *,
    show_meta: bool = True,
    meta_chars: int = DEFAULT_META_CHARS,
    output_chars: int = DEFAULT_OUTPUT_CHARS,
    history: AttemptMemory | Callable[[Task], Sequence[Attempt]] | None = None,
) -> Proposer:
    """A ``propose(rendered, task, output, score)`` that asks ``completion`` for one rule.

    The model need not be the one the agent runs on — a cheap reflector for an
    expensive agent is often the right trade.  A perfect score (>= 1.0) has
    nothing to teach, so it returns None without spending a call.  ``history``
    shows the model what was already tried for the task: an
    :class:`~agentdescent_core.memory.AttemptMemory` (filled by passing
    ``on_round=memory.observe_round`` to ``evolve()`` and saved between runs),
    or a function ``history(task) -> attempts``.
    """
    checked = from_callable(completion)
    _check_options(show_meta, meta_chars)
    if isinstance(output_chars, bool) or not isinstance(output_chars, int) or output_chars < 0:
        raise ContractError(f"output_chars must be a non-negative int, got {output_chars!r}")
    lookup = _history_lookup(history)

    def propose(rendered: str, task: Task, output: object, score: float) -> str | None:
        if score >= 1.0:
            return None
        prompt = build_reflection_prompt(
            rendered, task, output, score,
            show_meta=show_meta, meta_chars=meta_chars, output_chars=output_chars,
            tried=lookup(task),
        )
        return parse_rule(checked(prompt))

    propose.__qualname__ = f"reflector({_name_of(completion)})"
    return propose


def _history_lookup(history: object) -> Callable[[Task], Sequence[Attempt]]:
    """``history=`` of :func:`reflector` as a function of the task (ContractError if neither)."""
    from agentdescent_core.memory import AttemptMemory

    if history is None:
        return lambda task: ()
    if isinstance(history, AttemptMemory):
        return lambda task: history.for_tasks([task.id])
    if callable(history):
        def lookup(task: Task) -> Sequence[Attempt]:
            found = history(task)
            if not isinstance(found, Sequence) or isinstance(found, str):
                raise ContractError(
                    f"history {_name_of(history)} returned {type(found).__name__} for task "
                    f"{task.id!r}; return a sequence of memory.Attempt (or an empty tuple)")
            return found
        return lookup
    raise ContractError(
        f"history must be an AttemptMemory or a function history(task) -> attempts, got "
        f"{type(history).__name__} ({history!r:.60})")


class LLMAgent:
    """The two-method actor built on one completion: it answers tasks and reflects on them.

    ``run`` sends the rendered artifact as the instructions followed by the task
    prompt, and returns the reply text.  ``propose`` is ``reflector(completion)``
    with the same ``show_meta`` / ``meta_chars``.  Stateless, so one agent can be
    shared by every worker thread.
    """

    def __init__(
        self,
        completion: Completion,
        *,
        show_meta: bool = True,
        meta_chars: int = DEFAULT_META_CHARS,
    ) -> None:
        self.completion = from_callable(completion)
        _check_options(show_meta, meta_chars)
        self.show_meta = show_meta
        self.meta_chars = meta_chars
        self._propose = reflector(self.completion, show_meta=show_meta, meta_chars=meta_chars)

    def __repr__(self) -> str:
        return f"LLMAgent({self.completion!r}, show_meta={self.show_meta})"

    @staticmethod
    def build_prompt(rendered: str, task: Task) -> str:
        """Artifact as instructions, then the task; no instructions section when it is empty."""
        if not rendered.strip():
            return task.prompt
        return f"Instructions:\n{rendered.strip()}\n\nTask:\n{task.prompt}"

    def run(self, rendered: str, task: Task) -> str:
        return self.completion(self.build_prompt(rendered, task))

    def propose(self, rendered: str, task: Task, output: object, score: float) -> str | None:
        return self._propose(rendered, task, output, score)
