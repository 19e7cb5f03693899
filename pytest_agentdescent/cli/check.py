"""``agentdescent check``: is this repository ready for ``pytest --evolve``?  Fast, no model.

It is the pre-commit hook, so it must take seconds and never call a model or
run a test: it collects (through :mod:`pytest_agentdescent.probe`, exactly as a
run would) and inspects files.  A problem is something that would make a run
refuse to start, or evolve nothing, or evolve the wrong thing:

* the configuration is invalid (a bad option or ini value, a path that does
  not exist or lies outside the repository, no artifact path at all);
* the tests do not collect, or no test is marked ``@pytest.mark.evolve``;
* an artifact root holds a test module or a ``conftest.py`` (test code never
  evolves: it is frozen wherever it lives, and its place is outside the roots);
* the artifact cannot be loaded (a symlink, a binary or oversized file);
* the frozen set leaves nothing to evolve (a root that holds only test code,
  frozen by default, is named as such: ``evolve_frozen`` is blamed only when
  one of its patterns is what froze the files);
* there is no proposer (no ``pytest_evolve_propose`` hook, no model) while
  rounds are asked for: ``pytest --evolve`` refuses that, in the same words.

Each problem is one line on stderr naming the thing and the fix; warnings
(notes of the plugin, frozen patterns that match nothing) are lines too but do
not fail.  Exit 0 when there is no problem, 1 otherwise, 2 for a usage error
of the command itself.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from pytest_agentdescent.cli._common import PytestArgsCommand, pytest_args
from pytest_agentdescent.probe import ProbedPlan, ProbeError, probe_plan

__all__ = ["CheckResult", "Problem", "check", "check_project"]

_SHOWN = 5


@dataclass(frozen=True)
class Problem:
    """One thing wrong: ``what`` names it (a file, a setting), ``message`` says why and the fix."""

    what: str
    message: str

    def line(self) -> str:
        return f"{self.what}: {self.message}"


@dataclass
class CheckResult:
    """Everything ``check`` found; ``plan`` is None when collection failed."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: ProbedPlan | None = None
    files: list[str] = field(default_factory=list)
    evolvable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "ok": self.ok,
            "problems": [{"what": p.what, "message": p.message} for p in self.problems],
            "warnings": list(self.warnings),
            "roots": list(plan.roots) if plan else [],
            "files": list(self.files),
            "evolvable": list(self.evolvable),
            "tasks": len(plan.tasks) if plan else 0,
            "train": len(plan.train) if plan else 0,
            "holdout": len(plan.held_out) if plan else 0,
            "guards": list(plan.guards) if plan else [],
            "frozen_patterns": list(plan.frozen_patterns) if plan else [],
            "subdir": plan.subdir if plan else None,
        }


def check_project(cwd: str | os.PathLike[str], *, paths: tuple[str, ...] = (),
                  pytest_args: tuple[str, ...] = ()) -> CheckResult:
    """Run every check from ``cwd`` as ``pytest --evolve PATHS`` would see the project."""
    result = CheckResult()
    try:
        plan = probe_plan(cwd, paths=paths, pytest_args=pytest_args)
    except ProbeError as exc:
        result.problems.extend(_probe_problems(exc))
        return result
    result.plan = plan
    result.warnings.extend(plan.notes)
    result.problems.extend(_proposer_problems(plan))
    if not plan.tasks:
        result.problems.append(Problem(
            "tasks", "no test is marked @pytest.mark.evolve, so there is nothing to optimize; "
            "mark the tests whose outcome is the agent's reward (and check -k/-m selections)"))
    files = _files_under(plan.root, plan.roots)
    result.files = files
    for root in plan.roots:
        if not any(_inside(f, root) for f in files):
            result.problems.append(Problem(
                root, "the artifact root holds no file (or only ignored ones); add the skill, "
                "prompt or AGENTS.md it should evolve, or point evolve_paths elsewhere"))
    tests_only = _test_only_roots(plan, files)
    result.problems.extend(tests_only)
    skipped = {p.what for p in tests_only}
    result.problems.extend(_test_code_inside(
        plan, [f for f in files if not any(_inside(f, root) for root in skipped)]))
    result.evolvable, problems = _evolvable(plan, files, explained=bool(tests_only))
    result.problems.extend(problems)
    result.warnings.extend(_frozen_warnings(plan, files))
    return result


# ---------------------------------------------------------------- the checks

def _probe_problems(exc: ProbeError) -> list[Problem]:
    if exc.kind == "collection" and exc.errors:
        return [Problem(nodeid or "collection",
                        f"does not collect: {_summary(message)}; fix it so that "
                        "`pytest --collect-only` passes")
                for nodeid, message in exc.errors]
    what = {"usage": "configuration", "no-paths": "evolve_paths"}.get(exc.kind, "pytest")
    return [Problem(what, " ".join(exc.message.split()))]


def _proposer_problems(plan: ProbedPlan) -> list[Problem]:
    """The run's own refusal when nothing would propose: no hook, no model, rounds > 0."""
    from pytest_agentdescent.proposer import missing_proposer_message

    settings = plan.settings
    rounds = settings.get("rounds", 1)
    if plan.proposers or settings.get("model") or (isinstance(rounds, int) and rounds <= 0):
        return []
    return [Problem("proposer", missing_proposer_message()
                    + " (--evolve-rounds 0 measures the baseline only and needs none)")]


def _summary(message: str) -> str:
    """The ``E   ...`` lines of pytest's report (the error itself), else its last line."""
    errors = [line[1:].strip() for line in message.splitlines() if line.startswith("E ")]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return " ".join(errors) if errors else (lines[-1] if lines else "collection failed")


def _files_under(root: Path, roots: tuple[str, ...]) -> list[str]:
    """Tracked and untracked (not ignored) files under the roots, repo-relative."""
    import git

    if not roots:
        return []
    out = git.Git(str(root)).execute(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *roots],
        with_extended_output=False, with_exceptions=True)
    listed = sorted(set(filter(None, str(out).split("\0"))))
    return [rel for rel in listed if os.path.lexists(root / rel)]


def _test_code_inside(plan: ProbedPlan, files: list[str]) -> list[Problem]:
    collected = set(plan.test_files)
    problems: list[Problem] = []
    for rel in files:
        name = rel.rsplit("/", 1)[-1]
        root = next((r for r in plan.roots if _inside(rel, r)), plan.roots[0])
        if name.casefold() == "conftest.py":
            problems.append(Problem(rel, (
                f"a conftest.py inside the artifact root {root} is test code, which is frozen "
                f"and never evolves; move it out of {root} (e.g. to the tests folder)")))
        elif rel in collected or any(fnmatch.fnmatch(name, glob) for glob in plan.python_files):
            problems.append(Problem(rel, (
                f"a test module inside the artifact root {root}; tests are frozen and never "
                f"evolve, so move it out of {root} (e.g. to tests/)")))
    return problems


def _user_frozen(plan: ProbedPlan, rel: str) -> str | None:
    """The configured evolve_frozen / --evolve-frozen pattern that matches ``rel``, if any."""
    from agentdescent_core.governance import compile_glob

    for pattern in (str(p) for p in plan.settings.get("frozen", ()) or ()):
        if compile_glob(pattern.strip("/")).fullmatch(rel):
            return pattern
    return None


def _test_only_roots(plan: ProbedPlan, files: list[str]) -> list[Problem]:
    """Roots that hold test code and nothing else that may evolve (``check tests/``).

    Such files are frozen by default, whatever the configuration says, so the
    fix is another path, not a narrower ``evolve_frozen``; a root whose files a
    configured pattern froze is left to :func:`_evolvable`, which names it.
    """
    frozen = plan.frozen_set()
    problems: list[Problem] = []
    for root in plan.roots:
        inside = [f for f in files if _inside(f, root)]
        if not inside or any(not frozen.is_frozen(f) or _user_frozen(plan, f) for f in inside):
            continue
        problems.append(Problem(root, (
            "holds only test code, which is frozen by default (test modules, conftest.py "
            "files and the pytest configuration never evolve, whatever evolve_frozen says), "
            "so nothing under it can evolve; give the folder of what the agent reads instead "
            "(its skill, prompt or AGENTS.md), e.g. `agentdescent check skills/`, "
            "and keep the tests outside it")))
    return problems


def _evolvable(plan: ProbedPlan, files: list[str], *,
               explained: bool = False) -> tuple[list[str], list[Problem]]:
    """The files a run could change, and why the artifact cannot load, if it cannot.

    ``explained``: a root holding only test code was reported already, so an
    empty frozen set is not reported again.
    """
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.errors import RefusalError

    frozen = plan.frozen_set()
    try:
        state = FileTree(plan.roots, frozen=frozen).load_disk(plan.root)
    except RefusalError as exc:
        return [], [Problem(exc.path or "artifact", f"{exc}")]
    evolvable = sorted(state)
    if files and not evolvable and not explained:
        reasons = [f"{rel} ({frozen.reason(rel) or 'not an artifact file'})"
                   for rel in files[:_SHOWN]]
        more = f" and {len(files) - _SHOWN} more" if len(files) > _SHOWN else ""
        configured = sorted({p for p in map(lambda rel: _user_frozen(plan, rel), files) if p})
        fix = (f"narrow the configured evolve_frozen / --evolve-frozen globs "
               f"({', '.join(repr(p) for p in configured)})" if configured else
               "these are frozen by default (test modules, conftest.py files and the pytest "
               "configuration never evolve); point the artifact paths at the agent's skill, "
               "prompt or AGENTS.md instead")
        return [], [Problem("frozen set", (
            "every file under the artifact roots is frozen, so nothing can evolve: "
            + "; ".join(reasons) + more + "; " + fix))]
    return evolvable, []


def _frozen_warnings(plan: ProbedPlan, files: list[str]) -> list[str]:
    """User frozen patterns that match nothing, or lie outside every root (no effect)."""
    from agentdescent_core.governance import compile_glob

    warnings: list[str] = []
    user_patterns = [str(p) for p in plan.settings.get("frozen", ()) or ()]
    for pattern in user_patterns:
        regex = compile_glob(pattern.strip("/"))
        if not any(regex.fullmatch(rel) for rel in files):
            inside = any(pattern.startswith(root + "/") or pattern == root
                         for root in plan.roots)
            why = ("matches no file under the artifact roots" if inside else
                   "lies outside the artifact roots, where every file is frozen already")
            warnings.append(f"frozen pattern {pattern!r} {why}; it has no effect")
    return warnings


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


# ---------------------------------------------------------------- the command

@click.command(cls=PytestArgsCommand)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def check(paths: tuple[str, ...], as_json: bool) -> None:
    """Check that PATHS (default: the ini's evolve_paths) are ready to evolve. No model.

    Configuration valid, artifact roots exist, tasks collect, no artifact file
    is a test module or conftest.py, the frozen set leaves something to evolve.
    One line per problem on stderr; exit 0 ok, 1 problems found.
    Arguments after `--` go to the collecting pytest (e.g. `-- -c ci.ini`).
    """
    from pytest_agentdescent.terminal import counted

    result = check_project(Path.cwd(), paths=paths, pytest_args=pytest_args())
    for warning in result.warnings:
        click.echo(f"agentdescent check: warning: {warning}", err=True)
    for problem in result.problems:
        click.echo(f"agentdescent check: {problem.line()}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    elif result.ok and result.plan is not None:
        plan = result.plan
        guards = len(plan.guards)
        click.echo(f"ok: artifact {', '.join(plan.roots)} "
                   f"({counted(len(result.evolvable), 'evolvable file')}); "
                   f"{counted(len(plan.tasks), 'task')} ({len(plan.train)} train, "
                   f"{len(plan.held_out)} holdout); {counted(guards, 'guard')}")
    if not result.ok:
        click.echo(f"agentdescent check: {counted(len(result.problems), 'problem')} found",
                   err=True)
        raise SystemExit(1)
