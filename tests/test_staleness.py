"""Staleness policies and the lag tolerance alpha."""

from __future__ import annotations

import pytest

from agentdescent_core.governance import FAST_MAX
from agentdescent_core.staleness import (
    Full,
    Guarded,
    Reflective,
    StalenessAction,
    StalenessPolicy,
    alpha_for,
    get_policy,
)

A, R, D = StalenessAction.ACCEPT, StalenessAction.REBASE, StalenessAction.DISCARD


@pytest.mark.parametrize(
    ("policy", "eta", "alpha", "breaking", "expected"),
    [
        (Full(), 0, 1, False, A),
        (Full(), 9, 1, False, A),
        (Full(), 9, 0, True, A),
        (Guarded(), 0, 1, False, A),
        (Guarded(), 1, 1, False, R),
        (Guarded(), 2, 1, False, D),
        (Guarded(), 5, 5, False, R),
        (Guarded(), 1, 5, True, D),
        (Guarded(), 0, 0, True, A),
        (Reflective(), 0, 1, False, A),
        (Reflective(), 50, 1, False, R),
        (Reflective(), 3, 0, True, D),
    ],
)
def test_policy_table(policy: StalenessPolicy, eta: int, alpha: int, breaking: bool,
                      expected: StalenessAction):
    assert policy.decide(eta, alpha, breaking) is expected


def test_get_policy_by_name_defaults_to_guarded_and_names_the_choices():
    assert isinstance(get_policy(), Guarded)
    for name, cls in (("full", Full), ("guarded", Guarded), ("reflective", Reflective)):
        policy = get_policy(name)
        assert isinstance(policy, cls)
        assert policy.name == name
        assert isinstance(policy, StalenessPolicy)
    with pytest.raises(ValueError, match="full, guarded, reflective"):
        get_policy("eager")


def test_alpha_follows_the_one_layer_boundary():
    assert alpha_for(FAST_MAX, contract_breaking=False) == 1  # L2 up to and at FAST_MAX
    assert alpha_for(FAST_MAX + 0.01, contract_breaking=False) == 5  # L1 above it
    assert alpha_for(0.9, contract_breaking=True) == 0
    assert alpha_for(0.1, contract_breaking=False, alpha_head=7, alpha_tail=3) == 3
    with pytest.raises((TypeError, ValueError)):
        alpha_for(1.5, contract_breaking=False)


def test_negative_lag_is_a_caller_bug():
    with pytest.raises(ValueError, match="eta"):
        Guarded().decide(-1, 1, False)
    assert str(StalenessAction.REBASE) == "rebase"
