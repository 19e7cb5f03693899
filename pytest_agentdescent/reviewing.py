"""Re-verify an evolved change: does ``head`` really beat ``base``, touching only the artifact?

This is what ``agentdescent review --base REF --head REF`` runs, for a person
reviewing an evolution's pull request and as a required status check.  Two
questions, in this order:

1. **Scope.**  Every file that differs between the two commits (``git diff
   base..head`` through GitPython) must lie inside the artifact roots and
   must not be frozen: not a test module, a ``conftest.py``, the ini file, a
   file matching ``evolve_frozen``, nor a file pytest or Python would load on
   its own.  Any other change fails the review, naming the file, and nothing
   is evaluated.
2. **Evidence.**  The marked tasks and the guards run on both artifact
   versions in the sandbox — one :class:`SandboxedVerifier` whose workspaces
   copy the *base* commit, fed the base's and the head's artifact files read
   from the git trees — and the run's acceptance test decides whether the
   improvement reproduces: the policy the aggregator builds for the run's
   repeats (by default the paired test by betting), driven by the aggregator's
   own loop (:func:`agentdescent_core.aggregator.checks.run_acceptance`).  A
   guard failing at the head fails the review too.

Where the artifact roots come from, first found wins: the ``paths`` given
(``agentdescent review PATH...``); the base's ``evolve_paths``; else the
``Agentdescent-Root`` trailers of the newest ledger commit in ``base..head``
(the run that made the branch wrote them, so ``review`` of a branch evolved
with ``pytest --evolve skills/`` needs no paths).  The base's configuration
comes before the commits because the commits are the head's own claim: a
pull request may name any root in a trailer, but it cannot change what the
base configures.  Whatever the source, the base's frozen set (tests,
conftest, ini, ``evolve_frozen``) still applies.

What decides the rules is the base, never the head: the plan (roots, tasks,
guards, frozen set, settings) is collected at the base commit, so a pull
request cannot loosen the rules it is judged by, and no code of the head runs
outside the sandbox.  Collecting happens in a scratch clone (``git clone
--shared --no-checkout`` into a temporary directory, then a detached checkout
there): the user's working tree, index, HEAD and refs are never touched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentdescent_core.errors import AgentDescentError

if TYPE_CHECKING:
    import git

    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.stats.samples import AcceptanceDecision, TaskSamples
    from pytest_agentdescent.probe import ProbedPlan

__all__ = ["ReviewError", "ReviewResult", "ScopeViolation", "TaskRow", "review"]

Log = Callable[[str], None]

_CHANGE = {"A": "added", "D": "deleted", "M": "modified", "R": "renamed", "T": "type changed",
           "C": "copied"}


class ReviewError(AgentDescentError):
    """The review could not be carried out (a ref that is no commit, an unusable sandbox, ...).

    ``usage`` is True when the command line was at fault (exit 2), False when
    the repository or the machine was (exit 1).
    """

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class ScopeViolation:
    """A file the head changed that it may not change, and why."""

    path: str
    change: str
    reason: str


@dataclass(frozen=True)
class TaskRow:
    """One test's mean reward at the base and at the head; ``flip`` as the reports name it."""

    nodeid: str
    kind: str  # "train" | "holdout" | "guard"
    before: float
    after: float
    flip: str | None


@dataclass
class ReviewResult:
    """The review's findings; ``failures`` holds one sentence per reason to fail."""

    base: str
    head: str
    roots: tuple[str, ...] = ()
    roots_source: str = ""  # "paths", "evolve_paths" or "commit <sha>"
    changed: list[str] = field(default_factory=list)
    violations: list[ScopeViolation] = field(default_factory=list)
    rows: list[TaskRow] = field(default_factory=list)
    decision: AcceptanceDecision | None = None
    confidence: float | None = None
    repeats: tuple[int, int] | None = None  # (base, head) repeats per task
    sandbox: str | None = None
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def artifact_changed(self) -> bool:
        """Whether the head changes any file under the artifact roots."""
        return any(_inside(path, self.roots) for path in self.changed)

    def to_json(self) -> dict[str, Any]:
        decision = self.decision
        evaluation: dict[str, Any] | None = None
        if decision is not None:
            evaluation = {
                "reward_before": decision.reward_base,
                "reward_after": decision.reward_candidate,
                "p_improvement": decision.p_improvement,
                "p_value": decision.p_value,
                "threshold": decision.threshold,
                "confidence": self.confidence,
                "accepted": decision.accept,
                "policy": decision.policy,
                "reason": decision.reason,
                "repeats": ({"base": self.repeats[0], "head": self.repeats[1]}
                            if self.repeats else None),
                "sandbox": self.sandbox,
            }
        return {
            "ok": self.ok,
            "base": self.base,
            "head": self.head,
            "roots": list(self.roots),
            "roots_source": self.roots_source,
            "scope": {
                "ok": not self.violations,
                "artifact_changed": self.artifact_changed,
                "changed": list(self.changed),
                "violations": [{"path": v.path, "change": v.change, "reason": v.reason}
                               for v in self.violations],
            },
            "evaluation": evaluation,
            "tasks": [{"nodeid": r.nodeid, "kind": r.kind, "before": r.before,
                       "after": r.after, "flip": r.flip} for r in self.rows],
            "failures": list(self.failures),
            "warnings": list(self.warnings),
        }


def review(
    start: str | os.PathLike[str],
    base: str,
    head: str,
    *,
    paths: Sequence[str] = (),
    repeats: int | None = None,
    sandbox: str | None = None,
    pytest_args: Sequence[str] = (),
    log: Log | None = None,
) -> ReviewResult:
    """Review ``head`` against ``base`` in the repository holding ``start`` (the cwd).

    ``paths`` (relative to ``start``) replace the ini's ``evolve_paths`` as in
    ``pytest --evolve PATH``; ``repeats`` and ``sandbox`` default to the
    run's settings.  Raises :class:`ReviewError` when the review cannot be
    carried out; a review that ran and found a problem returns a result
    whose ``failures`` say what.
    """
    import git

    say: Log = log or (lambda _text: None)
    here = Path(os.path.realpath(start))
    try:
        repo = git.Repo(here, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ReviewError(f"{here} is not inside a git repository; run agentdescent review "
                          "in a checkout of the project", usage=True) from None
    try:
        if repo.working_tree_dir is None:
            raise ReviewError(f"{here} is in a bare repository; run agentdescent review in a "
                              "checkout", usage=True)
        root = Path(os.path.realpath(repo.working_tree_dir))
        base_commit = _commit(repo, base, "--base")
        head_commit = _commit(repo, head, "--head")
        result = ReviewResult(base=base_commit.hexsha, head=head_commit.hexsha)
        with tempfile.TemporaryDirectory(prefix="agentdescent-review-") as scratch_dir:
            scratch = Path(scratch_dir) / root.name
            say(f"collecting the plan at base {base_commit.hexsha[:12]} in a scratch clone")
            _scratch_clone(root, scratch, base_commit.hexsha)
            result.roots_source = "paths" if paths else "evolve_paths"
            try:
                plan = _plan_at_base(root, here, scratch, base_commit.hexsha, paths,
                                     pytest_args)
            except _NoPaths:
                named = _roots_from_commits(repo, base_commit, head_commit)
                if named is None:
                    raise ReviewError(
                        "no artifact paths: none were given, the base's ini sets no "
                        f"evolve_paths, and no agentdescent commit in {base}..{head} names "
                        "its roots (Agentdescent-Root trailers); give the artifact folders, "
                        "e.g. agentdescent review skills/ --base main, or set evolve_paths",
                        usage=True) from None
                roots, sha = named
                result.roots_source = f"commit {sha}"
                say(f"artifact roots {', '.join(roots)} from the Agentdescent-Root trailers of "
                    f"commit {sha[:12]} (no paths given, no evolve_paths at base)")
                plan = _plan_at_base(root, here, scratch, base_commit.hexsha,
                                     [str(root / r) for r in roots], pytest_args)
            result.roots = plan.roots
            _check_scope(result, plan, base_commit, head_commit)
            if result.failures:
                return result
            _evaluate(result, plan, scratch, base_commit, head_commit, repeats=repeats,
                      sandbox=sandbox, pytest_args=pytest_args, say=say)
        return result
    finally:
        repo.close()


# ---------------------------------------------------------------- the base's plan

def _commit(repo: git.Repo, ref: str, option: str) -> Any:
    import git

    try:
        return repo.commit(ref)
    except (git.BadName, git.BadObject, ValueError):
        raise ReviewError(f"{option} {ref!r} is not a commit of the repository at "
                          f"{repo.working_tree_dir}; give a branch, tag or sha (fetch it first, "
                          f"e.g. git fetch origin {ref})", usage=True) from None


class _NoPaths(Exception):
    """The base configures no artifact paths and none were given."""


def _scratch_clone(root: Path, scratch: Path, base: str) -> None:
    """A clone of ``root`` at ``scratch`` sharing its objects, checked out (detached) at base."""
    import git

    try:
        clone = git.Repo.clone_from(str(root), str(scratch), shared=True, no_checkout=True,
                                    quiet=True)
        try:
            clone.git.checkout("--quiet", "--detach", base)
        finally:
            clone.close()
    except git.GitCommandError as exc:
        raise ReviewError(f"could not check out base {base[:12]} in a scratch clone: "
                          f"{str(exc.stderr).strip()}") from None


def _roots_from_commits(repo: git.Repo, base: Any, head: Any
                        ) -> tuple[tuple[str, ...], str] | None:
    """The roots named by the newest ledger commit in ``base..head`` and its sha, or None.

    Only commits the tool made count (an ``agentdescent:`` subject with the
    ledger's trailers); a human's commits in between are passed over.  The
    root ``.`` (everything) is refused: it would let the head change any file.
    """
    import git

    from agentdescent_core.ledger.message import ROOT, parse_message

    try:
        commits = list(repo.iter_commits(f"{base.hexsha}..{head.hexsha}"))
    except git.GitCommandError:
        return None
    for commit in commits:  # newest first
        message = commit.message
        parsed = parse_message(message if isinstance(message, str) else message.decode())
        if parsed.version is None:
            continue
        roots = tuple(dict.fromkeys(r.strip().strip("/") for r in parsed.get_all(ROOT)
                                    if r.strip()))
        if not roots:
            continue
        if any(r in ("", ".") or r.startswith("/") or ".." in r.split("/") for r in roots):
            raise ReviewError(
                f"commit {commit.hexsha[:12]} names the artifact roots {', '.join(roots)}, "
                "which reach outside a folder of the repository; give the artifact folders as "
                "PATHS or set evolve_paths", usage=True)
        return roots, commit.hexsha
    return None


def _plan_at_base(root: Path, here: Path, scratch: Path, base: str,
                  paths: Sequence[str], pytest_args: Sequence[str]) -> ProbedPlan:
    """Collect at ``base`` in the scratch clone; :class:`_NoPaths` when nothing names roots."""
    from pytest_agentdescent.probe import ProbeError, probe_plan

    where = here.relative_to(root) if here != root else Path()
    cwd = scratch / where
    if not cwd.is_dir():
        raise ReviewError(f"the directory {where} does not exist at base {base[:12]}; run "
                          "agentdescent review from the project's directory")
    mapped: list[str] = []
    for given in paths:
        full = Path(os.path.realpath(here / given))
        try:
            rel = full.relative_to(root)
        except ValueError:
            raise ReviewError(f"path {given!r} lies outside the repository {root}; give the "
                              "artifact folder inside it", usage=True) from None
        mapped.append(str(scratch / rel))
    try:
        return probe_plan(cwd, paths=mapped, pytest_args=pytest_args)
    except ProbeError as exc:
        if exc.kind == "no-paths" and not paths:
            raise _NoPaths() from None
        raise ReviewError(f"pytest --evolve cannot collect at base {base[:12]} ({exc.kind} "
                          f"error): {exc.message}") from None


# ---------------------------------------------------------------- (a) scope

def _check_scope(result: ReviewResult, plan: ProbedPlan, base: Any, head: Any) -> None:
    from agentdescent_core.artifacts.paths import is_executable_config

    frozen = plan.frozen_set()
    changed: dict[str, str] = {}
    for diff in base.diff(head):
        change = _CHANGE.get(str(diff.change_type)[:1], str(diff.change_type))
        for path in (diff.a_path, diff.b_path):
            if path:
                changed.setdefault(path, change)
    result.changed = sorted(changed)
    for path in result.changed:
        reason = frozen.reason(path)
        if reason is None and is_executable_config(path):
            reason = "it is a file pytest or Python would load and execute on its own"
        if reason is not None:
            result.violations.append(ScopeViolation(path, changed[path], reason))
    for v in result.violations:
        result.failures.append(f"{v.path} ({v.change}) may not change: {v.reason}")
    if result.violations:
        roots = ", ".join(plan.roots)
        result.failures.append(
            f"head changes {len(result.violations)} file(s) outside what evolution may touch; "
            f"an evolved change edits only the artifact files under {roots} (tests, conftest, "
            "config and code stay as they are): drop those changes from the head")
    elif not any(_inside(path, plan.roots) for path in result.changed):
        result.failures.append(
            "head changes no artifact file against base, so there is no improvement to verify; "
            "check the --base and --head refs")


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


# ---------------------------------------------------------------- (b) evidence

def _evaluate(result: ReviewResult, plan: ProbedPlan, scratch: Path, base: Any, head: Any, *,
              repeats: int | None, sandbox: str | None, pytest_args: Sequence[str],
              say: Log) -> None:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.errors import RefusalError

    frozen = plan.frozen_set()
    tree = FileTree(plan.roots, frozen=frozen)
    try:
        base_state = tree.load_git(base.tree)
    except RefusalError as exc:
        raise ReviewError(f"the artifact cannot be read at base: {exc}") from None
    try:
        head_state = tree.load_git(head.tree)
    except RefusalError as exc:
        result.failures.append(f"the artifact cannot be read at head: {exc}")
        return
    if not plan.tasks:
        result.failures.append("no test is marked @pytest.mark.evolve at base, so there is "
                               "nothing to measure the improvement on")
        return
    backend = _backend(sandbox or str(_setting(plan, "sandbox")))
    result.sandbox = backend.name
    verifier = _verifier(plan, scratch, base.hexsha, tree, backend, result, pytest_args)
    try:
        _measure(result, plan, verifier, base_state, head_state, repeats, say)
    finally:
        verifier.close()


def _backend(name: str) -> Any:
    from pytest_agentdescent.sandboxing import usable_backend

    try:
        return usable_backend(name, option="--sandbox")
    except ValueError as exc:
        raise ReviewError(str(exc), usage=True) from None


def _verifier(plan: ProbedPlan, scratch: Path, base: str, tree: Any, backend: Any,
              result: ReviewResult, pytest_args: Sequence[str]) -> SandboxedVerifier:
    from agentdescent_core.sandbox.local import SandboxSetupError
    from pytest_agentdescent.sandboxing import open_verifier, plugin_args

    try:
        verifier, notes = open_verifier(
            scratch, base, plan.split(), tree=tree, frozen=plan.frozen_set(),
            backend=backend, cache=None, env_allow=tuple(_setting(plan, "env")),
            network=_setting(plan, "network"),
            test_timeout=float(_setting(plan, "test_timeout")),
            eval_concurrency=int(_setting(plan, "eval_concurrency")), subdir=plan.subdir,
            pytest_args=plugin_args(pytest_args, os.environ),
        )
    except (SandboxSetupError, ValueError) as exc:
        raise ReviewError(f"cannot set up the sandbox: {exc}") from None
    result.warnings.extend(notes)
    return verifier


def _measure(result: ReviewResult, plan: ProbedPlan, verifier: SandboxedVerifier,
             base_state: Mapping[str, str], head_state: Mapping[str, str],
             repeats: int | None, say: Log) -> None:
    from agentdescent_core.aggregator import AggregatorConfig
    from agentdescent_core.aggregator.checks import run_acceptance
    from agentdescent_core.stats.policies import Sequential, policy_for
    from agentdescent_core.stats.samples import PASS_THRESHOLD

    first = repeats if repeats is not None else int(_setting(plan, "repeats"))
    # The run's acceptance test: the policy the aggregator builds from its config,
    # driven by the aggregator's own loop, with the pull request's base as the base.
    config = AggregatorConfig(repeats=first)
    policy = policy_for(config.acceptance, config.repeats)
    split = verifier.split
    tasks = list(split.eval_tasks)
    if isinstance(policy, Sequential):  # one pair per task, then pairs where they tell
        say(f"evaluating {len(tasks)} tasks in pairs at base and head (sandbox "
            f"{verifier.backend.name})")
    else:
        say(f"evaluating {len(tasks)} tasks at base ({config.base_repeats} repeats each) and "
            f"at head ({config.repeats} at the first look; sandbox {verifier.backend.name})")
    run = run_acceptance(verifier, policy, base_state, head_state, tasks, config, version=0)
    for state, name in ((base_state, "base"), (head_state, "head")):
        if _unusable(result, verifier, state, name):
            return
    decision = result.decision = run.decision
    result.repeats = (_most_repeats(run.base), _most_repeats(run.candidate))
    alpha = getattr(policy, "alpha", None)
    result.confidence = 1.0 - float(alpha) if isinstance(alpha, float) else None
    held = set(split.held_out)
    result.rows = _rows(run.base, run.candidate, tasks, held)
    if not decision.accept:
        result.failures.append(f"the improvement does not reproduce: {decision.reason}")
    guards = list(split.guards)
    if guards:
        say(f"evaluating {len(guards)} guard(s) at base and head ({first} repeats each)")
        g_before = verifier.evaluate(base_state, guards, first)
        g_after = verifier.evaluate(head_state, guards, first)
        for row in _rows(g_before, g_after, guards, set(), kind="guard"):
            result.rows.append(row)
            if row.after < PASS_THRESHOLD:
                also = " (it fails at base too)" if row.before < PASS_THRESHOLD else ""
                result.failures.append(f"guard {row.nodeid} fails at head (mean reward "
                                       f"{row.after:.2f}){also}; guards must keep passing")


def _setting(plan: ProbedPlan, name: str) -> Any:
    """The base's setting ``name``, or its default where ``pytest_agentdescent.settings``
    defines it (a plan always carries every setting; the default is the fallback)."""
    from pytest_agentdescent.settings import EvolveSettings

    return plan.settings.get(name, getattr(EvolveSettings(), name))


def _most_repeats(samples: TaskSamples) -> int:
    """Runs of the busiest task: what the review reports as the repeats of a version."""
    return max(samples.repeats(t) for t in samples.tasks)


def _unusable(result: ReviewResult, verifier: SandboxedVerifier, state: Mapping[str, str],
              which: str) -> bool:
    problem = verifier.candidate_error(state)
    if problem is not None:
        result.failures.append(f"the tests do not run with the {which}'s artifact: {problem}")
        return True
    refusal = verifier.disqualification(state)
    if refusal is not None:
        did = "tampered with the test process" if refusal.category == "tamper" \
            else "changed frozen files"
        result.failures.append(f"running the tests with the {which}'s artifact {did} "
                               f"({refusal.category}): {refusal.message}")
        return True
    return False


def _rows(before: TaskSamples, after: TaskSamples, tasks: Sequence[str], held: set[str], *,
          kind: str | None = None) -> list[TaskRow]:
    """One row per task in ``tasks`` order; the flips are the reports' (``find_flips``)."""
    from agentdescent_core.stats.samples import find_flips

    flips = {f.nodeid: f.kind for f in find_flips(before, after)}
    return [TaskRow(nodeid, kind or ("holdout" if nodeid in held else "train"),
                    before.mean(nodeid), after.mean(nodeid), flips.get(nodeid))
            for nodeid in tasks]
