"""The edit protocol: turning a model's answer into ``{path: new text | None}`` ops.

Models wrap JSON in prose and code fences, leave trailing commas, and put raw
newlines inside strings; none of that changes what they meant, so the parser
accepts it.  What it never guesses is *where* an edit goes: a ``search`` text
must occur exactly once in the current file, else the answer is refused with
the reason, which is fed back to the model on the next round.

Only the shape of the answer is checked here.  Whether a path may be written
(inside the artifact, not frozen, not ``..``, size) is the FileTree's job
(``FileTree.validate_ops`` / ``to_diff``), so both proposers and hooks are held
to one set of rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentdescent_core.artifacts.paths import normalise_path
from agentdescent_core.errors import RefusalError

EXPECTED_SHAPE = (
    '{"rationale": "<why this change helps>", "edits": ['
    '{"path": "<file>", "content": "<full new text>"} | '
    '{"path": "<file>", "delete": true} | '
    '{"path": "<file>", "search": "<exact text occurring once>", "replace": "<new text>"}]}'
)
"""The answer format, quoted in refusal messages so the model can correct itself."""

_DECODER = json.JSONDecoder(strict=False)  # raw newlines/tabs inside strings are fine
_OBJECT_START = re.compile(r"\{\s*[\"}]")  # where a JSON object can begin: {"... or {}
_MAX_STARTS = 200  # candidate object starts tried; bounds the work on brace-heavy prose
_SNIPPET = 60


@dataclass(frozen=True)
class EditProposal:
    """A parsed answer: the model's reason and the ops it implies, in edit order."""

    rationale: str
    ops: dict[str, str | None] = field(default_factory=dict)


def parse_edit_answer(text: str, files: Mapping[str, str]) -> EditProposal:
    """Parse a model answer against the current artifact ``files`` (``{path: text}``).

    Edits are applied in order to a working view of ``files``, so several
    ``search``/``replace`` edits of one file chain (each sees the result of the
    previous one).  A second ``content`` or ``delete`` edit of a path already
    edited is refused as ambiguous.  An empty ``edits`` list gives empty ops.
    Raises RefusalError(``invalid-proposal``, code) with code ``no-json``,
    ``bad-shape``, ``duplicate-path``, ``search-not-found`` or
    ``search-ambiguous``, or a path code from ``normalise_path``.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_edit_answer needs the answer text as str, got {type(text)}")
    answer = _find_answer(text)
    rationale = answer.get("rationale", "")
    if rationale is None:
        rationale = ""
    if not isinstance(rationale, str):
        raise _bad_shape(f'"rationale" is {_kind(rationale)}, not a string')
    edits = answer.get("edits")
    if not isinstance(edits, list):
        got = "missing" if "edits" not in answer else _kind(edits)
        raise _bad_shape(f'"edits" is {got}; it must be a list of edits')

    ops: dict[str, str | None] = {}
    for index, edit in enumerate(edits):
        path, op = _read_edit(index, edit)
        if op[0] == "search":
            current = ops[path] if path in ops else files.get(path)
            ops[path] = _apply_search(path, current, op[1], op[2])
            continue
        if path in ops:
            raise RefusalError(
                "invalid-proposal",
                "duplicate-path",
                f"edit {index} rewrites {path!r}, which an earlier edit already changed; send "
                f"one content or delete edit per file (search/replace edits may follow one)",
                path=path,
            )
        ops[path] = op[1]
    return EditProposal(rationale=rationale.strip(), ops=ops)


# ---------------------------------------------------------------------- finding the JSON


def _find_answer(text: str) -> dict[str, Any]:
    """The answer object: the first one with an ``edits`` key, else the first object."""
    first: dict[str, Any] | None = None
    for value in _json_objects(text):
        if "edits" in value:
            return value
        if first is None:
            first = value
    if first is not None:
        keys = ", ".join(repr(k) for k in list(first)[:5]) or "no keys"
        raise _bad_shape(f'the JSON object has {keys} but no "edits"')
    raise RefusalError(
        "invalid-proposal",
        "no-json",
        f"the answer contains no JSON object; answer with exactly one JSON object "
        f"(bare or in a ```json fence) of the form {EXPECTED_SHAPE}",
    )


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Top-level JSON objects found anywhere in ``text`` (prose and fences around them)."""
    pos = 0
    tried = 0
    while tried < _MAX_STARTS:
        match = _OBJECT_START.search(text, pos)
        if match is None:
            return
        tried += 1
        start = match.start()
        decoded = _decode_at(text, start)
        if decoded is None:
            pos = start + 1
            continue
        value, end = decoded
        pos = end
        if isinstance(value, dict):
            yield value


def _decode_at(text: str, start: int) -> tuple[Any, int] | None:
    """Decode the object at ``start``; retry without trailing commas. End index in ``text``."""
    try:
        return _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        pass
    dropped = _drop_trailing_commas(text, start)
    if dropped is None:
        return None
    fixed, mapping = dropped
    try:
        value, end = _DECODER.raw_decode(fixed)
    except json.JSONDecodeError:
        return None
    return value, mapping(end)


def _drop_trailing_commas(
    text: str, start: int
) -> tuple[str, Callable[[int], int]] | None:
    """``text[start:]`` without commas that directly precede ``}`` or ``]`` (outside strings).

    Returns the fixed text and a function mapping an index in it back to ``text``,
    or None when there was no trailing comma (the first decode error stands).
    """
    out: list[str] = []
    removed: list[int] = []  # indices in the fixed text where a comma was dropped
    in_string = False
    escaped = False
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                removed.append(len(out))
                i += 1
                continue
        out.append(ch)
        i += 1
    if not removed:
        return None

    def to_original(index: int) -> int:
        return start + index + sum(1 for r in removed if r < index)

    return "".join(out), to_original


# ---------------------------------------------------------------------- edits


def _read_edit(index: int, edit: object) -> tuple[str, tuple[str, Any, Any]]:
    """(normalised path, op) where op is ("content", text, _), ("delete", None, _) or
    ("search", search, replace)."""
    if not isinstance(edit, dict):
        raise _bad_shape(f"edit {index} is {_kind(edit)}, not an object")
    raw_path = edit.get("path")
    if not isinstance(raw_path, str) or not raw_path.strip():
        raise _bad_shape(f'edit {index} has no "path" string')
    path = normalise_path(raw_path.strip())
    has = [k for k in ("content", "delete", "search", "replace") if k in edit]
    if has == ["content"]:
        content = edit["content"]
        if not isinstance(content, str):
            raise _bad_shape(
                f'edit {index} ({path!r}): "content" is {_kind(content)}, not a string '
                f'(to remove the file send {{"path": ..., "delete": true}})',
                path,
            )
        return path, ("content", content, None)
    if has == ["delete"]:
        if edit["delete"] is not True:
            raise _bad_shape(f'edit {index} ({path!r}): "delete" must be true', path)
        return path, ("delete", None, None)
    if has == ["search", "replace"]:
        search, replace = edit["search"], edit["replace"]
        if not isinstance(search, str) or not isinstance(replace, str):
            raise _bad_shape(
                f'edit {index} ({path!r}): "search" and "replace" must both be strings', path
            )
        if not search:
            raise _bad_shape(
                f'edit {index} ({path!r}): "search" is empty; quote the exact text to replace, '
                f'or send the whole file as "content"',
                path,
            )
        return path, ("search", search, replace)
    found = ", ".join(f'"{k}"' for k in has) or "none of them"
    raise _bad_shape(
        f'edit {index} ({path!r}) must have exactly one of "content", "delete": true, or '
        f'"search" with "replace"; it has {found}',
        path,
    )


def _apply_search(path: str, current: str | None, search: str, replace: str) -> str:
    snippet = _snippet(search)
    if current is None:
        raise RefusalError(
            "invalid-proposal",
            "search-not-found",
            f"search {snippet} targets {path!r}, which does not exist; create the file with "
            f'"content" instead of "search"/"replace"',
            path=path,
        )
    first = current.find(search)
    if first < 0:
        raise RefusalError(
            "invalid-proposal",
            "search-not-found",
            f"search {snippet} does not occur in {path!r}; quote the current text exactly "
            f"(whitespace and line breaks included) or send the whole file as \"content\"",
            path=path,
        )
    if current.find(search, first + 1) >= 0:
        count = current.count(search)
        times = f"{count} times" if count > 1 else "more than once (overlapping)"
        raise RefusalError(
            "invalid-proposal",
            "search-ambiguous",
            f"search {snippet} occurs {times} in {path!r}; include enough surrounding text "
            f"that it matches exactly once",
            path=path,
        )
    return current[:first] + replace + current[first + len(search):]


def _snippet(text: str) -> str:
    short = text if len(text) <= _SNIPPET else text[:_SNIPPET] + "…"
    return repr(short)


def _kind(value: object) -> str:
    """The JSON name of a value's type, with its article: "an object", "a list", "null"."""
    if value is None:
        return "null"
    name = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _bad_shape(problem: str, path: str | None = None) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "bad-shape",
        f"the answer's JSON does not follow the edit protocol: {problem}; expected "
        f"{EXPECTED_SHAPE}",
        path=path,
    )
