"""Find the file pytest reads its configuration from, read ini keys, add keys by minimal edits.

``agentdescent init`` writes tuning keys into whatever file the project already
uses, and the pre-commit dry run reads ``evolve_paths`` from it.  Both must agree
with pytest about *which* file that is, so :func:`find_inifile` follows pytest's
own search (per directory: ``pytest.toml``, ``.pytest.toml``, ``pytest.ini``,
``.pytest.ini``, ``pyproject.toml`` with a pytest table, ``tox.ini`` with
``[pytest]``, ``setup.cfg`` with ``[tool:pytest]``; nearest directory first).
Edits keep a user's comments, ordering and formatting: ini files are edited
line by line, TOML files through ``tomlkit``; only the keys being set change.
Tables pytest reads in TOML mode (``pytest.toml``'s ``[pytest]``, pyproject's
``[tool.pytest]``) get typed values (``evolve_rounds = 10``): pytest 9 refuses a
string there for an integer key.
"""

from __future__ import annotations

import configparser
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["IniFile", "Value", "find_inifile", "new_pytest_ini", "set_keys"]

#: (file name, section header) in pytest's order of preference within one directory.
_CANDIDATES: tuple[tuple[str, str], ...] = (
    ("pytest.toml", "pytest"),
    (".pytest.toml", "pytest"),
    ("pytest.ini", "pytest"),
    (".pytest.ini", "pytest"),
    ("pyproject.toml", "tool.pytest.ini_options"),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)


@dataclass(frozen=True)
class IniFile:
    """A pytest configuration file and the section (table) holding pytest's keys.

    ``section`` is ``tool.pytest.ini_options`` or ``tool.pytest`` for
    ``pyproject.toml``, ``pytest`` for ``pytest.toml`` (TOML syntax), else an ini
    section name.
    """

    path: Path
    section: str

    @property
    def is_toml(self) -> bool:
        return self.path.suffix == ".toml"

    @property
    def typed(self) -> bool:
        """Whether pytest reads this table in TOML mode, with native value types."""
        return self.is_toml and self.section in ("tool.pytest", "pytest")

    def read(self) -> dict[str, Any]:
        """The keys of the pytest section, as the file gives them (strings for ini files)."""
        text = self.path.read_text(encoding="utf-8")
        if self.is_toml:
            table: Any = tomllib.loads(text)
            for part in self.section.split("."):
                table = table.get(part, {}) if isinstance(table, dict) else {}
            return {k: v for k, v in table.items() if not isinstance(v, dict)}
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text, source=str(self.path))
        return dict(parser[self.section]) if parser.has_section(self.section) else {}

    def paths(self, key: str) -> list[str]:
        """An ``args``-type key (such as ``evolve_paths``) as a list of words."""
        raw = self.read().get(key)
        if raw is None:
            return []
        if isinstance(raw, list):
            return [str(item) for item in raw]
        return shlex.split(str(raw))


def _toml_section(path: Path) -> str | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    tool = data.get("tool", {})
    pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest_table, dict):
        return None
    if isinstance(pytest_table.get("ini_options"), dict):
        return "tool.pytest.ini_options"
    return "tool.pytest" if pytest_table else None


def _has_ini_section(path: Path, section: str) -> bool:
    pattern = re.compile(rf"^\[{re.escape(section)}\]\s*$", re.M)
    try:
        return bool(pattern.search(path.read_text(encoding="utf-8")))
    except OSError:
        return False


def find_inifile(start: Path, stop: Path | None = None) -> IniFile | None:
    """The configuration file pytest would use when run from ``start``.

    Directories are searched from ``start`` upwards, ending at ``stop`` (the
    repository root, say) when given.  None when no file qualifies.
    """
    current = start.resolve()
    end = stop.resolve() if stop is not None else None
    while True:
        for name, section in _CANDIDATES:
            path = current / name
            if not path.is_file():
                continue
            if name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
                return IniFile(path, section)  # pytest uses these even when empty
            if name == "pyproject.toml":
                found = _toml_section(path)
                if found is not None:
                    return IniFile(path, found)
            elif _has_ini_section(path, section):
                return IniFile(path, section)
        if current == end or current.parent == current:
            return None
        current = current.parent


def new_pytest_ini(directory: Path) -> IniFile:
    """A ``pytest.ini`` with an empty ``[pytest]`` section (for a project with none)."""
    path = directory / "pytest.ini"
    path.write_text("[pytest]\n", encoding="utf-8")
    return IniFile(path, "pytest")


# ---------------------------------------------------------------- editing

#: A value to write: text, a list of words (``args`` / ``linelist`` keys) or a number.
Value = str | int | float | bool | Sequence[str]


def _words(value: Value) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (str, int, float)):
        return [str(value)]
    return [str(word) for word in value]


def _ini_line(key: str, value: Value) -> str:
    return f"{key} = {' '.join(_words(value))}"


def _section_bounds(lines: list[str], section: str) -> tuple[int, int] | None:
    """Index of the section's header line and of the line after its last line."""
    header = re.compile(rf"^\s*\[{re.escape(section)}\]\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if any_header.match(lines[i])),
               len(lines))
    return start, end


def _key_span(lines: list[str], key: str, start: int, end: int) -> tuple[int, int] | None:
    """Lines [first, last) holding ``key`` and its continuation lines inside the section."""
    pattern = re.compile(rf"^{re.escape(key)}\s*[=:]")
    first = next((i for i in range(start + 1, end) if pattern.match(lines[i])), None)
    if first is None:
        return None
    last = first + 1
    while last < end and lines[last][:1] in (" ", "\t") and lines[last].strip():
        last += 1
    return first, last


def _set_ini_keys(ini: IniFile, values: Mapping[str, Value], force: bool
                  ) -> tuple[list[str], list[str]]:
    text = ini.path.read_text(encoding="utf-8")
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += newline
    bounds = _section_bounds(lines, ini.section)
    if bounds is None:
        lines += ([newline] if lines else []) + [f"[{ini.section}]{newline}"]
        bounds = (len(lines) - 1, len(lines))
    start, end = bounds
    present = [key for key in values if _key_span(lines, key, start, end) is not None]
    if present and not force:
        return [], present
    appended: list[str] = []
    for key, value in values.items():
        rendered = [_ini_line(key, value) + newline]
        span = _key_span(lines, key, start, end)
        if span is not None:
            first, last = span
            lines[first:last] = rendered
            end += len(rendered) - (last - first)
        else:
            appended += rendered
    if appended:
        insert_at = end
        while insert_at > start + 1 and not lines[insert_at - 1].strip():
            insert_at -= 1
        lines[insert_at:insert_at] = appended
    ini.path.write_text("".join(lines), encoding="utf-8", newline="")
    return list(values), present


def _toml_value(ini: IniFile, value: Value) -> object:
    """``value`` as the table wants it: native types in TOML mode, else a string."""
    if not ini.typed:
        return " ".join(_words(value))  # [tool.pytest.ini_options] holds ini strings
    if isinstance(value, (str, int, float, bool)):
        return value
    return list(value)


def _set_toml_keys(ini: IniFile, values: Mapping[str, Value], force: bool
                   ) -> tuple[list[str], list[str]]:
    doc = tomlkit.parse(ini.path.read_text(encoding="utf-8"))
    table: Any = doc
    for part in ini.section.split("."):
        if part not in table:
            table[part] = tomlkit.table(is_super_table=part != ini.section.split(".")[-1])
        table = table[part]
    present = [key for key in values if key in table]
    if present and not force:
        return [], present
    for key, value in values.items():
        table[key] = _toml_value(ini, value)
    ini.path.write_text(tomlkit.dumps(doc), encoding="utf-8", newline="")
    return list(values), present


def set_keys(ini: IniFile, values: Mapping[str, Value], *, force: bool
             ) -> tuple[list[str], list[str]]:
    """Write ``values`` into the pytest section of ``ini``, touching only their keys.

    Returns (keys written, keys already present and left alone).  Without
    ``force`` nothing is written when any key is present (the caller reports
    them); with it present keys are replaced in place and new ones appended
    at the section's end.
    """
    if ini.is_toml:
        return _set_toml_keys(ini, values, force)
    return _set_ini_keys(ini, values, force)
