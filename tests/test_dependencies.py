"""Every third-party module the product imports is a declared dependency.

An import that works only because another package happened to bring it along
(``httpx2`` came with the SDKs, ``pathspec`` with mypy) breaks the day that
package stops bringing it.  This reads every ``import`` of the two shipped
packages and maps each top-level module to the distribution that provides it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: declared as a dependency there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("agentdescent_core", "pytest_agentdescent")


def _imported_top_levels() -> dict[str, str]:
    """Top-level module -> one file importing it, over the shipped packages."""
    found: dict[str, str] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".", 1)[0], str(path.relative_to(ROOT)))
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return {_normal(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0])
            for spec in project["dependencies"]}


def _extras() -> dict[str, set[str]]:
    """Each optional extra -> the distributions it declares (``all`` and ``test`` left out)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return {name: {_normal(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]) for spec in specs}
            for name, specs in project["optional-dependencies"].items()
            if name not in ("all", "test", "dev")}


def _eager_imports(module: str) -> list[str]:
    """Files importing ``module`` at import time (module level, not under TYPE_CHECKING)."""
    eager: list[str] = []
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:  # functions and ``if TYPE_CHECKING:`` bodies defer
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         else [])
                if any(n.split(".", 1)[0] == module for n in names):
                    eager.append(str(path.relative_to(ROOT)))
    return eager


def test_the_extras_are_imported_only_where_used() -> None:
    # an extra's package imported at module level would break the base install
    extras = _extras()
    assert {"anthropic", "openai", "docker"} <= set(extras)
    for name in extras:
        assert _eager_imports(name) == [], name


def test_every_imported_distribution_is_declared() -> None:
    providers = importlib.metadata.packages_distributions()
    declared = _declared() | set().union(*_extras().values())
    missing: list[str] = []
    for module, where in sorted(_imported_top_levels().items()):
        if module in sys.stdlib_module_names or module in SHIPPED or module == "__future__":
            continue
        # not installed here: a dependency for other Pythons only (tomli on 3.10), which
        # must then be declared under its own name
        dists = {_normal(d) for d in providers.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} from {sorted(dists)} (imported by {where})")
    assert not missing, "undeclared dependencies: " + "; ".join(missing)


def test_the_check_sees_real_imports() -> None:
    # guards the walk above: it must find the dependencies we know are imported
    assert {"git", "numpy", "pytest", "httpx2", "pathspec"} <= set(_imported_top_levels())
