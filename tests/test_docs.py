"""Docs as tests: every shell command shown in README.md and docs/*.md is run here.

Commands live in ```bash fenced blocks.  Two rewrites keep this honest and
finite: an install step (``python -m pip install ...``) is already done for the
suite that runs this test, so it is dropped; and the project's own test command
gets ``--collect-only -n 0`` so this test does not run the suite inside itself (CI
runs that command in full).  A block line ending in ``\\`` continues on the next.
Commands run in a fresh clone of the working tree (uncommitted work included),
so what they write — an evolution's state directory, its branches — never
lands in the real checkout.  A command that another test runs as written and
checks more closely (``RUN_ELSEWHERE``: the README's main job) is left to it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clone_working_tree

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def shell_commands(markdown: str) -> list[str]:
    commands: list[str] = []
    for block in BLOCK.findall(markdown):
        pending = ""
        for raw in block.splitlines():
            line = raw.rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def runnable(command: str) -> str | None:
    """The part of a documented command this test runs, or None if nothing is left."""
    steps = [step.strip() for step in re.split(r"\s*&&\s*", command)]
    kept: list[str] = []
    for step in steps:
        words = shlex.split(step)
        if words[:4] == ["python", "-m", "pip", "install"]:
            continue
        if words[:3] == ["python", "-m", "pytest"] and not any(
                word.startswith("--evolve") for word in words):
            # The project's own suite, the one running this: collected, in this process
            # (a later -n wins; -n auto is still parsed, so a missing xdist would fail).
            step += " --collect-only -q -n 0"
        kept.append(step)
    return " && ".join(kept) or None


def main_job_command() -> str | None:
    """The README's first fresh-machine command (install, then evolve the offline example)."""
    commands = shell_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    return next((c for c in commands
                 if c.startswith("python -m pip install -e ") and "examples/" in c), None)


#: Documented commands another test runs as written and checks beyond the exit code, so
#: this test does not pay for the same whole evolution twice: the README's main job is
#: tests/test_examples.py::test_evolve_dry_run_reaches_full_reward_in_a_clone's.
RUN_ELSEWHERE = {main_job_command()}

DOCUMENTED = [
    pytest.param(doc, cmd, id=f"{doc.name}:{cmd[:60]}")
    for doc in DOCS
    for cmd in shell_commands(doc.read_text(encoding="utf-8"))
    if cmd not in RUN_ELSEWHERE
]


def test_readme_has_the_two_fresh_machine_commands() -> None:
    commands = shell_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    installs = [c for c in commands if c.startswith("python -m pip install -e ")]
    assert main_job_command() in installs, "README lost the offline example command"
    assert any(c.endswith("python -m pytest -n auto") for c in installs), \
        "README lost the test command"


#: Caches the lint commands keep beside the tree.  A copy only saves time: mypy and ruff
#: re-check every file whose content differs from what the cache recorded, so the clone's
#: lint finds exactly what a cold run would (about 50 s cold against 3 s warm for mypy).
LINT_CACHES = (".mypy_cache", ".ruff_cache")


@pytest.fixture(scope="module")
def project_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clone = clone_working_tree(ROOT, tmp_path_factory.mktemp("docs") / "project")
    for name in LINT_CACHES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, clone / name)
    return clone


@pytest.mark.parametrize(("doc", "command"), DOCUMENTED)
def test_documented_command_runs(doc: Path, command: str, project_clone: Path) -> None:
    to_run = runnable(command)
    if to_run is None:
        return  # an install-only line; the suite running this test already installed it
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    # `python`, `ruff`, `mypy` are the ones of the interpreter running this suite.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    completed = subprocess.run(
        to_run,
        shell=True,
        cwd=project_clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, (
        f"`{command}` from {doc.name} failed ({completed.returncode}):\n"
        f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )


#: ``owner/name@REF`` of the Action, and ``rev: REF`` of a pre-commit repo, in a doc
_PINNED = re.compile(r"pytest-agentdescent/pytest-agentdescent@([\w.\-]+)|^\s*rev:\s*([\w.\-]+)",
                     re.MULTILINE)


def test_docs_pin_no_tag_the_repository_lacks() -> None:
    import git

    repo = git.Repo(ROOT)
    refs = {tag.name for tag in repo.tags} | {head.name for head in repo.heads} | {"main"}
    pinned = [(doc.name, ref) for doc in DOCS
              for found in _PINNED.finditer(doc.read_text(encoding="utf-8"))
              for ref in found.groups() if ref]
    assert pinned, "the CI doc shows the Action and the pre-commit repo pinned somewhere"
    missing = [(name, ref) for name, ref in pinned
               if ref not in refs and not re.fullmatch(r"[0-9a-f]{40}", ref)]
    assert not missing, f"docs point at tags that `git tag` does not have: {missing}"
