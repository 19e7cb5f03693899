"""Evaluation: scoring an artifact state on tasks, through one memoised choke point."""

from __future__ import annotations

from agentdescent_core.evaluation.protocol import TaskSplit, Verifier

__all__ = ["TaskSplit", "Verifier"]
