"""Secrets scrubbed by value: what a candidate printed never reaches anything we keep.

Keeping ``GITHUB_TOKEN`` out of a child's environment is not enough: under
``local`` a script can read it from an ancestor's ``/proc/<pid>/environ``, and
``ANTHROPIC_API_KEY`` is passed to the child on purpose (the agent needs it).
Whatever the child prints comes back in its records, and from there it would
reach the eval cache, the proposer's context, ``report.json``, a commit or a
pull request.  So every text that leaves a child, and every report, commit
message and PR body, goes through a :class:`Redactor`, which replaces the value
of every secret variable by ``[REDACTED:NAME]``.

Which variables are secret: every :data:`~agentdescent_core.sandbox.env.NEVER_PASSED`
name, and every variable whose name looks like a credential (``*_KEY``,
``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``, ``*_PAT``).  Besides the plain
value, its base64 (standard and URL-safe, at every byte alignment, so a
secret embedded in a longer encoded text is found too), hex and URL-quoted
forms are masked.  A transformation beyond those (reversed, split, XOR-ed)
is not recognisable by value; nothing here claims it is.

Values shorter than :data:`MIN_SECRET_CHARS` characters are not scrubbed:
``DEBUG_KEY=1`` would otherwise mask every "1" in every report.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, TypeVar

from agentdescent_core.sandbox.env import is_never_passed

#: Names that look like credentials (fnmatch, matched upper-cased).
SECRET_NAME_PATTERNS: tuple[str, ...] = ("*_KEY", "*_TOKEN", "*SECRET*", "*PASSWORD*", "*_PAT")
#: Shorter values are never scrubbed (too many false hits).
MIN_SECRET_CHARS = 8


def is_secret_name(name: str) -> bool:
    """Is the variable ``name`` a secret whose value must never be stored?"""
    upper = name.upper()
    return is_never_passed(name) or any(fnmatch.fnmatchcase(upper, p)
                                        for p in SECRET_NAME_PATTERNS)


def _forms(value: str) -> set[str]:
    """The plain value and the encodings of it that a script might print instead."""
    raw = value.encode("utf-8", "surrogateescape")
    forms = {value, raw.hex(), raw.hex().upper(), urllib.parse.quote(value, safe="")}
    for shift in range(3):  # base64 of the value at each byte alignment in a longer text
        encoded = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        first = -(-8 * shift // 6)  # the first character that no unknown byte touches
        last = (8 * (shift + len(raw))) // 6
        core = encoded[first:last]
        forms.add(core)
        forms.add(core.replace("+", "-").replace("/", "_"))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


class Redactor:
    """Replaces every form of every secret value in a text by ``[REDACTED:NAME]``."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        masks: dict[str, str] = {}
        for name, value in sorted(secrets.items()):
            if not isinstance(value, str) or len(value) < MIN_SECRET_CHARS:
                continue
            for form in _forms(value):
                masks.setdefault(form, f"[REDACTED:{name}]")
        self._masks = masks
        alternatives = sorted(masks, key=len, reverse=True)  # the longest form wins
        self._pattern = re.compile("|".join(map(re.escape, alternatives))) if masks else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Redactor:
        """The secrets of ``env`` (default ``os.environ``)."""
        source = os.environ if env is None else env
        return cls({name: value for name, value in source.items() if is_secret_name(name)})

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda match: self._masks[match.group(0)], text)


def redact(text: str) -> str:
    """``text`` with the secrets of this process's environment masked.

    For what leaves the controller once (a report, a commit message, a PR
    body); a verifier keeps one :class:`Redactor` for its many records.
    """
    return Redactor.from_env()(text)


_T = TypeVar("_T")


def redact_data(data: _T, redactor: Redactor | None = None) -> _T:
    """``data`` (JSON-like: dicts, lists, strings) with every string scrubbed, keys included."""
    scrub = Redactor.from_env() if redactor is None else redactor
    if not scrub:
        return data
    return _walk(data, scrub)  # type: ignore[no-any-return]


def _walk(value: Any, scrub: Redactor) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {_walk(k, scrub): _walk(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, scrub) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, scrub) for v in value)
    return value
