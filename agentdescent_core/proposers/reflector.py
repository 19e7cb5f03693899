"""The reflector prompt: what a model reads before it proposes an edit of the artifact.

Built from plain inputs (no pytest here) so any front end can use it: the
artifact files, the roots, a sentence saying what is frozen, the failing train
tasks and the proposals already rejected for them.  The prompt has to fit a
character budget, so the files compete for it in order of usefulness:

1. files a failure names (its path or file name appears in the assertion
   message or the captured output) — the model most likely has to edit those;
2. ``SKILL.md`` and other Markdown files — the instructions themselves;
3. everything else, listed with its size only.

A file that does not fit in what is left of the budget joins the listing, so
the model still knows it exists.  The wording lives in package data
(``templates/system.txt`` and ``templates/user.txt``) where a user can read
it; :func:`load_templates` takes an override (ini ``evolve_prompt``): a file
replaces the user template, a directory may hold either or both files.
Placeholders use ``string.Template`` syntax (``${failures}``) so the JSON
examples' braces need no escaping.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

#: Characters of the whole prompt (system + user): about 15k tokens.
DEFAULT_BUDGET = 60_000

#: The placeholders a template may use; anything else is an error naming it.
PLACEHOLDERS: tuple[str, ...] = ("roots", "frozen", "failures", "rejected", "files", "listing")

_MESSAGE_CHARS = 2_000
_OUTPUT_CHARS = 1_500
_SOURCE_CHARS = 3_000
_MAX_FAILURES = 6
_MAX_REJECTED = 8
_REJECTED_CHARS = 600


@dataclass(frozen=True)
class FailureInfo:
    """A failing train task: pytest's message, the captured output, the test's source."""

    nodeid: str
    message: str = ""
    output: str = ""
    source: str = ""


@dataclass(frozen=True)
class RejectedProposal:
    """A proposal already turned down for these tasks: what it did and why it failed."""

    summary: str
    reason: str


@dataclass(frozen=True)
class PromptInputs:
    """Everything the prompt is built from; ``budget`` caps its length in characters."""

    files: Mapping[str, str]
    roots: Sequence[str]
    failures: Sequence[FailureInfo]
    frozen: str = "tests, conftest.py, configuration and everything outside the roots"
    rejected: Sequence[RejectedProposal] = ()
    budget: int = DEFAULT_BUDGET


@dataclass(frozen=True)
class PromptTemplates:
    """The system and user templates, and where they came from (for error messages)."""

    system: str
    user: str
    origin: str = "package data"

    def check(self) -> None:
        """Raise ValueError naming a placeholder the templates use but the reflector lacks."""
        for name, text in (("system", self.system), ("user", self.user)):
            unknown, stray = _scan(text)
            if unknown:
                raise ValueError(
                    f"the {name} prompt template from {self.origin} uses unknown placeholder(s) "
                    f"{', '.join('${' + u + '}' for u in unknown)}; the available ones are "
                    + ", ".join("${" + p + "}" for p in PLACEHOLDERS)
                )
            if stray:
                raise ValueError(
                    f"the {name} prompt template from {self.origin} has a stray '$'; write $$ "
                    "for a literal dollar sign"
                )


def _scan(text: str) -> tuple[list[str], bool]:
    """Unknown placeholder names in ``text``, and whether it has an invalid ``$``."""
    unknown: list[str] = []
    stray = False
    for match in string.Template.pattern.finditer(text):
        name = match.group("named") or match.group("braced")
        if name and name not in PLACEHOLDERS and name not in unknown:
            unknown.append(name)
        if match.group("invalid") is not None:
            stray = True
    return unknown, stray


def _packaged(name: str) -> str:
    return (resources.files("agentdescent_core.proposers") / "templates" / name).read_text(
        encoding="utf-8")


def load_templates(override: str | os.PathLike[str] | None = None) -> PromptTemplates:
    """The packaged templates, or the override's (a user-template file or a directory).

    Raises ValueError when the override does not exist or its placeholders are wrong.
    """
    system, user = _packaged("system.txt"), _packaged("user.txt")
    origin = "package data"
    if override is not None:
        path = Path(override)
        if path.is_dir():
            found = False
            for name in ("system.txt", "user.txt"):
                candidate = path / name
                if candidate.is_file():
                    found = True
                    if name == "system.txt":
                        system = candidate.read_text(encoding="utf-8")
                    else:
                        user = candidate.read_text(encoding="utf-8")
            if not found:
                raise ValueError(
                    f"the prompt template folder {path} holds neither system.txt nor user.txt; "
                    "put one or both there, or point evolve_prompt at a single user template file"
                )
        elif path.is_file():
            user = path.read_text(encoding="utf-8")
        else:
            raise ValueError(
                f"the prompt template {path} does not exist; point evolve_prompt at a file "
                "(the user template) or a folder with system.txt / user.txt"
            )
        origin = str(path)
    templates = PromptTemplates(system=system, user=user, origin=origin)
    templates.check()
    return templates


# ---------------------------------------------------------------- building


def _clip(text: str, limit: int) -> str:
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n[... {len(text) - limit} more characters cut]"


def _fenced(text: str, lang: str = "") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


def _failures_text(failures: Sequence[FailureInfo]) -> str:
    if not failures:
        return "(none given)"
    parts: list[str] = []
    for failure in failures[:_MAX_FAILURES]:
        block = [f"### {failure.nodeid}", "", "Assertion message:",
                 _fenced(_clip(failure.message or "(no message)", _MESSAGE_CHARS))]
        if failure.output.strip():
            block += ["Captured output:", _fenced(_clip(failure.output, _OUTPUT_CHARS))]
        if failure.source.strip():
            block += ["Test source:", _fenced(_clip(failure.source, _SOURCE_CHARS), "python")]
        parts.append("\n".join(block))
    if len(failures) > _MAX_FAILURES:
        parts.append(f"(and {len(failures) - _MAX_FAILURES} more failing tests not shown)")
    return "\n\n".join(parts)


def _rejected_text(rejected: Sequence[RejectedProposal]) -> str:
    if not rejected:
        return "(none yet)"
    shown = list(rejected)[-_MAX_REJECTED:]
    return "\n".join(
        f"- {_clip(r.summary, _REJECTED_CHARS)}\n  rejected because: "
        f"{_clip(r.reason, _REJECTED_CHARS)}" for r in shown
    )


def _named(path: str, failures: Sequence[FailureInfo]) -> bool:
    """Does a failure's message or output mention ``path`` (or its file name)?"""
    name = PurePosixPath(path).name
    for failure in failures:
        text = f"{failure.message}\n{failure.output}"
        if path in text or (len(name) > 3 and name in text):
            return True
    return False


def order_files(files: Mapping[str, str], failures: Sequence[FailureInfo]
                ) -> tuple[list[str], list[str]]:
    """``(shown candidates in priority order, listing-only paths)``, both sorted within a tier."""
    named = sorted(p for p in files if _named(p, failures))
    docs = sorted(p for p in files if p not in named and p.lower().endswith((".md", ".mdx")))
    docs.sort(key=lambda p: PurePosixPath(p).name != "SKILL.md")  # stable: SKILL.md first
    rest = sorted(p for p in files if p not in named and p not in docs)
    return named + docs, rest


def _listing(paths: Sequence[str], files: Mapping[str, str], why: Mapping[str, str]) -> str:
    if not paths:
        return "(none)"
    return "\n".join(
        f"- {p} ({len(files[p].encode('utf-8'))} bytes){why.get(p, '')}" for p in paths
    )


def build_prompt(inputs: PromptInputs, templates: PromptTemplates | None = None
                 ) -> tuple[str, str]:
    """``(system, user)`` for one proposal, within ``inputs.budget`` characters where possible.

    The failures, the rejected proposals and the listing always appear; file
    contents fill what is left of the budget in priority order.
    """
    templates = templates if templates is not None else load_templates()
    fixed = {
        "roots": ", ".join(inputs.roots) or "(none)",
        "frozen": inputs.frozen,
        "failures": _failures_text(inputs.failures),
        "rejected": _rejected_text(inputs.rejected),
    }
    system = string.Template(templates.system).safe_substitute(fixed, files="", listing="")
    skeleton = string.Template(templates.user).safe_substitute(fixed, files="", listing="")
    files = inputs.files
    candidates, listed = order_files(files, inputs.failures)
    # Reserve room for the listing of every file, so dropping a file never overflows.
    room = inputs.budget - len(system) - len(skeleton) - sum(len(p) + 30 for p in files)
    shown: list[str] = []
    why: dict[str, str] = {}
    for path in candidates:
        block = f"### {path}\n{_fenced(files[path])}"
        if len(block) + 2 <= room:
            shown.append(block)
            room -= len(block) + 2
        else:
            listed.append(path)
            why[path] = " — not shown: too long for the prompt budget"
    listed.sort()
    user = string.Template(templates.user).safe_substitute(
        fixed,
        files="\n\n".join(shown) if shown else "(no file fits the prompt budget; see the list)",
        listing=_listing(listed, files, why),
    )
    return system, user
