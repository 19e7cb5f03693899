"""Agents: completions from plain functions, LLMAgent, and the reflector's prompt and parsing.

A plain Python function is a real Completion (prompt in, text out), so these
tests drive the actual code paths with small deterministic "models".
"""

from __future__ import annotations

import functools

import pytest

from agentdescent_core.artifacts.strategies import AppendRules
from agentdescent_core.errors import ContractError
from agentdescent_core.proposers.agent import (
    LLMAgent,
    build_reflection_prompt,
    from_callable,
    parse_rule,
    reflector,
)
from agentdescent_core.tasks import Task


class Recorder:
    """A completion that records every prompt and answers with a fixed reply."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.reply


TASK = Task(id="pens", prompt="What do 7 pens at $4 cost?", meta={"gold": "2800", "unit": "cents"})


# --- from_callable -----------------------------------------------------------------


def test_from_callable_accepts_prompt_functions_of_several_shapes() -> None:
    def plain(prompt: str) -> str:
        return prompt.upper()

    def with_default(prompt: str, temperature: float = 0.0) -> str:
        return f"{prompt}@{temperature}"

    def variadic(*args: str) -> str:
        return "|".join(args)

    assert from_callable(plain)("hi") == "HI"
    assert from_callable(with_default)("hi") == "hi@0.0"
    assert from_callable(variadic)("hi") == "hi"
    assert from_callable(lambda p: p[::-1])("abc") == "cba"
    assert from_callable(functools.partial(with_default, temperature=1.0))("x") == "x@1.0"
    assert from_callable(str.strip)("  x ") == "x"


def test_from_callable_is_idempotent() -> None:
    completion = from_callable(lambda p: p)
    assert from_callable(completion) is completion


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("not a function", id="string"),
        pytest.param(42, id="int"),
        pytest.param(lambda: "x", id="no-parameter"),
        pytest.param(lambda prompt, system: "x", id="two-required"),
        pytest.param(lambda *, prompt: "x", id="keyword-only"),
    ],
)
def test_from_callable_refuses_what_cannot_take_one_prompt(bad: object) -> None:
    with pytest.raises(ContractError, match="completion"):
        from_callable(bad)  # type: ignore[arg-type]


def test_a_completion_replying_with_non_text_is_a_contract_error() -> None:
    def returns_dict(prompt: str) -> dict[str, str]:
        return {"text": prompt}

    completion = from_callable(returns_dict)  # type: ignore[arg-type]
    with pytest.raises(ContractError, match=r"returns_dict returned dict"):
        completion("hello")


# --- LLMAgent.run ------------------------------------------------------------------


def test_run_places_the_artifact_as_instructions_before_the_task() -> None:
    model = Recorder("2800")
    agent = LLMAgent(model)
    assert agent.run("1. Answer in integer cents.", TASK) == "2800"
    (prompt,) = model.prompts
    assert prompt.index("Answer in integer cents.") < prompt.index(TASK.prompt)
    assert prompt.startswith("Instructions:")
    assert "gold" not in prompt, "run() must not leak the task's meta to the agent"


def test_run_with_an_empty_artifact_sends_just_the_task() -> None:
    model = Recorder("ok")
    LLMAgent(model).run("   ", TASK)
    assert model.prompts == [TASK.prompt]


def test_an_artifact_driven_model_answers_according_to_the_rendered_rules() -> None:
    """The artifact really steers the answer: the same task passes once the rule is in it."""

    def model(prompt: str) -> str:
        return "2800" if "cents" in prompt.split("Task:")[0] else "$28.00"

    agent = LLMAgent(model)
    strategy = AppendRules()
    state = strategy.initial()
    assert agent.run(strategy.render(state), TASK) == "$28.00"
    diff = strategy.to_diff(state, "Give money as integer cents.", "w0", 0, "artifact")
    assert diff is not None
    state = {**state, **{k: v for k, v in diff.ops.items() if v is not None}}
    assert agent.run(strategy.render(state), TASK) == "2800"


def test_llm_agent_refuses_a_bad_completion_and_bad_options() -> None:
    with pytest.raises(ContractError):
        LLMAgent("gpt")  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="meta_chars"):
        LLMAgent(lambda p: p, meta_chars=-1)
    with pytest.raises(ContractError, match="show_meta"):
        LLMAgent(lambda p: p, show_meta="yes")  # type: ignore[arg-type]


# --- the reflector -----------------------------------------------------------------


def test_reflection_prompt_shows_artifact_task_output_score_and_meta() -> None:
    prompt = build_reflection_prompt("1. Be brief.", TASK, "$28.00", 0.0)
    for part in ("1. Be brief.", TASK.prompt, "$28.00", "0.000", "gold: 2800", "unit: cents"):
        assert part in prompt
    assert "ONE general rule" in prompt
    assert "do not state this task's expected answer" in prompt
    assert "NONE" in prompt


def test_meta_is_truncated_to_meta_chars() -> None:
    task = Task(id="big", prompt="q", meta={"document": "x" * 5000})
    prompt = build_reflection_prompt("", task, "out", 0.0, meta_chars=100)
    assert "x" * 90 in prompt
    assert "x" * 200 not in prompt
    assert "truncated" in prompt


def test_show_meta_false_withholds_meta_entirely() -> None:
    secret = Task(id="s", prompt="q", meta={"gold": "SECRET-ANSWER-123"})
    model = Recorder("Rule: check the units")
    propose = reflector(model, show_meta=False)
    assert propose("", secret, "wrong", 0.0) == "check the units"
    assert "SECRET-ANSWER-123" not in model.prompts[0]
    assert "Reference information" not in model.prompts[0]
    model_shown = Recorder("Rule: x")
    reflector(model_shown)("", secret, "wrong", 0.0)
    assert "SECRET-ANSWER-123" in model_shown.prompts[0]


def test_long_outputs_are_truncated_and_non_text_outputs_are_shown() -> None:
    prompt = build_reflection_prompt("", TASK, "y" * 10_000, 0.2, output_chars=50)
    assert "y" * 51 not in prompt
    prompt = build_reflection_prompt("", TASK, {"answer": 28}, 0.2)
    assert "{'answer': 28}" in prompt


def test_reflector_returns_the_parsed_rule() -> None:
    model = Recorder("Rule: Express monetary amounts as integer cents.")
    propose = reflector(model)
    rule = propose("1. Be brief.", TASK, "$28.00", 0.0)
    assert rule == "Express monetary amounts as integer cents."
    diff = AppendRules().to_diff({}, rule, "w0", 0, "artifact")
    assert diff is not None
    assert list(diff.ops.values()) == [rule]


def test_a_perfect_score_spends_no_call() -> None:
    model = Recorder("Rule: anything")
    assert reflector(model)("", TASK, "2800", 1.0) is None
    assert model.prompts == []


def test_llm_agent_propose_uses_its_completion_and_meta_setting() -> None:
    model = Recorder("**Rule:** Answer in cents.")
    agent = LLMAgent(model, show_meta=False)
    assert agent.propose("", TASK, "$28.00", 0.0) == "Answer in cents."
    assert "2800" not in model.prompts[0].split("## Agent output")[0]
    assert "gold" not in model.prompts[0]


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        ("Rule: Use integer cents.", "Use integer cents."),
        ("  Use integer cents.  ", "Use integer cents."),
        ("```\nRule: Use integer cents.\n```", "Use integer cents."),
        ("```text\nUse integer cents.\n```", "Use integer cents."),
        ("Looking at the failure...\n\n**Rule:** Use integer cents.", "Use integer cents."),
        ("- rule: `Use integer cents.`", "Use integer cents."),
        ('RULE: "Use integer cents."', "Use integer cents."),
        ("Rule: Use integer cents\nfor every amount.\n\nThat should fix it.",
         "Use integer cents for every amount."),
        ("NONE", None),
        ("none.", None),
        ("Rule: NONE", None),
        ("NONE - the instructions already cover this.", None),
        ("None of the answers used cents; always answer in cents.",
         "None of the answers used cents; always answer in cents."),
        ("", None),
        ("   \n ", None),
        ("```\n```", None),
    ],
)
def test_parse_rule_is_lenient(reply: str, rule: str | None) -> None:
    assert parse_rule(reply) == rule


def test_reflector_declining_gives_none() -> None:
    assert reflector(Recorder("NONE"))("", TASK, "$28.00", 0.0) is None
    assert reflector(Recorder(""))("", TASK, "$28.00", 0.0) is None


def test_reflector_refuses_bad_arguments() -> None:
    with pytest.raises(ContractError):
        reflector(lambda: "x")  # type: ignore[arg-type,misc]
    with pytest.raises(ContractError, match="meta_chars"):
        reflector(lambda p: p, meta_chars=1.5)  # type: ignore[arg-type]
