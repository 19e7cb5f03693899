"""``agentdescent init``: set a repository up for scheduled evolution in GitHub Actions.

It writes ``.github/workflows/agentdescent.yml`` (the Action on a schedule, with
the permissions and concurrency group a session needs) and adds the tuning keys
to the project's pytest configuration, in whichever file the project already
uses.  The artifact roots go into the workflow, not into ``evolve_paths``:
that key would turn every plain ``pytest`` run of the project into an
evolution.  Nothing existing is overwritten without ``--force``.

The workflow keeps the eval cache and the model-answer store between sessions
with ``actions/cache`` (a runner starts with an empty disk): restored before the
Action from the last session whose frozen files (tests, conftests, the pytest
configuration) hash the same, and saved after it even when the session failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import click

from agentdescent_core.evaluation.cache import EVAL_CACHE_FILE, KEY_FILE_SUFFIX
from agentdescent_core.governance import ALWAYS_FROZEN_PATTERNS
from agentdescent_core.proposers.llm_cache import LLM_CACHE_FILE
from pytest_agentdescent.cli.inifile import (
    _CANDIDATES as _CONFIG_FILES,
    IniFile,
    Value,
    find_inifile,
    new_pytest_ini,
    set_keys,
)
from pytest_agentdescent.cli.project import DEFAULT_STATE_DIR, repo_root, state_dir
from pytest_agentdescent.settings import EvolveSettings

__all__ = [
    "ACTION_REF",
    "CACHED_FILES",
    "CACHE_ACTION",
    "DEFAULT_SCHEDULE",
    "WORKFLOW_PATH",
    "cache_paths",
    "frozen_globs",
    "init",
    "render_workflow",
]

WORKFLOW_PATH = Path(".github/workflows/agentdescent.yml")
#: The Action as a workflow refers to it; ``--action`` points elsewhere (a fork, a tag).
#: ``main`` until the first release is tagged: no tag exists to point at yet.
ACTION_REF = "pytest-agentdescent/pytest-agentdescent@main"
_UNTAGGED_NOTE = ("        # @main until the first release is tagged; "
                  "pin a commit SHA to freeze it\n")
#: Mondays 04:17 UTC: off the hour, when GitHub's scheduler is least loaded.
DEFAULT_SCHEDULE = "17 4 * * 1"

#: actions/cache, pinned by commit (the tag can move; the commit cannot).  The
#: workflow uses its ``restore`` and ``save`` halves so a failed session still saves.
CACHE_ACTION = "actions/cache"
CACHE_ACTION_SHA = "27d5ce7f107fe9357f9df03efb73ab90386fccae"
CACHE_ACTION_VERSION = "v5.0.5"
#: What the workflow caches, relative to the state directory: the eval cache, the
#: key its rows are signed with (a local MAC key, not a credential: without it
#: the restored rows do not verify and every test runs again), and the model
#: answers.  Nothing else of the state directory travels.
CACHED_FILES: tuple[str, ...] = (EVAL_CACHE_FILE, EVAL_CACHE_FILE + KEY_FILE_SUFFIX,
                                 LLM_CACHE_FILE)
#: pytest's default ``python_files``: the test modules the frozen hash covers.
_DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")

_KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


def _yaml(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text)


def _as_list(raw: object) -> list[str]:
    """An ini value (a line list, a TOML array, or absent) as its non-empty strings."""
    if raw is None:
        return []
    items = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return [str(item).strip() for item in items if str(item).strip()]


def frozen_globs(python_files: Sequence[str] = _DEFAULT_PYTHON_FILES,
                 frozen: Sequence[str] = ()) -> tuple[str, ...]:
    """The ``hashFiles`` patterns of the cache key: what the frozen set covers by default.

    Conftests (always frozen), the test modules pytest collects (``python_files``,
    at any depth), every file pytest may read its configuration from, and the
    project's own ``evolve_frozen`` globs.  A change to any of them changes the
    key, so the next session starts from an empty cache rather than from results
    measured against other tests.  (The eval cache itself also keys each result
    by the hash of the whole frozen tree, so a restored row is never wrong; this
    key keeps stale rows from piling up.)
    """
    globs: dict[str, None] = dict.fromkeys(ALWAYS_FROZEN_PATTERNS)
    for glob in python_files:
        globs[glob if glob.startswith("**/") else f"**/{glob}"] = None
    for name, _section in _CONFIG_FILES:
        globs[f"**/{name}"] = None
    for glob in frozen:
        if not glob.startswith("!"):  # a leading ! would exclude files from the hash
            globs[glob] = None
    return tuple(globs)


def cache_paths(state: str = DEFAULT_STATE_DIR) -> tuple[str, ...]:
    """The cached files as the workflow lists them (``state``: the state dir, repo-relative)."""
    base = state.rstrip("/") or "."
    return tuple(f"{base}/{name}" for name in CACHED_FILES)


def _hash_expression(globs: Sequence[str]) -> str:
    quoted = ", ".join("'" + glob.replace("'", "''") + "'" for glob in globs)
    return f"hashFiles({quoted})"


def _cache_steps(state: str, globs: Sequence[str]) -> tuple[str, str]:
    """The restore step (before the Action) and the save step (after it, always)."""
    listed = "".join(f"            {path}\n" for path in cache_paths(state))
    prefix = f"agentdescent-${{{{ runner.os }}}}-${{{{ {_hash_expression(globs)} }}}}-"
    pin = f"@{CACHE_ACTION_SHA}  # {CACHE_ACTION_VERSION}"
    restore = (
        "      # The eval cache and the model answers of the last session with the same\n"
        "      # frozen files (tests, conftests, pytest configuration); a changed test\n"
        "      # starts afresh. A cache key is immutable, so each run saves a new one.\n"
        "      - name: Restore the agentdescent caches\n"
        "        id: agentdescent-cache\n"
        f"        uses: {CACHE_ACTION}/restore{pin}\n"
        "        with:\n"
        "          path: |\n"
        f"{listed}"
        f"          key: {prefix}${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}\n"
        "          restore-keys: |\n"
        f"            {prefix}\n"
    )
    save = (
        "      # Saved even when the session failed: its paid model answers are kept.\n"
        "      - name: Save the agentdescent caches\n"
        "        if: always() && steps.agentdescent-cache.outputs.cache-primary-key != ''\n"
        f"        uses: {CACHE_ACTION}/save{pin}\n"
        "        with:\n"
        "          path: |\n"
        f"{listed}"
        "          key: ${{ steps.agentdescent-cache.outputs.cache-primary-key }}\n"
    )
    return restore, save


def render_workflow(*, paths: Sequence[str], schedule: str, model: str | None,
                    action: str = ACTION_REF, python_version: str = "3.12",
                    state: str = DEFAULT_STATE_DIR,
                    cache_globs: Sequence[str] | None = None) -> str:
    """The text of ``.github/workflows/agentdescent.yml``.

    ``state`` is the state directory as the workflow names it (repo-relative,
    or absolute); ``cache_globs`` the ``hashFiles`` patterns of the cache key
    (default :func:`frozen_globs` of pytest's default test modules).
    """
    restore, save = _cache_steps(state, frozen_globs() if cache_globs is None else cache_globs)
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
        f"{restore}"
        "      - id: agentdescent\n"
        f"{_UNTAGGED_NOTE if action == ACTION_REF else ''}"
        f"        uses: {action}\n"
        "        with:\n"
        f"          paths: {_yaml(' '.join(paths))}\n"
        f"{env_block}"
        f"{save}"
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

    settings = ini.read() if ini is not None else {}
    state_path = state_dir(root, start=here)
    state = (state_path.relative_to(root).as_posix() if state_path.is_relative_to(root)
             else state_path.as_posix())
    globs = frozen_globs(_as_list(settings.get("python_files")) or _DEFAULT_PYTHON_FILES,
                         _as_list(settings.get("evolve_frozen")))
    workflow.parent.mkdir(parents=True, exist_ok=True)
    workflow.write_text(render_workflow(paths=rel_paths, schedule=cron, model=model,
                                        action=action, state=state, cache_globs=globs),
                        encoding="utf-8")
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
