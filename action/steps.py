"""The Python steps of the composite Action (``action.yml``): evolve, push, summary.

Each step is ``python action/steps.py STEP`` run by the Action's virtualenv.
Inputs arrive as ``AGENTDESCENT_*`` environment variables (the Action maps
``${{ inputs.* }}`` onto them, so no input is ever spliced into a script), the
results leave through ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY``.  The
script is also runnable outside Actions (the tests do that): without those
variables the outputs are printed instead.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentdescent_core.github import append_step_summary, push_branches, set_outputs
from pytest_agentdescent.cli._common import installed_cli
from pytest_agentdescent.cli.project import repo_root, state_dir


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"AGENTDESCENT_{name}", default).strip()


def _flag(name: str) -> bool:
    value = _env(name, "false").lower()
    if value not in ("true", "false", ""):
        raise SystemExit(f"::error::input {name.lower().replace('_', '-')} must be true or "
                         f"false, got {value!r}")
    return value == "true"


def _pytest_args() -> list[str]:
    return shlex.split(_env("PYTEST_ARGS"))


def _state_dir(root: Path) -> Path:
    args = _pytest_args()
    given = None
    for index, word in enumerate(args):
        if word == "--evolve-state-dir" and index + 1 < len(args):
            given = args[index + 1]
        elif word.startswith("--evolve-state-dir="):
            given = word.split("=", 1)[1]
    return state_dir(root, given)


def _cli() -> str:
    """The ``agentdescent`` script next to this interpreter (the Action's virtualenv)."""
    found = installed_cli()
    if found is None:
        raise SystemExit("::error::the agentdescent command is not installed next to "
                         f"{sys.executable}; did the install step run?")
    return found


def evolve_command() -> list[str]:
    """The ``agentdescent run ...`` command (``pytest --evolve``) the inputs describe."""
    command = [_cli(), "run", *_env("PATHS").split()]
    for option, name in (("--model", "MODEL"), ("--rounds", "ROUNDS"),
                         ("--workers", "WORKERS"), ("--repeats", "REPEATS")):
        if _env(name):
            command += [option, _env(name)]
    if _flag("DRY_RUN"):
        command.append("--dry-run")
    extra: list[str] = []
    if _env("BRANCH_PREFIX"):
        extra += ["--evolve-branch-prefix", _env("BRANCH_PREFIX")]
    return [*command, "--", *extra, *_pytest_args()]


def _reward(value: object) -> str:
    return "" if value is None or isinstance(value, bool) else f"{float(value):.4f}"  # type: ignore[arg-type]


def evolve() -> int:
    """Run the evolution; write its outputs (rewards, cost, report); return pytest's exit code."""
    root = repo_root()
    command = evolve_command()
    print("::group::Evolve: agentdescent run (pytest --evolve), one line per round", flush=True)
    try:
        code = subprocess.run(command, check=False).returncode
    finally:
        print("::endgroup::", flush=True)
    report_path = _state_dir(root) / "report.json"
    report: dict[str, Any] = {}
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
    else:
        print(f"::error::the run wrote no {report_path}; see the log above (with no `paths` "
              "input, evolve_paths of the pytest configuration names the artifact roots)")
        code = code or 1
    outputs = {
        "reward-before": _reward(report.get("reward_before")),
        "reward-after": _reward(report.get("reward_after")),
        "report": str(report_path) if report else "",
        "cost-usd": _reward(report.get("cost_usd")),
    }
    if not set_outputs(outputs):
        print(json.dumps(outputs))
    return code


def push() -> int:
    """Push dev, stable and the session history back, so the next session resumes."""
    root = repo_root()
    prefix = _env("BRANCH_PREFIX", "agentdescent/") or "agentdescent/"
    remote = _env("REMOTE", "origin") or "origin"
    import git

    with git.Repo(root) as repo:
        existing = {ref.path for ref in repo.refs}
    # The session history of scheduled runs: refs/agentdescent/sessions by default.
    wanted = [f"refs/heads/{prefix}dev", f"refs/heads/{prefix}stable", f"refs/{prefix}sessions"]
    refs = [ref for ref in wanted if ref in existing]
    if not refs:
        print("nothing to push: no agentdescent branch or session history here",
              file=sys.stderr)
        return 0
    pushed = push_branches(root, remote=remote, refs=refs)
    for ref in refs:
        state = "pushed" if ref in pushed else "up to date"
        print(f"{state} {ref}", file=sys.stderr)
    return 0


def summary() -> int:
    """Append report.md (and the pull request's fate) to the job summary."""
    root = repo_root()
    report_md = _state_dir(root) / "report.md"
    parts: list[str] = []
    operation, url = _env("PR_OPERATION"), _env("PR_URL")
    if operation:
        where = f" — {url}" if url else ""
        parts.append(f"**agentdescent pull request:** {operation}{where}\n")
    if report_md.is_file():
        parts.append(report_md.read_text(encoding="utf-8"))
    else:
        parts.append("**agentdescent:** no report was written; the evolution did not run "
                     "to the end (see the step log).\n")
    text = "\n".join(parts)
    if not append_step_summary(text):
        print(text)
    return 0


STEPS = {"evolve": evolve, "push": push, "summary": summary}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in STEPS:
        print(f"usage: steps.py {{{'|'.join(STEPS)}}}", file=sys.stderr)
        return 2
    return STEPS[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
