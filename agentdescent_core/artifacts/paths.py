"""Pure checks on the paths a proposal names, before anything touches a disk.

A proposer is untrusted text: it may name ``/etc/passwd``, ``..\\..\\x``, a path
with a NUL byte, or a ``conftest.py`` that pytest would import on its own and
so run code outside every sandbox rule.  These helpers turn a path into its one
canonical posix repo-relative form or refuse it with a ``RefusalError`` whose
``code`` says which rule fired.

Backslashes are read as separators (a Windows checkout would), so
``skills\\a.md`` is ``skills/a.md`` and ``C:\\x`` is an absolute path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentdescent_core.errors import RefusalError

__all__ = [
    "EXECUTABLE_CONFIG_NAMES",
    "check_not_executable_config",
    "is_executable_config",
    "is_inside",
    "normalise_path",
    "normalise_root",
    "refuse",
    "validate_file_path",
]

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


def refuse(category: str, code: str, path: str, problem: str, remedy: str) -> RefusalError:
    """Build a RefusalError whose message names the path, the problem and the fix."""
    return RefusalError(category, code, f"path {path!r} {problem}; {remedy}", path=path)


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
    return "/".join(segments)


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
