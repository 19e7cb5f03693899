"""``agentdescent init``: set a repository up for scheduled evolution in GitHub Actions.

It writes ``.github/workflows/agentdescent.yml`` (the Action on a schedule, with
the permissions and concurrency group a session needs) and adds the tuning keys
to the project's pytest configuration, in whichever file the project already
uses.  The artifact roots go into the workflow, not into ``evolve_paths``:
that key would turn every plain ``pytest`` run of the project into an
evolution.  Nothing existing is overwritten without ``--force``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import click

from pytest_agentdescent.cli.inifile import (
    IniFile,
    Value,
    find_inifile,
    new_pytest_ini,
    set_keys,
)
from pytest_agentdescent.cli.project import repo_root
from pytest_agentdescent.settings import EvolveSettings

__all__ = ["ACTION_REF", "DEFAULT_SCHEDULE", "WORKFLOW_PATH", "init", "render_workflow"]

WORKFLOW_PATH = Path(".github/workflows/agentdescent.yml")
#: The Action as a workflow refers to it; ``--action`` points elsewhere (a fork, a tag).
ACTION_REF = "pytest-agentdescent/pytest-agentdescent@v0"
#: Mondays 04:17 UTC: off the hour, when GitHub's scheduler is least loaded.
DEFAULT_SCHEDULE = "17 4 * * 1"

_KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


def _yaml(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text)


def render_workflow(*, paths: Sequence[str], schedule: str, model: str | None,
                    action: str = ACTION_REF, python_version: str = "3.12") -> str:
    """The text of ``.github/workflows/agentdescent.yml``."""
    provider = model.partition(":")[0] if model else None
    variable = _KEY_VARIABLES.get(provider or "")
    if variable:
        env_block = (f"        env:\n"
                     f"          # a repository secret (Settings > Secrets and variables)\n"
                     f"          {variable}: ${{{{ secrets.{variable} }}}}\n")
    else:
        env_block = ("        # With a model, pass its key from a repository secret:\n"
                     "        # env:\n"
                     "        #   ANTHROPIC_API_KEY: ${{ secrets.ANTHROPIC_API_KEY }}\n")
    return (
        "# Written by `agentdescent init`. One scheduled job is one evolution session: it\n"
        "# resumes from the agentdescent/* branches, evolves the artifact files, and opens\n"
        "# or updates a single pull request. See docs/ci.md of pytest-agentdescent.\n"
        "name: agentdescent\n"
        "\n"
        "on:\n"
        "  schedule:\n"
        f"    - cron: {_yaml(schedule)}\n"
        "  workflow_dispatch:\n"
        "\n"
        "permissions:\n"
        "  contents: write        # push the agentdescent/* branches and session refs\n"
        "  pull-requests: write   # open or update the pull request\n"
        "\n"
        "# One session at a time; a queued one waits instead of cancelling a running one.\n"
        "concurrency:\n"
        "  group: agentdescent\n"
        "  cancel-in-progress: false\n"
        "\n"
        "jobs:\n"
        "  evolve:\n"
        "    runs-on: ubuntu-latest\n"
        "    timeout-minutes: 120\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "        with:\n"
        "          fetch-depth: 0   # the ledger needs history to carry evolved files onto main\n"
        "      - uses: actions/setup-python@v5\n"
        "        with:\n"
        f"          python-version: {_yaml(python_version)}\n"
        "      # Install what your tests import; the Action's environment sees these packages.\n"
        "      # - run: python -m pip install -r requirements.txt\n"
        "      - id: agentdescent\n"
        f"        uses: {action}\n"
        "        with:\n"
        f"          paths: {_yaml(' '.join(paths))}\n"
        f"{env_block}"
        "      - name: Result\n"
        "        shell: bash\n"
        "        env:\n"
        "          OPERATION: ${{ steps.agentdescent.outputs.pull-request-operation }}\n"
        "          URL: ${{ steps.agentdescent.outputs.pull-request-url }}\n"
        "          BEFORE: ${{ steps.agentdescent.outputs.reward-before }}\n"
        "          AFTER: ${{ steps.agentdescent.outputs.reward-after }}\n"
        '        run: echo "reward $BEFORE -> $AFTER; pull request $OPERATION $URL"\n'
    )


def _check_cron(schedule: str) -> str:
    fields = schedule.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise click.BadParameter(
            f"{schedule!r} is not a cron expression of 5 fields "
            f"(minute hour day month weekday), e.g. {DEFAULT_SCHEDULE!r}",
            param_hint="--schedule")
    return " ".join(fields)


def _ini_values(rounds: int, model: str | None) -> dict[str, Value]:
    values: dict[str, Value] = {"evolve_rounds": rounds}
    if model:
        values["evolve_model"] = model
    return values


@click.command("init")
@click.option("--paths", "paths", multiple=True, default=("skills/",), show_default=True,
              metavar="PATH", help="Artifact root to evolve (repeatable), relative to here.")
@click.option("--schedule", default=DEFAULT_SCHEDULE, show_default=True, metavar="CRON",
              help="When the workflow runs (cron, UTC).")
@click.option("--model", default=None, metavar="PROVIDER:MODEL",
              help="The proposing model (anthropic:MODEL or openai:MODEL); written as "
                   "evolve_model, and its API key is passed from a repository secret.")
@click.option("--rounds", default=EvolveSettings.rounds, show_default=True,
              type=click.IntRange(min=0),
              help="evolve_rounds written to the pytest configuration.")
@click.option("--action", "action", default=ACTION_REF, show_default=True, metavar="OWNER/REPO@REF",
              help="The Action the workflow uses.")
@click.option("--force", is_flag=True, help="Overwrite an existing workflow and existing keys.")
def init(paths: tuple[str, ...], schedule: str, model: str | None, rounds: int, action: str,
         force: bool) -> None:
    """Write the scheduled workflow and the pytest ini defaults.

    Exit codes: 0 written, 1 something exists already (use --force) or a path is
    missing, 2 usage.
    """
    cron = _check_cron(schedule)
    if model is not None:
        provider, sep, name = model.partition(":")
        if not sep or provider not in _KEY_VARIABLES or not name.strip():
            raise click.BadParameter(f"{model!r} is not anthropic:MODEL or openai:MODEL",
                                     param_hint="--model")
    here = Path.cwd().resolve()
    root = repo_root(here)
    rel_paths: list[str] = []
    for entry in paths:
        target = (here / entry).resolve()
        if not target.exists():
            raise click.ClickException(
                f"artifact root {entry} does not exist in {here}; pass the folder or file to "
                "evolve with --paths (e.g. --paths skills/ --paths AGENTS.md)")
        rel = target.relative_to(root).as_posix() if target.is_relative_to(root) else None
        if rel is None:
            raise click.ClickException(f"artifact root {entry} is outside the repository {root}")
        rel_paths.append(rel + ("/" if target.is_dir() else ""))

    workflow = root / WORKFLOW_PATH
    ini: IniFile | None = find_inifile(here, root)
    values = _ini_values(rounds, model)
    problems: list[str] = []
    if workflow.exists() and not force:
        problems.append(f"{WORKFLOW_PATH} exists")
    if ini is not None and not force:
        existing = ini.read()
        taken = [key for key in values if key in existing]
        if taken:
            problems.append(f"{', '.join(taken)} already set in {ini.path.relative_to(root)}")
    if problems:
        raise click.ClickException(
            "; ".join(problems) + " — nothing was written; pass --force to overwrite")

    workflow.parent.mkdir(parents=True, exist_ok=True)
    workflow.write_text(render_workflow(paths=rel_paths, schedule=cron, model=model,
                                        action=action), encoding="utf-8")
    click.echo(f"wrote {WORKFLOW_PATH}")
    if ini is None:
        ini = new_pytest_ini(here)
    written, _ = set_keys(ini, values, force=True)
    where = ini.path.relative_to(root).as_posix()
    click.echo(f"set {', '.join(written)} in {where} [{ini.section}]")
    secret = (f"add {_KEY_VARIABLES[model.partition(':')[0]]} as a repository secret, "
              if model else "")
    click.echo(f"next: check the setup with `agentdescent check {' '.join(rel_paths)}`, commit "
               f"both files, {secret}and allow GitHub Actions to create pull requests "
               "(see docs/ci.md)", err=True)
