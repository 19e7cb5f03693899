"""Pure checks on the paths a proposal names, before anything touches a disk.

A proposer is untrusted text: it may name ``/etc/passwd``, ``..\\..\\x``, a path
with a NUL byte, or a ``conftest.py`` that pytest would import on its own and
so run code outside every sandbox rule.  These helpers turn a path into its one
canonical posix repo-relative form or refuse it with a ``RefusalError`` whose
``code`` says which rule fired.

Backslashes are read as separators (a Windows checkout would), so
``skills\\a.md`` is ``skills/a.md`` and ``C:\\x`` is an absolute path.

Names must also survive every place a path goes next: git, SQLite, JSON,
the terminal and the user's checkout, which may be on a case-insensitive file
system.  So a name that is not valid UTF-8 (``os.fsdecode`` turns such bytes
into lone surrogates), a segment longer than ``NAME_MAX`` (255 bytes) or a
path longer than :data:`MAX_PATH_BYTES` is refused here, and
:func:`shown_path` is the one way a name found on disk (which nobody
validated: a candidate's script may have created it) is put into a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentdescent_core.errors import RefusalError

EXECUTABLE_CONFIG_NAMES: frozenset[str] = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        "pyproject.toml",
        "setup.cfg",
        "tox.ini",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
"""File names pytest or the interpreter load by themselves, at any depth."""

_EXECUTABLE_SUFFIXES: tuple[str, ...] = (".pth",)

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x01-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")

MAX_NAME_BYTES = 255
"""Longest file name (one path segment) in UTF-8 bytes: ``NAME_MAX`` of Linux and macOS."""

MAX_PATH_BYTES = 1024
"""Longest repo-relative path in UTF-8 bytes.

Well below ``PATH_MAX`` (4096) because the path is joined to a workspace root
or a user's checkout, and Windows checkouts stop at 260 characters anyway.
"""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as os.fsdecode keeps it
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFF:
        return f"\\u{code:04x}"
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}")


def shown_path(path: str) -> str:
    """``path`` as printable, valid UTF-8 text: safe for messages, SQLite, JSON and git.

    Bytes that were not UTF-8 show as ``\\xff``, control characters and line
    breaks as ``\\n`` / ``\\x1b`` (as ``repr`` shows them); any other text,
    backslashes included, is unchanged.  Use it for every name read from a disk
    a candidate could write to.
    """
    return _UNSAFE.sub(_escape, path)


def refuse(category: str, code: str, path: str, problem: str, remedy: str) -> RefusalError:
    """Build a RefusalError whose message names the path, the problem and the fix."""
    shown = shown_path(path) if isinstance(path, str) else repr(path)
    return RefusalError(category, code, f"path '{shown}' {problem}; {remedy}", path=shown)


def normalise_path(path: str) -> str:
    """Canonical posix repo-relative form of ``path`` (``a//./b/`` → ``a/b``).

    Refuses (category ``invalid-proposal``) anything that is not a relative path
    inside the repository: empty, absolute (``/x``, ``C:\\x``, ``C:x``,
    ``\\\\server\\share``), containing ``..``, a NUL byte or another control
    character, or a ``.git`` segment.
    """
    if not isinstance(path, str):
        raise RefusalError(
            "invalid-proposal",
            "empty-path",
            f"path must be a string, got {path!r}; give a repo-relative path such as "
            f"'skills/name/SKILL.md'",
        )
    if "\x00" in path:
        raise refuse(
            "invalid-proposal", "nul-byte", path, "contains a NUL byte",
            "remove it; file names cannot contain NUL",
        )
    if _CONTROL.search(path):
        raise refuse(
            "invalid-proposal", "control-character", path, "contains a control character",
            "use a plain file name",
        )
    if _SURROGATE.search(path):
        raise refuse(
            "invalid-proposal", "not-utf8-name", path, "is not valid UTF-8",
            "use a file name of UTF-8 text; git, reports and other checkouts need one",
        )
    text = path.replace("\\", "/")
    if text.startswith("/") or _DRIVE.match(text):
        raise refuse(
            "invalid-proposal", "absolute-path", path, "is absolute",
            "give a path relative to the repository root, e.g. 'skills/name/SKILL.md'",
        )
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if not segments:
        raise refuse(
            "invalid-proposal", "empty-path", path, "names no file",
            "give a repo-relative file path such as 'skills/name/SKILL.md'",
        )
    if ".." in segments:
        raise refuse(
            "invalid-proposal", "parent-traversal", path, "contains a '..' segment",
            "give the path relative to the repository root without '..'",
        )
    if any(s.casefold() == ".git" for s in segments):
        raise refuse(
            "invalid-proposal", "git-internal", path, "points into a .git directory",
            "edit ordinary files only; git metadata is never part of an artifact",
        )
    long = next((s for s in segments if len(s.encode("utf-8")) > MAX_NAME_BYTES), None)
    if long is not None:
        raise refuse(
            "invalid-proposal", "name-too-long", path,
            f"has a name of {len(long.encode('utf-8'))} bytes, more than the "
            f"{MAX_NAME_BYTES} a file system allows",
            "use a shorter file name",
        )
    normal = "/".join(segments)
    if len(normal.encode("utf-8")) > MAX_PATH_BYTES:
        raise refuse(
            "invalid-proposal", "path-too-long", path,
            f"is {len(normal.encode('utf-8'))} bytes long, more than the {MAX_PATH_BYTES} "
            f"allowed",
            "use a shallower folder layout or shorter names",
        )
    return normal


def case_collision(
    paths: Iterable[str], written: Iterable[str], existing: Iterable[str] = ()
) -> tuple[str, str] | None:
    """Two spellings that name one file on a case-insensitive file system, or None.

    ``paths`` is every file of the artifact after the proposal, ``written``
    the ones the proposal writes; a folder counts too (``Skills/a.md`` and
    ``skills/b.md``).  macOS and Windows checkouts would hold only one of the two,
    so a proposal that creates such a pair cannot be checked out as committed.
    A pair already present in ``existing`` (the artifact before the proposal:
    a Linux repository may hold one) is not the proposal's doing and passes.
    Returns ``(written path, the other spelling)``.
    """
    before = {p for path in existing for p in _prefixes(path)}
    spellings: dict[str, set[str]] = {}
    for path in paths:
        for prefix in _prefixes(path):
            spellings.setdefault(prefix.casefold(), set()).add(prefix)
    for path in written:
        for prefix in _prefixes(path):
            others = sorted(spellings.get(prefix.casefold(), set()) - {prefix})
            fresh = [o for o in others if not (prefix in before and o in before)]
            if fresh:
                return path, fresh[0]
    return None


def _prefixes(path: str) -> Iterable[str]:
    parts = path.split("/")
    return ("/".join(parts[:i]) for i in range(1, len(parts) + 1))


def normalise_root(root: str) -> str:
    """Canonical form of an artifact root; the repository root itself is refused.

    Evolving the whole repository would make the tests, the source and the
    configuration evolvable, which is exactly what the frozen set prevents.
    """
    if isinstance(root, str) and root.strip() in (".", "./", ""):
        raise RefusalError(
            "invalid-proposal",
            "empty-path",
            f"artifact root {root!r} is the repository root; name the folder or file that "
            f"should evolve, e.g. 'skills' or 'AGENTS.md'",
            path=root,
        )
    return normalise_path(root)


def is_executable_config(path: str) -> bool:
    """True for a file pytest or Python would load on its own (compared case-blind).

    Case-blind because on macOS and Windows ``Conftest.py`` *is* ``conftest.py``.
    """
    name = path.rsplit("/", 1)[-1].casefold()
    return name in EXECUTABLE_CONFIG_NAMES or name.endswith(_EXECUTABLE_SUFFIXES)


def check_not_executable_config(path: str) -> None:
    if is_executable_config(path):
        raise refuse(
            "invalid-proposal", "executable-config", path,
            "is a file pytest or Python would load and execute on its own",
            "put the content in an ordinary file of the artifact instead",
        )


def validate_file_path(path: str) -> str:
    """``normalise_path`` plus the rules for a file an artifact may contain."""
    if isinstance(path, str) and path.replace("\\", "/").endswith("/") and path.strip("/\\"):
        raise refuse(
            "invalid-proposal", "directory-path", path, "ends with '/', so it names a directory",
            "name a file; a directory is created by writing a file inside it",
        )
    normal = normalise_path(path)
    check_not_executable_config(normal)
    return normal


def is_inside(path: str, roots: Iterable[str]) -> bool:
    """True when normalised ``path`` equals a root or lies below one."""
    return any(path == root or path.startswith(root + "/") for root in roots)
