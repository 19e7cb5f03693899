"""Host paths a child ``sys.executable -m pytest`` must be able to read inside a sandbox.

Backends that hide the file system (``bwrap`` tmpfs over home directories,
``docker`` with only system directories) re-expose these read-only at their own
paths, so the child runs the very interpreter, virtualenv and editable installs
of the parent without any image or copy.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path


def package_root(module_name: str) -> Path | None:
    """The directory holding the package ``module_name`` (its ``sys.path`` entry), or None."""
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = __import__(module_name)
        except ImportError:
            return None
    location = getattr(module, "__file__", None)
    if not location:
        return None
    # The directory holding the package: an editable install imports it from the source tree.
    return Path(location).resolve().parent.parent


def minimal_paths(paths: list[Path]) -> tuple[Path, ...]:
    """De-duplicate and drop every path that lies inside another one of the list."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(path == other or path.is_relative_to(other) for other in kept):
            kept.append(path)
    return tuple(sorted(kept))


@functools.lru_cache(maxsize=1)
def _clean_sys_path() -> tuple[str, ...]:
    """``sys.path`` of a fresh ``python -I`` of this interpreter.

    Not this process's ``sys.path``: pytest and scripts prepend test and script
    directories (often inside the user's repository, which must stay hidden).
    The isolated interpreter still reads the ``.pth`` files of site-packages.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            timeout=30,
            check=True,
        )
        entries = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        entries = [p for p in sys.path if p and Path(p).is_relative_to(sys.prefix)]
    return tuple(str(entry) for entry in entries if isinstance(entry, str) and entry)


def interpreter_paths() -> tuple[Path, ...]:
    """The interpreter prefixes, its clean ``sys.path`` and this project's packages.

    Each path is given resolved (symlinks followed, so a bind mount exposes the
    real files) and also as spelled when that differs, since the child looks
    files up by the spelled path.  Paths inside another listed path are dropped.
    """
    candidates: list[Path] = []

    def add(raw: str | Path) -> None:
        if not raw:
            return
        path = Path(raw).absolute()
        if not path.exists():
            return
        candidates.append(path)
        resolved = path.resolve()
        if resolved != path:
            candidates.append(resolved)

    add(sys.prefix)
    add(sys.base_prefix)
    add(sys.exec_prefix)
    add(sys.base_exec_prefix)
    add(Path(sys.executable).parent)
    for entry in _clean_sys_path():
        add(entry)
    for name in ("agentdescent_core", "pytest_agentdescent"):
        package_dir = package_root(name)
        if package_dir is not None:
            add(package_dir)
    filtered = [path for path in candidates if path != Path("/")]
    return minimal_paths(filtered)
