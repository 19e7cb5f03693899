"""The package's public surface: a short pinned list at the top, everything else in a subpackage.

Why pinned: every top-level name is a promise to users, so adding or dropping
one must be a decision, made here, not a side effect of an import.  The
subpackages' ``__init__`` files list the rest; the modules inside them are the
implementation and declare no ``__all__``.  The docs import only public names,
so a reader copying an example never depends on a private module.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentdescent_core

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "agentdescent_core"

#: The whole top level of ``agentdescent_core``; change it only on purpose.
PUBLIC = [
    "AgentDescentError",
    "AggregatorConfig",
    "AppendRules",
    "ContractError",
    "DataParallel",
    "Diff",
    "EvolutionResult",
    "FileTree",
    "Full",
    "Guarded",
    "KeyedRules",
    "LLMAgent",
    "LoopKernel",
    "PipelineParallel",
    "RefusalError",
    "Reflective",
    "RoundInfo",
    "SingleSlot",
    "SqliteRunStore",
    "Task",
    "TensorParallel",
    "WorkUnit",
    "async_evolve",
    "claude",
    "evolve",
    "openai_compatible",
    "reflector",
    "run_controller",
]

#: Names that left the top level, and where each one is imported from now: its
#: package's ``__init__``, or the engine's top-level module that defines it.
MOVED = {
    "AcceptanceDecision": "agentdescent_core.stats",
    "Aggregator": "agentdescent_core.aggregator",
    "AggregatorProtocol": "agentdescent_core.aggregator",
    "AnyKillSwitch": "agentdescent_core.loop",
    "ArtifactStore": "agentdescent_core.aggregator",
    "AuditScheduler": "agentdescent_core.aggregator",
    "BackendError": "agentdescent_core.errors",
    "CallableVerifier": "agentdescent_core.evaluation.callable",
    "CasConflictError": "agentdescent_core.errors",
    "Completion": "agentdescent_core.proposers",
    "ControllerConfig": "agentdescent_core.loop",
    "ControllerReport": "agentdescent_core.loop",
    "DecisionLog": "agentdescent_core.loop",
    "DecisionRecord": "agentdescent_core.loop",
    "DifficultyWeighted": "agentdescent_core.loop",
    "EnvKillSwitch": "agentdescent_core.loop",
    "EvalCache": "agentdescent_core.evaluation.cache",
    "Evidence": "agentdescent_core.ledger",
    "EvidenceCard": "agentdescent_core.evidence",
    "FAST_MAX": "agentdescent_core.governance",
    "FileKillSwitch": "agentdescent_core.loop",
    "FileTreeLimits": "agentdescent_core.artifacts",
    "FrozenSet": "agentdescent_core.artifacts",
    "KillSwitch": "agentdescent_core.loop",
    "Layer": "agentdescent_core.governance",
    "Lease": "agentdescent_core.loop",
    "LeaseHeld": "agentdescent_core.loop",
    "Ledger": "agentdescent_core.ledger",
    "LedgerError": "agentdescent_core.errors",
    "Limits": "agentdescent_core.sandbox",
    "LoopConfig": "agentdescent_core.loop",
    "LoopContext": "agentdescent_core.loop",
    "LoopGeneration": "agentdescent_core.loop",
    "LoopObservation": "agentdescent_core.loop",
    "LoopReport": "agentdescent_core.loop",
    "MERGE_CATEGORIES": "agentdescent_core.evidence",
    "MergeOutcome": "agentdescent_core.evidence",
    "MergeReport": "agentdescent_core.evidence",
    "ProposalSite": "agentdescent_core.loop",
    "RetryableStepError": "agentdescent_core.loop",
    "RoundRobin": "agentdescent_core.loop",
    "RunEvent": "agentdescent_core.loop",
    "RunRecord": "agentdescent_core.loop",
    "SandboxedVerifier": "agentdescent_core.evaluation.sandboxed",
    "SessionOutcome": "agentdescent_core.loop",
    "SessionRecord": "agentdescent_core.loop",
    "StalenessPolicy": "agentdescent_core.staleness",
    "Strategy": "agentdescent_core.artifacts",
    "TaskSamples": "agentdescent_core.stats",
    "TaskSplit": "agentdescent_core.evaluation",
    "TestRecord": "agentdescent_core.evaluation.records",
    "TrustRegion": "agentdescent_core.artifacts",
    "Verifier": "agentdescent_core.evaluation",
    "Workspace": "agentdescent_core.sandbox",
    "apply_ops": "agentdescent_core.artifacts",
    "classify": "agentdescent_core.governance",
    "evolve_verified": "agentdescent_core.loop",
    "from_callable": "agentdescent_core.proposers",
    "get_acceptance_policy": "agentdescent_core.stats",
    "get_backend": "agentdescent_core.sandbox",
    "get_policy": "agentdescent_core.staleness",
    "load_report": "agentdescent_core.loop",
    "state_hash": "agentdescent_core.artifacts",
}

#: Modules that are not a package but still public: the exceptions live in one place.
PUBLIC_MODULES = {"agentdescent_core.errors"}

#: The public exceptions module keeps its ``__all__``, as a package ``__init__`` does.
KEEPS_ALL = ("agentdescent_core/errors.py",)


def test_the_top_level_is_exactly_the_pinned_list() -> None:
    assert sorted(agentdescent_core.__all__) == sorted(PUBLIC)
    assert len(PUBLIC) == len(set(PUBLIC))


def test_every_exported_name_resolves() -> None:
    missing = [name for name in agentdescent_core.__all__
               if getattr(agentdescent_core, name, None) is None]
    assert not missing


def test_the_type_checking_block_names_every_export() -> None:
    """The lazy table and the imports type checkers read must list the same names."""
    tree = ast.parse((ENGINE / "__init__.py").read_text(encoding="utf-8"))
    typed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.ImportFrom):
                    typed.update(alias.asname or alias.name for alias in stmt.names)
    assert typed == set(PUBLIC)


def test_a_dropped_name_is_not_at_the_top_but_in_its_package() -> None:
    for name, module in MOVED.items():
        assert name not in agentdescent_core.__all__
        with pytest.raises(AttributeError):
            getattr(agentdescent_core, name)
        assert getattr(importlib.import_module(module), name) is not None, (name, module)


def test_every_package_export_resolves() -> None:
    for init in sorted(ENGINE.rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(ROOT).parts)
        module = importlib.import_module(package)
        missing = [name for name in getattr(module, "__all__", ())
                   if getattr(module, name, None) is None]
        assert not missing, package


def test_strict_type_checkers_see_every_export(tmp_path: Path) -> None:
    """A user's ``mypy --strict`` accepts ``from agentdescent_core import evolve``.

    The exports are lazy, so the names reach type checkers only through the
    ``TYPE_CHECKING`` imports; a plain import there is private to mypy's strict
    mode ("does not explicitly export"), the ``import X as X`` form is not.
    """
    lines = []
    for init in sorted(ENGINE.rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(ROOT).parts)
        names = sorted(getattr(importlib.import_module(package), "__all__", ()))
        if names:
            lines.append(f"from {package} import {', '.join(names)}")
            lines.append(f"print({', '.join(names)})")
    user = tmp_path / "user_code.py"
    user.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--config-file", "", "--cache-dir", str(ROOT / ".mypy_cache" / "strict-user"),
         str(user)],
        cwd=ROOT, env={**os.environ, "MYPYPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_implementation_modules_declare_no_all() -> None:
    declaring = []
    for path in sorted(ENGINE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" or relative.startswith(KEEPS_ALL):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(target, ast.Name) and target.id == "__all__"
                   for target in targets):
                declaring.append(relative)
    assert not declaring


# An import at the start of a line, or inside a ``python -c "..."`` command.
_DOC_IMPORT = re.compile(r"(?:^|[;\"'])\s*(?:from|import)\s+(agentdescent_core[\w.]*)", re.M)


def _is_public(module: str) -> bool:
    if module in PUBLIC_MODULES:
        return True
    return (ROOT.joinpath(*module.split(".")) / "__init__.py").is_file()


def test_the_docs_import_only_public_modules() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    private = sorted(
        f"{doc.name}: {module}"
        for doc in docs
        for module in _DOC_IMPORT.findall(doc.read_text(encoding="utf-8"))
        if not _is_public(module)
    )
    assert not private


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        agentdescent_core.no_such_thing  # noqa: B018


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, agentdescent_core.errors; "
        "print(sorted(m for m in ('git', 'numpy', 'scipy', 'pytest') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
