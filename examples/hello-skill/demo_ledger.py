"""What works at this commit, on the offline example: the git ledger.

Copies this example into a throwaway git repository (so your checkout is never
touched), opens the ledger on it, records one skill edit as a real commit on
``agentdescent/dev``, promotes it to ``agentdescent/stable``, and shows that the
copy's working tree, index and current branch did not change.  The evolution
loop that finds such edits on its own arrives with ``pytest --evolve``.

Run from the repository root:  python examples/hello-skill/demo_ledger.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

import git

from agentdescent_core.artifacts import FileTree
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger import Evidence, Ledger

HERE = Path(__file__).resolve().parent
SKILL = "skills/greeter/SKILL.md"
NEW_RULE = "when goodbye -> Goodbye, {name}.\n"


def make_user_repo(where: Path) -> git.Repo:
    """A copy of the example as its own repository, with one commit on ``main``."""
    shutil.copytree(HERE, where, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    repo = git.Repo.init(where, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Example User")
        config.set_value("user", "email", "user@example.com")
    repo.git.add(A=True)
    repo.git.commit("-q", "-m", "hello-skill example")
    return repo


def reward(repo_dir: Path, state: Mapping[str, str], scratch: Path) -> float:
    """Share of the ``evolve`` tests passing when the skill files are ``state``.

    A preview of what the engine does for every candidate: materialise the
    artifact into a private copy and run the marked tests there.
    """
    copy = scratch / f"eval-{len(list(scratch.iterdir()))}"
    shutil.copytree(repo_dir, copy, ignore=shutil.ignore_patterns(".git"))
    for path, text in state.items():
        (copy / path).write_text(text, encoding="utf-8")
    junit = copy / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "evolve", "-p", "no:cacheprovider",
         f"--junitxml={junit}"],
        cwd=copy, capture_output=True, check=False,
    )
    cases = ET.parse(junit).getroot().iter("testcase")
    outcomes = [not any(child.tag in ("failure", "error") for child in case) for case in cases]
    return sum(outcomes) / len(outcomes)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agentdescent-demo-") as tmp:
        repo = make_user_repo(Path(tmp) / "hello-skill")
        scratch = Path(tmp) / "evaluations"
        scratch.mkdir()
        status_before = repo.git.status("--porcelain", "--branch")
        index_before = (Path(repo.git_dir) / "index").read_bytes()

        roots = ["skills"]
        tree = FileTree(roots, frozen=FrozenSet(["tests"], artifact_roots=roots))
        with Ledger(repo.working_tree_dir or tmp, tree) as ledger:
            branches = ledger.ensure_branches()
            state = ledger.read_state(branches.dev)
            proposal = {SKILL: state[SKILL] + NEW_RULE}
            diff = tree.to_diff(state, proposal, author="demo", base_version=0,
                                target="skills", rationale="Teach the greeter to say goodbye")
            assert diff is not None
            repo_dir = Path(ledger.repo_path)
            before = reward(repo_dir, state, scratch)
            after = reward(repo_dir, diff.apply(state), scratch)
            print(f"reward of the evolve tests: {before:.2f} before, {after:.2f} after the edit")
            # One run per version proves nothing statistically; the engine repeats and
            # tests (docs/statistics.md). Here the evidence records the two measurements.
            committed = ledger.commit(
                diff, evidence=Evidence(reward_before=before, reward_after=after)
            )
            promoted = ledger.promote()
            print(f"committed v{committed.version} {committed.sha[:12]} on "
                  f"{ledger.dev_branch}; {ledger.stable_branch} -> v{promoted.version}\n")
            for ref in (ledger.dev_branch, ledger.stable_branch):
                print(f"{ref}: {repo.git.rev_parse('--short', ref)}")
            print()
            print(repo.git.log("--stat", "--format=%h %s%n%n%b", f"main..{ledger.dev_branch}"))

        unchanged = (
            repo.git.status("--porcelain", "--branch") == status_before
            and (Path(repo.git_dir) / "index").read_bytes() == index_before
            and repo.active_branch.name == "main"
        )
        print("working tree, index and branch 'main' unchanged:", unchanged)
        return 0 if unchanged else 1


if __name__ == "__main__":
    sys.exit(main())
