"""The shape of the tree, as a newcomer meets it: ``python -m bench.structure [TREE ...]``.

Figures per tree (default: this checkout), one JSON object per tree on stdout:

* ``files``: files in the tree (``git ls-files`` where it is a repository,
  every file outside ``.git`` and caches otherwise);
* ``largest_module``: the longest ``.py`` file of the two packages, and its lines;
* ``top_level_exports``: names ``agentdescent_core`` exports (its ``_EXPORTS``);
* ``all_names``: names listed in ``__all__`` by the engine's modules, and how
  many of those lists sit in implementation modules (not a package ``__init__``);
* ``crossings``: distinct (caller, callee) function pairs where code of one
  package calls code of the other, during one dry run of the support-bot
  example (``pytest --evolve skills/ --evolve-dry-run``), seen by a profiler
  in every thread.  It counts how many doors the plugin and the engine talk
  through, not how often they do.

Comparing two trees (``python -m bench.structure . /tmp/before``, the second an
``git archive`` of an older commit) is how issue 17's before/after figures were
taken.  Each tree's dry run imports that tree's packages (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.records import GIT_ENV

PACKAGES = ("agentdescent_core", "pytest_agentdescent")
ROOT = Path(__file__).resolve().parents[1]

# Runs in the child: profiles every call in every thread, then writes the pairs.
_PROFILE = r"""
import json, sys, threading
PACKAGES = ("agentdescent_core", "pytest_agentdescent")
pairs = set()

def owner(filename):
    for package in PACKAGES:
        if "/" + package + "/" in filename:
            return package
    return None

def profile(frame, event, arg):
    if event != "call":
        return
    caller = frame.f_back
    if caller is None:
        return
    callee_pkg = owner(frame.f_code.co_filename)
    caller_pkg = owner(caller.f_code.co_filename)
    if callee_pkg and caller_pkg and callee_pkg != caller_pkg:
        if "<module>" in (frame.f_code.co_name, caller.f_code.co_name):
            return  # importing a module is not a door
        pairs.add((caller.f_globals.get("__name__", "?") + "." + caller.f_code.co_qualname,
                   frame.f_globals.get("__name__", "?") + "." + frame.f_code.co_qualname))

threading.setprofile(profile)
sys.setprofile(profile)
import pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", "--evolve", "skills/", "--evolve-dry-run"])
sys.setprofile(None)
threading.setprofile(None)
with open(sys.argv[1], "w") as out:
    json.dump({"exit": int(code), "pairs": sorted(pairs)}, out)
"""


def tree_files(tree: Path) -> int:
    if (tree / ".git").exists():
        out = subprocess.run(["git", "ls-files"], cwd=tree, capture_output=True, text=True,
                             check=True).stdout
        return len(out.splitlines())
    skip = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    return sum(1 for path in tree.rglob("*")
               if path.is_file() and not skip.intersection(path.parts))


def largest_module(tree: Path) -> dict[str, Any]:
    sizes = {str(path.relative_to(tree)): len(path.read_text("utf-8").splitlines())
             for package in PACKAGES for path in (tree / package).rglob("*.py")}
    name = max(sizes, key=sizes.__getitem__)
    return {"path": name, "lines": sizes[name]}


def _all_entries(path: Path) -> int | None:
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                value = node.value
                if isinstance(value, ast.List | ast.Tuple):
                    return len(value.elts)
                return 0  # computed (``sorted(_EXPORTS)``): counted as exports instead
    return None


def exports(tree: Path) -> dict[str, int]:
    init = ast.parse((tree / "agentdescent_core" / "__init__.py").read_text("utf-8"))
    top = 0
    for node in init.body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == "_EXPORTS":
                top = len(node.value.keys)
    names = modules = 0
    for path in (tree / "agentdescent_core").rglob("*.py"):
        count = _all_entries(path)
        if count is not None:
            names += count
            modules += path.name != "__init__.py"
    return {"top_level_exports": top, "all_names": names, "modules_with_all": modules}


def crossings(tree: Path) -> dict[str, Any]:
    """Run the support-bot dry run from ``tree`` under the profiler, in a scratch repository."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / "support-bot"
        shutil.copytree(tree / "examples" / "support-bot", work,
                        ignore=shutil.ignore_patterns(".agentdescent", "__pycache__"))
        env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(tree.resolve())}
        for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                     ["git", "commit", "-q", "-m", "example"]):
            subprocess.run(argv, cwd=work, env=env, check=True)
        out = Path(scratch) / "pairs.json"
        subprocess.run([sys.executable, "-c", _PROFILE, str(out)], cwd=work, env=env,
                       check=False, capture_output=True)
        data = json.loads(out.read_text("utf-8"))
    pairs = [tuple(pair) for pair in data["pairs"]]
    into_engine = [p for p in pairs if p[1].startswith("agentdescent_core")]
    return {"exit": data["exit"], "pairs": len(pairs),
            "plugin_to_engine": len(into_engine),
            "engine_to_plugin": len(pairs) - len(into_engine),
            "engine_entry_points": len({callee for _caller, callee in into_engine})}


def measure(tree: Path, *, run: bool = True) -> dict[str, Any]:
    figures: dict[str, Any] = {"tree": str(tree), "files": tree_files(tree),
                               "largest_module": largest_module(tree), **exports(tree)}
    if run:
        figures["crossings"] = crossings(tree)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.structure", description=__doc__)
    parser.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    parser.add_argument("--no-run", action="store_true", help="skip the profiled dry run")
    args = parser.parse_args(argv)
    for tree in args.trees:
        print(json.dumps(measure(tree, run=not args.no_run), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
