"""Strategies: the shape of an artifact and how a proposal becomes a Diff.

The aggregator never interprets a state key; it only asks whether two diffs
touch the same one.  Choosing a strategy is therefore choosing what can improve
in parallel:

* ``SingleSlot`` — one key; every proposal competes with every other.
* ``AppendRules`` — one key per distinct rule (its content hash); identical
  lessons dedupe, different ones fuse.
* ``KeyedRules`` — one key per named category; proposals for the same category
  compete, different categories fuse.
* ``FileTree`` (in ``filetree.py``) — one key per file.

Any object with ``initial``/``render``/``to_diff`` is a strategy (``Strategy``).
``to_diff`` returns None when the proposal would change nothing, so an unchanged
artifact is never evaluated twice.

A strategy may also say which diffs break the artifact's contract, with an
optional ``breaks_contract(state, diff) -> bool`` (see :func:`contract_breaking`):
the aggregator asks it for every card, and a contract-breaking card gets a
staleness tolerance of 0, because rebasing it across versions that may have
come to rely on what it removes costs more than proposing again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.errors import ContractError, RefusalError

SLOT_KEY = "value"
"""The only state key of a ``SingleSlot`` artifact."""


@runtime_checkable
class Strategy(Protocol):
    """What the engine needs from an artifact representation.

    Optional, and so not part of this protocol: ``breaks_contract(state, diff)
    -> bool``, asked through :func:`contract_breaking`.
    """

    def initial(self) -> dict[str, str]:
        """State before any accepted change."""
        ...

    def render(self, state: Mapping[str, str]) -> str:
        """The artifact as text, for the caller to place wherever it belongs."""
        ...

    def to_diff(
        self,
        state: Mapping[str, str],
        proposal: Any,
        author: str,
        base_version: int,
        target: str,
    ) -> Diff | None:
        """The change ``proposal`` makes to ``state``; None when it changes nothing."""
        ...


def deletes_a_key(state: Mapping[str, str], diff: Diff) -> bool:
    """True when ``diff`` deletes a key that ``state`` holds (a rename deletes one too)."""
    return any(value is None and key in state for key, value in diff.ops.items())


def contract_breaking(strategy: object, state: Mapping[str, str], diff: Diff) -> bool:
    """Whether ``diff``, proposed against ``state``, breaks the contract of ``strategy``'s artifact.

    The aggregator calls this for every card before its staleness decision.
    A strategy answers through its optional ``breaks_contract(state, diff)``
    method; one without that method never breaks a contract.  Raises
    ContractError when the method answers anything but a bool, since a
    staleness decision cannot be taken on a guess.
    """
    hook = getattr(strategy, "breaks_contract", None)
    if hook is None:
        return False
    if not callable(hook):
        raise ContractError(
            f"{type(strategy).__name__}.breaks_contract is not callable; define it as a "
            "method breaks_contract(state, diff) -> bool, or remove it"
        )
    answer = hook(state, diff)
    if not isinstance(answer, bool):
        raise ContractError(
            f"{type(strategy).__name__}.breaks_contract(state, diff) returned {answer!r:.80}; "
            "it must return True or False"
        )
    return answer


def _not_text(kind: str, value: object) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "not-text",
        f"{kind} must be text, got {type(value).__name__}: {value!r:.80}; "
        f"send the proposal as a string",
    )


def _empty(kind: str) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "empty-proposal",
        f"{kind} is empty or only whitespace; propose actual text "
        f"(an empty proposal is usually a reply that failed to parse)",
    )


class SingleSlot:
    """The artifact is one text (a system prompt, an instruction); proposals replace it."""

    def __init__(self, initial_value: str = "") -> None:
        if not isinstance(initial_value, str):
            raise TypeError(f"SingleSlot initial_value must be a str, got {initial_value!r}")
        self.initial_value = initial_value

    def __repr__(self) -> str:
        return f"SingleSlot(initial_value={self.initial_value!r:.60})"

    def initial(self) -> dict[str, str]:
        return {SLOT_KEY: self.initial_value}

    def render(self, state: Mapping[str, str]) -> str:
        return state.get(SLOT_KEY, "")

    def to_diff(
        self,
        state: Mapping[str, str],
        proposal: Any,
        author: str,
        base_version: int,
        target: str = "artifact",
    ) -> Diff | None:
        if not isinstance(proposal, str):
            raise _not_text("a SingleSlot proposal", proposal)
        if not proposal.strip():
            raise _empty("the SingleSlot proposal")
        if state.get(SLOT_KEY) == proposal:
            return None
        return Diff(
            ops={SLOT_KEY: proposal}, target=target, base_version=base_version, author=author
        )

    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> bool:
        """Never: a proposal only replaces the one text, so nothing it removes is relied on."""
        return False


def canonical_rule(text: str) -> str:
    """The stored form of a rule: spacing collapsed within lines, blank-line runs to one.

    Two rules that differ only in spacing are one rule, and because the stored
    text *is* this form, equal keys always carry equal values — two workers
    learning the same lesson produce a duplicate, never a conflict.
    """
    lines: list[str] = []
    for raw in text.strip().splitlines():
        line = " ".join(raw.split())
        if line or (lines and lines[-1]):
            lines.append(line)
    return "\n".join(lines)


def rule_key(text: str) -> str:
    """Content address of a rule: ``rule-`` plus 16 hex digits of its canonical sha256."""
    digest = hashlib.sha256(canonical_rule(text).encode("utf-8")).hexdigest()
    return f"rule-{digest[:16]}"


class AppendRules:
    """The artifact is a growing set of rules, each stored under its content hash.

    A proposal is one rule (a string) or several (a sequence of strings).  Rules
    are stored in ``canonical_rule`` form; rules already present — or repeated
    within the proposal — are dropped.  The rendering lists the rules in key order:
    the state holds no other order that two workers could agree on.
    """

    def __init__(self, initial_rules: Iterable[str] = ()) -> None:
        if isinstance(initial_rules, str):
            initial_rules = (initial_rules,)
        self._initial: dict[str, str] = {}
        for rule in initial_rules:
            if not isinstance(rule, str) or not rule.strip():
                raise ValueError(f"AppendRules initial rules must be non-empty text, got {rule!r}")
            self._initial.setdefault(rule_key(rule), canonical_rule(rule))

    def __repr__(self) -> str:
        return f"AppendRules(initial_rules={len(self._initial)} rules)"

    def initial(self) -> dict[str, str]:
        return dict(self._initial)

    def render(self, state: Mapping[str, str]) -> str:
        lines: list[str] = []
        for number, key in enumerate(sorted(state), start=1):
            first, *rest = state[key].splitlines() or [""]
            lines.append(f"{number}. {first}")
            lines.extend(f"   {line}" if line else "" for line in rest)
        return "\n".join(lines)

    def to_diff(
        self,
        state: Mapping[str, str],
        proposal: Any,
        author: str,
        base_version: int,
        target: str = "artifact",
    ) -> Diff | None:
        rules: Sequence[Any] = (proposal,) if isinstance(proposal, str) else proposal
        if not isinstance(rules, Sequence):
            raise _not_text("an AppendRules proposal (a rule or a list of rules)", proposal)
        ops: dict[str, str | None] = {}
        for rule in rules:
            if not isinstance(rule, str):
                raise _not_text("each AppendRules rule", rule)
            if not rule.strip():
                raise _empty("an AppendRules rule")
            key = rule_key(rule)
            if key not in state and key not in ops:
                ops[key] = canonical_rule(rule)
        if not ops:
            return None
        return Diff(
            ops=dict(sorted(ops.items())), target=target, base_version=base_version,
            author=author,
        )

    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> bool:
        """Never: a proposal only adds rules, and existing rules keep their keys."""
        return False


class KeyedRules:
    """The artifact has one entry per named category, e.g. ``["route", "fmt"]``.

    A proposal maps categories to new text, or to None to clear a category.  A
    category that was not declared is refused as ``invalid-proposal`` (code
    ``unknown-category``) rather than ``unknown-artifact``: the artifact exists,
    the proposal just does not fit its declared shape — the same kind of error
    as a FileTree path outside the artifact folder.
    """

    def __init__(
        self, categories: Sequence[str], initial: Mapping[str, str] | None = None
    ) -> None:
        if isinstance(categories, str):
            raise TypeError(
                f"KeyedRules categories must be a list of names, got the string {categories!r}"
            )
        names = list(categories)
        if not names:
            raise ValueError("KeyedRules needs at least one category, e.g. ['route', 'fmt']")
        for name in names:
            if not isinstance(name, str) or not name.strip() or name != name.strip():
                raise ValueError(
                    f"KeyedRules category {name!r} must be non-empty text without "
                    f"surrounding whitespace"
                )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"KeyedRules categories repeat {duplicates!r}; list each once")
        self.categories: tuple[str, ...] = tuple(names)
        self._initial: dict[str, str] = {}
        for category, text in (initial or {}).items():
            self._check_category(category)
            if not isinstance(text, str):
                raise TypeError(f"KeyedRules initial text for {category!r} must be a str")
            self._initial[category] = text

    def __repr__(self) -> str:
        return f"KeyedRules(categories={list(self.categories)!r})"

    def _check_category(self, category: object) -> str:
        if not isinstance(category, str) or category not in self.categories:
            raise RefusalError(
                "invalid-proposal",
                "unknown-category",
                f"category {category!r} is not one of this artifact's categories "
                f"{list(self.categories)!r}; propose text for one of those",
            )
        return category

    def initial(self) -> dict[str, str]:
        return dict(self._initial)

    def render(self, state: Mapping[str, str]) -> str:
        """Present categories in declared order; unexpected keys follow, sorted."""
        order = [c for c in self.categories if c in state]
        order += sorted(k for k in state if k not in self.categories)
        return "\n\n".join(f"## {key}\n{state[key]}" for key in order)

    def to_diff(
        self,
        state: Mapping[str, str],
        proposal: Any,
        author: str,
        base_version: int,
        target: str = "artifact",
    ) -> Diff | None:
        if not isinstance(proposal, Mapping):
            raise RefusalError(
                "invalid-proposal",
                "not-a-mapping",
                f"a KeyedRules proposal must map categories to text, got "
                f"{type(proposal).__name__}; send e.g. {{{self.categories[0]!r}: '...'}}",
            )
        ops: dict[str, str | None] = {}
        for category, text in proposal.items():
            self._check_category(category)
            if text is not None:
                if not isinstance(text, str):
                    raise _not_text(f"the text for category {category!r}", text)
                if not text.strip():
                    raise _empty(f"the text for category {category!r} (use None to clear it)")
            if state.get(category) == text or (text is None and category not in state):
                continue
            ops[category] = text
        if not ops:
            return None
        ordered = {c: ops[c] for c in self.categories if c in ops}
        return Diff(ops=ordered, target=target, base_version=base_version, author=author)

    def breaks_contract(self, state: Mapping[str, str], diff: Diff) -> bool:
        """True when the diff clears a category ``state`` holds.

        Rewriting a category keeps its place in the artifact; clearing one
        removes text that later versions (and the tasks they were accepted on)
        may rely on, so such a diff is not rebased across versions.
        """
        return deletes_a_key(state, diff)
