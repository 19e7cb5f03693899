"""The package's public names resolve, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentdescent_core


def test_every_exported_name_resolves() -> None:
    missing = [name for name in agentdescent_core.__all__
               if getattr(agentdescent_core, name, None) is None]
    assert not missing


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
