"""Makes ``agent`` importable from the tests, as a repository's own conftest would."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
