"""From a collected pytest session to what an evolution needs: tasks, guards, paths, frozen set.

Everything here is decided before anything is evaluated, so ``--collect-only
--evolve`` can show it and a mistake (a typo in ``--evolve``, no marked test,
a rootdir outside the git repository) is a usage error before any child runs.

Paths: pytest names tests relative to its rootdir, the engine names files
relative to the git repository root.  The two differ when the project lives in
a subdirectory of its repository (a monorepo); :class:`RepoLayout` holds both
and converts.  Node ids stay rootdir-relative throughout (the child pytest
runs in the matching subdirectory of the workspace and prints them the same
way); artifact roots, test modules and frozen patterns become repo-relative.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentdescent_core.artifacts.paths import is_inside
from agentdescent_core.errors import RefusalError
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.governance import FrozenSet
from pytest_agentdescent.markers import is_guard, read_marker

#: Suites with fewer tasks get no hash-based holdout: a quarter of six tasks
#: is one or two tests, too few to measure acceptance on.
IMPLICIT_HOLDOUT_MIN_TASKS = 8


@dataclass(frozen=True)
class RepoLayout:
    """Where the git repository and the pytest rootdir are, relative to each other.

    ``root`` is the top of the working tree; ``subdir`` the rootdir relative
    to it ('' when they coincide); ``common_dir`` the repository's common git
    directory (where ``info/exclude`` lives, also for a linked worktree).
    """

    root: Path
    subdir: str
    common_dir: Path

    def repo_path(self, path: Path) -> str | None:
        """``path`` as a repo-relative posix path, or None when it lies outside the repository."""
        try:
            rel = Path(os.path.realpath(path)).relative_to(self.root)
        except ValueError:
            return None
        text = rel.as_posix()
        return "" if text == "." else text


@dataclass(frozen=True)
class EvolveTask:
    """One marked test case: its node id, weight and whether it is held out.

    ``explicit`` is True when the marker said ``holdout=True/False``; otherwise
    the stable hash of the node id decided.
    """

    nodeid: str
    weight: float = 1.0
    holdout: bool = False
    explicit: bool = False


@dataclass(frozen=True)
class EvolvePlan:
    """What one ``pytest --evolve`` run evolves, on which tasks, and what it may not touch."""

    layout: RepoLayout
    roots: tuple[str, ...]
    tasks: tuple[EvolveTask, ...]
    guards: tuple[str, ...]
    test_files: tuple[str, ...]
    frozen: FrozenSet
    holdout_fraction: float
    notes: tuple[str, ...] = ()
    unmarked: int = 0
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def train(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tasks if not t.holdout)

    @property
    def held_out(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tasks if t.holdout)

    def split(self) -> TaskSplit:
        return task_split(self.tasks, self.guards)


def task_split(tasks: Sequence[EvolveTask], guards: Sequence[str]) -> TaskSplit:
    """The engine's split of a run's marked tests (the plugin's and ``review``'s alike)."""
    weights = {t.nodeid: t.weight for t in tasks if t.weight != 1.0}
    # acceptance, target and patience look at every task; holdout only hides from the proposer
    return TaskSplit(train=tuple(t.nodeid for t in tasks if not t.holdout),
                     held_out=tuple(t.nodeid for t in tasks if t.holdout),
                     guards=tuple(guards), weights=weights, eval_on_all=True)


# ---------------------------------------------------------------- the repository

def find_layout(rootdir: Path) -> RepoLayout:
    """The git repository holding the pytest rootdir; a UsageError when there is none."""
    import git

    where = os.path.realpath(rootdir)
    try:
        out = git.Git(where).execute(
            ["git", "rev-parse", "--show-toplevel", "--git-common-dir"],
            with_extended_output=False, with_exceptions=True,
        )
    except git.GitCommandError as exc:
        raise pytest.UsageError(
            f"pytest --evolve needs a git repository, but the pytest rootdir {where} is not "
            f"inside one ({_first_line(exc.stderr)}); run `git init` there and commit your "
            "files, since every evolved version is a commit"
        ) from None
    lines = str(out).splitlines()
    if len(lines) < 2 or not lines[0].strip():
        raise pytest.UsageError(
            f"pytest --evolve needs a git working tree, but {where} is in a bare repository or "
            "inside .git; run pytest from a checkout"
        )
    root = Path(os.path.realpath(lines[0].strip()))
    common = Path(lines[1].strip())
    if not common.is_absolute():
        common = Path(where) / common
    try:
        rel = Path(where).relative_to(root).as_posix()
    except ValueError:  # pragma: no cover - git found the repository from inside it
        raise pytest.UsageError(
            f"the pytest rootdir {where} is not inside the git repository {root}"
        ) from None
    return RepoLayout(root=root, subdir="" if rel == "." else rel,
                      common_dir=Path(os.path.realpath(common)))


def _first_line(text: object) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[0] if lines else "git rev-parse failed"


def resolve_roots(paths: Sequence[str], layout: RepoLayout) -> tuple[str, ...]:
    """The artifact paths (absolute, as the settings hold them) as repo-relative roots.

    A UsageError names the path when it lies outside the repository, inside
    ``.git``, or contains the whole project (the rootdir): evolving the tests'
    own folder would make code and helpers evolvable too.
    """
    roots: list[str] = []
    rootdir = layout.root / layout.subdir if layout.subdir else layout.root
    project = layout.repo_path(rootdir) or ""
    for given in paths:
        rel = layout.repo_path(Path(given))
        if rel is None:
            raise pytest.UsageError(
                f"--evolve {given!r} resolves to {os.path.realpath(given)}, outside the git "
                f"repository {layout.root}; only files of the repository can evolve"
            )
        if rel == "" or is_inside(project, (rel,)):
            raise pytest.UsageError(
                f"--evolve {given!r} contains the whole project (the pytest rootdir "
                f"{rootdir}); point it at the folder or file that should evolve, e.g. skills/"
            )
        if rel.split("/")[0] == ".git":
            raise pytest.UsageError(f"--evolve {given!r} points into .git; git metadata "
                                    "never evolves")
        roots.append(rel)
    return tuple(dict.fromkeys(roots))


# ---------------------------------------------------------------- tasks

def holdout_draw(nodeid: str) -> float:
    """A number in [0, 1) fixed by the node id alone: the same on every machine and run."""
    digest = hashlib.sha256(nodeid.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def collect_tasks(items: Sequence[pytest.Item], holdout: float
                  ) -> tuple[list[EvolveTask], list[str], list[str]]:
    """Tasks, guards and notes (one-line warnings) from the collected items.

    Each parametrized case is its own task.  The marker's ``holdout`` wins;
    otherwise a node id is held out when its :func:`holdout_draw` falls below
    ``holdout`` — but only in suites of at least
    :data:`IMPLICIT_HOLDOUT_MIN_TASKS` tasks.
    """
    marked: list[tuple[str, float, bool | None]] = []
    guards: list[str] = []
    for item in items:
        marker = read_marker(item)
        if marker is not None:
            marked.append((item.nodeid, marker.weight, marker.holdout))
        if is_guard(item):
            guards.append(item.nodeid)
    notes: list[str] = []
    implicit = holdout > 0 and len(marked) >= IMPLICIT_HOLDOUT_MIN_TASKS
    if holdout > 0 and 0 < len(marked) < IMPLICIT_HOLDOUT_MIN_TASKS:
        notes.append(
            f"only {len(marked)} task(s) (< {IMPLICIT_HOLDOUT_MIN_TASKS}): no implicit holdout, "
            "since one or two held-out tests would measure nothing; mark tests "
            "@pytest.mark.evolve(holdout=True) to hold some out"
        )
    tasks = [
        EvolveTask(
            nodeid, weight,
            holdout=explicit if explicit is not None else (
                implicit and holdout_draw(nodeid) < holdout),
            explicit=explicit is not None,
        )
        for nodeid, weight, explicit in marked
    ]
    return tasks, list(dict.fromkeys(guards)), notes


def task_sources(items: Iterable[pytest.Item]) -> dict[str, str]:
    """The source of each marked test function, by node id (shown to the proposer)."""
    import inspect

    sources: dict[str, str] = {}
    for item in items:
        if read_marker(item) is None:
            continue
        obj = getattr(item, "obj", None)
        try:
            sources[item.nodeid] = inspect.getsource(obj) if obj is not None else ""
        except (OSError, TypeError):
            sources[item.nodeid] = ""
    return sources


def collect_plan(
    session: pytest.Session,
    *,
    layout: RepoLayout,
    roots: tuple[str, ...],
    holdout: float,
    frozen_patterns: Sequence[str],
) -> EvolvePlan:
    """Everything about the run that collection decides (no evaluation)."""
    items = list(session.items)
    tasks, guards, notes = collect_tasks(items, holdout)
    if tasks and all(t.holdout for t in tasks):
        raise pytest.UsageError(
            f"all {len(tasks)} evolve tasks are held out, so the proposer would see no failure "
            "to learn from; mark some tests @pytest.mark.evolve(holdout=False) or lower "
            "evolve_holdout"
        )
    files: dict[str, None] = {}
    for item in items:
        rel = layout.repo_path(Path(item.path))
        if rel:
            files[rel] = None
    inipath = session.config.inipath
    if inipath is not None:
        rel = layout.repo_path(Path(inipath))
        if rel:
            files[rel] = None
    test_files = tuple(files)
    patterns = list(frozen_patterns)  # repo-relative, as FrozenSet takes them
    # a new module inside a root that pytest would collect is test code too
    python_files = [str(p) for p in session.config.getini("python_files") or ()]
    patterns += [f"{root}/**/{glob}" for root in roots for glob in python_files
                 if "/" not in glob]
    try:
        frozen = FrozenSet(patterns, artifact_roots=roots, frozen_files=test_files)
    except (ValueError, TypeError, RefusalError) as exc:
        raise pytest.UsageError(f"--evolve-frozen (ini evolve_frozen): {exc}") from None
    unmarked = sum(1 for item in items if read_marker(item) is None and not is_guard(item))
    return EvolvePlan(
        layout=layout, roots=roots, tasks=tuple(tasks), guards=tuple(guards),
        test_files=test_files, frozen=frozen, holdout_fraction=holdout,
        notes=tuple(notes), unmarked=unmarked, sources=task_sources(items),
    )


# ---------------------------------------------------------------- state directory

def ensure_state_dir(layout: RepoLayout, state_dir: str) -> Path:
    """Create the state directory; list it in ``.git/info/exclude`` the first time.

    The exclude file is git's per-clone ignore list, never committed, so
    ``git status`` stays as it was without touching a tracked ``.gitignore``.
    A state directory outside the repository is created but not listed.
    """
    path = Path(state_dir) if os.path.isabs(state_dir) else layout.root / state_dir
    path.mkdir(parents=True, exist_ok=True)
    rel = layout.repo_path(path)
    if rel:
        exclude = layout.common_dir / "info" / "exclude"
        line = f"/{rel}/"
        try:
            current = exclude.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        if line not in (entry.strip() for entry in current.splitlines()):
            exclude.parent.mkdir(parents=True, exist_ok=True)
            prefix = "" if not current or current.endswith("\n") else "\n"
            with exclude.open("a", encoding="utf-8") as handle:
                handle.write(f"{prefix}# pytest-agentdescent state (reports, eval cache)\n"
                             f"{line}\n")
    return path
