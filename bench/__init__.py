"""Benchmarks of pytest-agentdescent (not tests): ``python -m bench`` runs them all.

Each part also runs alone as ``python -m bench.<name>``.

Each writes its recorded results to ``bench/results/<name>.json`` with the
machine, date, seed and parameters it ran with.
"""

from __future__ import annotations
