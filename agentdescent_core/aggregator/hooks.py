"""The override points of the reference Aggregator, and the check that a subclass uses them.

A subclass of :class:`~agentdescent_core.aggregator.Aggregator` may override
the public protocol methods (``step``, ``flush``, ``finish``, ``head``,
``head_reward``) and the hooks named in :data:`HOOKS`.  The merge stages
themselves run on :class:`~agentdescent_core.aggregator.pipeline.Firing`, so a
method named after one of them on an Aggregator subclass (``_staleness``,
``_decide``, ...) would never be called.  :func:`check_overrides` refuses such
a subclass when it is built, instead of letting a run go on without the
override.
"""

from __future__ import annotations

from agentdescent_core.errors import ContractError

HOOKS: dict[str, str] = {
    "_tournament": "_tournament(self, artifact, candidates) -> one of candidates: picks "
                   "the candidate that goes on to the audit and the acceptance test",
}
"""The private methods the engine calls on an Aggregator, with what each one decides."""

#: Names of the Firing's stages: overriding one on an Aggregator would do nothing.
PIPELINE_STAGES = frozenset({
    "_merge", "_staleness", "_action", "_reverify", "_cheap_improves", "_audit",
    "_decide", "_accept", "_supported", "_disqualified", "_commit", "_diff",
    "_score", "_report", "_base_state",
})


def check_overrides(cls: type, base: type) -> None:
    """ContractError when ``cls`` (a subclass of ``base``) overrides a stage the engine never calls.

    Why: overriding ``Aggregator._decide`` (say) looks like it changes the
    acceptance decision, while the pipeline runs on the Firing and never looks
    at it; a run that silently ignores the override reports results the author
    did not ask for.  The message names the hooks that do work.
    """
    for klass in cls.__mro__:
        if klass is base or not issubclass(klass, base):
            continue
        for name in sorted(vars(klass)):
            if name in PIPELINE_STAGES and not hasattr(base, name):
                supported = "; ".join(HOOKS.values())
                raise ContractError(
                    f"{klass.__name__}.{name} overrides nothing: the merge stages run on "
                    "agentdescent_core.aggregator.pipeline.Firing, which never calls "
                    f"Aggregator.{name}. The supported hook is {supported}; to replace more, "
                    "pass aggregator_factory= an object satisfying AggregatorProtocol "
                    "(step, flush, finish, head, head_reward)"
                )
