"""``agentdescent review``: re-verify an evolved change before it is merged.

The command is a thin shell over :func:`pytest_agentdescent.reviewing.review`:
it prints the per-test table and the acceptance numbers on stdout (or one
JSON object with ``--json``), progress and every reason to fail on stderr,
and exits 0 when the head only changes artifact files and its improvement
reproduces with every guard passing, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from agentdescent_core.sandbox.spec import BACKEND_NAMES
from pytest_agentdescent.cli._common import PytestArgsCommand, pytest_args
from pytest_agentdescent.reviewing import ReviewError, ReviewResult, review as run_review
from pytest_agentdescent.settings import EvolveSettings

__all__ = ["render_review", "review"]


def render_review(result: ReviewResult) -> list[str]:
    """The human-readable review: scope, per-test table, numbers, verdict."""
    lines = [f"review  base {result.base[:12]} -> head {result.head[:12]}"]
    roots = ", ".join(result.roots) or "(none)"
    if result.violations:
        lines.append(f"scope   FAILED: {len(result.violations)} of {len(result.changed)} changed "
                     f"file(s) lie outside what may evolve ({roots})")
        lines += [f"  {v.change:<9} {v.path}  ({v.reason})" for v in result.violations]
    else:
        lines.append(f"scope   ok: {len(result.changed)} changed file(s), all evolvable "
                     f"under {roots}")
    if result.roots_source.startswith("commit "):
        lines.append(f"roots   from the Agentdescent-Root trailers of commit "
                     f"{result.roots_source.split()[1][:12]}")
    decision = result.decision
    if result.rows:
        width = max(len(r.nodeid) for r in result.rows)
        lines.append(f"  {'test':<{width}}  {'kind':<7}  before  after  flip")
        for r in result.rows:
            lines.append(f"  {r.nodeid:<{width}}  {r.kind:<7}  {r.before:6.3f}  {r.after:5.3f}"
                         f"  {r.flip or ''}".rstrip())
    if decision is not None:
        p_value = "n/a" if decision.p_value is None else f"{decision.p_value:.3g}"
        confidence = ("" if result.confidence is None
                      else f" (confidence {result.confidence:.1%})")
        repeats = (f"; repeats base {result.repeats[0]}, head {result.repeats[1]}"
                   if result.repeats else "")
        lines.append(f"reward  {decision.reward_base:.3f} -> {decision.reward_candidate:.3f}; "
                     f"P(improvement) {decision.p_improvement:.2f}; p={p_value} vs "
                     f"{decision.threshold:.3g}{confidence}")
        lines.append(f"sandbox {result.sandbox}{repeats}")
    lines.append("result  PASSED" if result.ok else f"result  FAILED ({len(result.failures)} "
                 "reason(s) on stderr)")
    return lines


@click.command(cls=PytestArgsCommand)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--base", "base", required=True, metavar="REF",
              help="The commit the change is judged against (e.g. main).")
@click.option("--head", "head", default="HEAD", show_default=True, metavar="REF",
              help="The evolved commit (e.g. agentdescent/stable or the PR's head).")
@click.option("--repeats", type=click.IntRange(min=1), default=None,
              help="Runs of every task at the head's first look (default: evolve_repeats).")
@click.option("--sandbox", type=click.Choice(BACKEND_NAMES), default=None,
              help=f"Where the tests run (default: evolve_sandbox, else {EvolveSettings.sandbox}).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def review(paths: tuple[str, ...], base: str, head: str, repeats: int | None,
           sandbox: str | None, as_json: bool) -> None:
    """Verify that HEAD only changes artifact files and really beats BASE.

    Fails (exit 1), naming the files, when HEAD changes anything outside the
    artifact roots or any frozen file (tests, conftest, ini, evolve_frozen).
    Otherwise runs the marked tasks and guards on both versions in the sandbox
    and fails when the improvement does not reproduce at the configured
    confidence or a guard fails. PATHS default to the ini's evolve_paths at
    BASE, else to the roots the tool's own commits in BASE..HEAD name (their
    Agentdescent-Root trailers); the rules come from BASE. Never touches the
    working tree, index or HEAD.
    """
    def log(text: str) -> None:
        click.echo(f"agentdescent review: {text}", err=True)

    try:
        result = run_review(Path.cwd(), base, head, paths=paths, repeats=repeats,
                            sandbox=sandbox, pytest_args=pytest_args(), log=log)
    except ReviewError as exc:
        if exc.usage:
            raise click.UsageError(str(exc)) from None
        click.echo(f"agentdescent review: error: {exc}", err=True)
        raise SystemExit(1) from None
    for warning in result.warnings:
        log(f"warning: {warning}")
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        for line in render_review(result):
            click.echo(line)
    for failure in result.failures:
        click.echo(f"agentdescent review: FAILED: {failure}", err=True)
    if not result.ok:
        raise SystemExit(1)
