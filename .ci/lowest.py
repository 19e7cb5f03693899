"""Print ``pytest==X pluggy==Y``: the lowest versions pyproject.toml lets users install.

CI installs these into a second virtualenv and runs the plugin's tests there, so a
floor in ``project.dependencies`` is a version that was tested, not a guess.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

FLOORED = ("pytest", "pluggy")


def main() -> int:
    project = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = []
    for name in FLOORED:
        for requirement in project["dependencies"]:
            found = re.fullmatch(rf"{name}\s*>=\s*([0-9][0-9.]*)", requirement.strip())
            if found:
                pins.append(f"{name}=={found.group(1)}")
                break
        else:
            print(f"pyproject.toml declares no `{name}>=X` floor", file=sys.stderr)
            return 1
    print(" ".join(pins))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
