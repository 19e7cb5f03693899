"""Governance: which layer an artifact lives in, and which paths may never change.

Two questions are answered here and nowhere else, so every mechanism that depends
on them agrees:

* *How carefully is an artifact updated?*  ``classify`` maps a blast radius to
  the fast layer (L2, fully asynchronous merges) or the slow layer (L1,
  serialised evaluation).  The boundary ``FAST_MAX`` is defined once.  L0 — the
  oracle, audit and permissions — is never reached by measurement, only by name,
  which is why ``check_artifact_id`` refuses those names up front.
* *May this path change?*  ``FrozenSet`` is the one object consulted both when a
  proposal is validated and, after a candidate ran, when frozen files are
  checked against their hashes.  A candidate that could edit its own tests would
  be grading itself.

This module deliberately imports nothing from ``agentdescent_core.artifacts``
(the artifacts package imports it), so it normalises the few paths it sees
itself.
"""

from __future__ import annotations

import enum
import math
import re
import warnings
from collections.abc import Iterable, Sequence

import pathspec

from agentdescent_core.errors import RefusalError

FAST_MAX: float = 0.30
"""Largest blast radius still updated on the fast layer (L2); anything above is L1."""

RESERVED_L0_NAMES: frozenset[str] = frozenset(
    {"oracle", "audit_budget", "merge_permissions", "safety_constraints"}
)
"""Artifact ids that name L0 (human-only) parts of the system; the loop refuses them."""

ALWAYS_FROZEN_PATTERNS: tuple[str, ...] = ("**/conftest.py",)
"""Frozen in every FrozenSet: a conftest.py is test code, even inside an artifact root."""


class Layer(enum.Enum):
    """Update layer of an artifact: L0 frozen, L1 slow (serialised), L2 fast (async)."""

    L0 = "L0"
    L1 = "L1"
    L2 = "L2"


def classify(blast_radius: float) -> Layer:
    """Layer for an artifact whose changes affect ``blast_radius`` (a share in [0, 1]).

    Only L1 or L2 come out of here: L0 is decided by name (``layer_for``), never
    by a number someone estimated.
    """
    if isinstance(blast_radius, bool) or not isinstance(blast_radius, (int, float)):
        raise TypeError(
            f"blast_radius must be a number in [0, 1], got {blast_radius!r} "
            f"of type {type(blast_radius).__name__}"
        )
    if math.isnan(blast_radius) or not 0.0 <= blast_radius <= 1.0:
        raise ValueError(
            f"blast_radius must be in [0, 1] (the share of tasks a change can affect), "
            f"got {blast_radius!r}"
        )
    return Layer.L2 if blast_radius <= FAST_MAX else Layer.L1


def _reserved_form(name: str) -> str:
    return re.sub(r"[\s\-.]+", "_", name.strip()).casefold()


def check_artifact_id(name: str) -> None:
    """Refuse an artifact id that is empty or names an L0 component.

    Spelling variants (``Oracle``, ``audit-budget``) are refused too: the point is
    that nothing the loop evolves can be mistaken for the thing that judges it.
    """
    if not isinstance(name, str) or not name.strip():
        raise RefusalError(
            "invalid-proposal",
            "empty-name",
            f"artifact id must be a non-empty string, got {name!r}; give the artifact a name",
        )
    if _reserved_form(name) in RESERVED_L0_NAMES:
        reserved = ", ".join(sorted(RESERVED_L0_NAMES))
        raise RefusalError(
            "invalid-proposal",
            "reserved-name",
            f"artifact id {name!r} is reserved for a frozen L0 component ({reserved}) "
            f"that only humans may change; rename the artifact, e.g. "
            f"{_reserved_form(name) + '_prompt'!r}",
        )


def layer_for(name: str, blast_radius: float) -> Layer:
    """L0 for a reserved name, else ``classify(blast_radius)``."""
    if isinstance(name, str) and _reserved_form(name) in RESERVED_L0_NAMES:
        return Layer.L0
    return classify(blast_radius)


# --------------------------------------------------------------------------- globs

_GLOB_CHARS = re.compile(r"[*?\[]")


def _clean_pattern(pattern: str) -> str:
    """Posix form of a user pattern; raises ValueError when it cannot name repo paths."""
    if not isinstance(pattern, str):
        raise TypeError(f"frozen pattern must be a string, got {pattern!r}")
    text = pattern.strip().replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    text = text.strip("/")
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if not segments:
        raise ValueError(
            f"frozen pattern {pattern!r} is empty; give a repo-relative glob such as 'tests/**'"
        )
    if ".." in segments:
        raise ValueError(
            f"frozen pattern {pattern!r} contains '..'; patterns are relative to the "
            f"repository root and cannot leave it"
        )
    collapsed: list[str] = []
    for seg in segments:
        if seg == "**" and collapsed and collapsed[-1] == "**":
            continue
        collapsed.append(seg)
    return "/".join(collapsed)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a repo-relative glob to a regex matching a path *or anything under it*.

    Git's wildmatch rules, through ``pathspec`` (the frozen set is a safety
    boundary, and bracket expressions such as ``[]]`` and ``[!]]`` are easy to get
    wrong by hand), with one difference from ``.gitignore``: a pattern is
    anchored at the repository root, so ``tests`` freezes the top-level
    ``tests`` and not ``skills/x/tests`` (write ``**/tests`` for that).
    ``**`` as a whole segment matches any number of segments, ``*``/``?``/``[...]``
    stay within one segment, and a pattern that names a directory freezes
    everything below it.  A trailing slash is dropped (paths here are strings,
    not directory entries), so ``tests/`` also matches a file called ``tests``.
    """
    cleaned = _clean_pattern(pattern)
    with warnings.catch_warnings():  # "[[]" is a literal "[", not a nested set
        warnings.simplefilter("ignore", FutureWarning)
        try:
            compiled = pathspec.GitIgnoreSpec.from_lines(["/" + cleaned]).patterns[0].regex
        except (ValueError, re.error) as exc:
            raise ValueError(f"frozen pattern {pattern!r} is not a valid glob: {exc}") from None
        if compiled is None:
            raise ValueError(f"frozen pattern {pattern!r} matches nothing; give a "
                             "repo-relative glob such as 'tests/**'")
        # pathspec's regex matches a prefix ending at a "/" or the end; anything may follow
        return re.compile(f"(?:{compiled.pattern}).*", re.DOTALL)


def _clean_path(path: str) -> str | None:
    """Posix repo-relative form of ``path``, or None when it is not inside the repo."""
    if not isinstance(path, str) or "\x00" in path:
        return None
    text = path.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        return None
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if not segments or ".." in segments:
        return None
    return "/".join(segments)


def _clean_root(root: str) -> str:
    cleaned = _clean_path(root)
    if cleaned is None or _GLOB_CHARS.search(cleaned):
        raise ValueError(
            f"artifact root {root!r} must be a plain repo-relative path below the "
            f"repository root (no '..', no glob characters), e.g. 'skills'"
        )
    return cleaned


class FrozenSet:
    """The answer to "may this path change?", shared by proposal and run time.

    A path is frozen when any of these holds:

    * it matches one of ``patterns`` (or ``ALWAYS_FROZEN_PATTERNS``), or lies
      under a directory one of them matches;
    * it is one of ``frozen_files`` (e.g. the collected test modules) or lies
      under one of them;
    * ``artifact_roots`` were given and the path lies outside all of them — the
      artifact folders are the only thing the loop may ever touch.

    Paths that cannot be read as repo-relative (absolute, ``..``, NUL) count as
    frozen: nothing outside the repository is ever writable.
    """

    def __init__(
        self,
        patterns: Iterable[str] = (),
        *,
        artifact_roots: Sequence[str] = (),
        frozen_files: Iterable[str] = (),
    ) -> None:
        if isinstance(patterns, str):
            patterns = (patterns,)
        if isinstance(artifact_roots, str):
            artifact_roots = (artifact_roots,)
        if isinstance(frozen_files, str):
            frozen_files = (frozen_files,)
        self._patterns: tuple[str, ...] = tuple(dict.fromkeys(_clean_pattern(p) for p in patterns))
        self._compiled: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
            (p, compile_glob(p)) for p in (*ALWAYS_FROZEN_PATTERNS, *self._patterns)
        )
        self._roots: tuple[str, ...] = tuple(dict.fromkeys(_clean_root(r) for r in artifact_roots))
        files: list[str] = []
        for f in frozen_files:
            cleaned = _clean_path(f)
            if cleaned is None:
                raise ValueError(
                    f"frozen file {f!r} is not a repo-relative path; pass paths relative "
                    f"to the repository root"
                )
            files.append(cleaned)
        self._files: frozenset[str] = frozenset(files)

    @property
    def patterns(self) -> tuple[str, ...]:
        """The user's patterns, normalised (``ALWAYS_FROZEN_PATTERNS`` not included)."""
        return self._patterns

    @property
    def artifact_roots(self) -> tuple[str, ...]:
        return self._roots

    @property
    def frozen_files(self) -> frozenset[str]:
        return self._files

    def with_files(self, files: Iterable[str]) -> FrozenSet:
        """A copy that also freezes ``files`` (e.g. test modules found at collection)."""
        return FrozenSet(
            self._patterns,
            artifact_roots=self._roots,
            frozen_files=(*self._files, *files),
        )

    def reason(self, path: str) -> str | None:
        """Why ``path`` is frozen, in words, or None when it may change."""
        cleaned = _clean_path(path)
        if cleaned is None:
            return "it is not a path inside the repository"
        for pattern, regex in self._compiled:
            if regex.fullmatch(cleaned):
                return f"it matches the frozen pattern {pattern!r}"
        for ancestor in _self_and_ancestors(cleaned):
            if ancestor in self._files:
                if ancestor == cleaned:
                    return "it is a frozen file (a collected test module or listed frozen file)"
                return f"it lies under the frozen path {ancestor!r}"
        if self._roots and not any(_inside(cleaned, root) for root in self._roots):
            roots = ", ".join(repr(r) for r in self._roots)
            return f"it is outside the artifact paths ({roots})"
        return None

    def is_frozen(self, path: str) -> bool:
        return self.reason(path) is not None

    def check(self, path: str) -> None:
        """Raise a ``frozen-violation`` RefusalError when ``path`` may not change."""
        why = self.reason(path)
        if why is not None:
            raise RefusalError(
                "frozen-violation",
                "frozen-path",
                f"{path!r} is frozen because {why}; the loop may only edit files inside "
                f"the artifact paths that are not tests — propose a change to another file",
                path=path,
            )

    def __repr__(self) -> str:
        return (
            f"FrozenSet(patterns={list(self._patterns)!r}, "
            f"artifact_roots={list(self._roots)!r}, frozen_files={sorted(self._files)!r})"
        )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _self_and_ancestors(path: str) -> Iterable[str]:
    parts = path.split("/")
    for i in range(len(parts), 0, -1):
        yield "/".join(parts[:i])
