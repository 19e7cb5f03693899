"""The edit protocol parser: lenient about JSON framing, strict about where edits go."""

from __future__ import annotations

import json

import pytest

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import RefusalError
from agentdescent_core.proposers.protocol import EXPECTED_SHAPE, EditProposal, parse_edit_answer

FILES = {
    "skills/greet/SKILL.md": "# Greet\nSay hello to the user.\nBe brief.\n",
    "skills/notes.md": "one\ntwo\ntwo\n",
}

ANSWER = {
    "rationale": "Greetings must name the user.",
    "edits": [
        {"path": "skills/greet/SKILL.md", "search": "Say hello", "replace": "Say hello by name"}
    ],
}
EXPECTED_OPS: dict[str, str | None] = {
    "skills/greet/SKILL.md": "# Greet\nSay hello by name to the user.\nBe brief.\n"}


def refusal(text: str, files: dict[str, str] | None = None) -> RefusalError:
    with pytest.raises(RefusalError) as info:
        parse_edit_answer(text, FILES if files is None else files)
    return info.value


# ---------------------------------------------------------------------- lenient framing


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(json.dumps(ANSWER), id="bare"),
        pytest.param(json.dumps(ANSWER, indent=2), id="bare-indented"),
        pytest.param(f"```json\n{json.dumps(ANSWER, indent=2)}\n```", id="json-fence"),
        pytest.param(f"```\n{json.dumps(ANSWER)}\n```", id="plain-fence"),
        pytest.param(
            f"Looking at the failure, the skill never uses the name.\n\n```json\n"
            f"{json.dumps(ANSWER, indent=2)}\n```\n\nThis should fix it.",
            id="prose-around-fence",
        ),
        pytest.param(f"Here is my edit: {json.dumps(ANSWER)} -- hope it helps", id="inline-prose"),
        pytest.param(
            f"Templates use {{name}} and {{ greeting }} placeholders.\n{json.dumps(ANSWER)}",
            id="braces-in-prose",
        ),
        pytest.param(
            'For example {"a": 1} is JSON. My answer:\n' + json.dumps(ANSWER),
            id="other-object-first",
        ),
    ],
)
def test_framings_are_accepted(text):
    proposal = parse_edit_answer(text, FILES)
    assert proposal == EditProposal(rationale="Greetings must name the user.", ops=EXPECTED_OPS)


def test_trailing_commas_are_tolerated():
    text = """```json
{
  "rationale": "name the user",
  "edits": [
    {"path": "skills/greet/SKILL.md", "search": "Say hello", "replace": "Say hello by name",},
  ],
}
```"""
    assert parse_edit_answer(text, FILES).ops == EXPECTED_OPS


def test_commas_inside_strings_are_kept_when_fixing_trailing_commas():
    text = (
        '{"rationale": "a, b,]", "edits": [{"path": "skills/new.md", '
        '"content": "x,}\\n y, ]",},]}'
    )
    proposal = parse_edit_answer(text, FILES)
    assert proposal.rationale == "a, b,]"
    assert proposal.ops == {"skills/new.md": "x,}\n y, ]"}


def test_raw_newlines_inside_strings_are_tolerated():
    text = '{"rationale": "r", "edits": [{"path": "skills/a.md", "content": "line 1\nline 2\n"}]}'
    assert parse_edit_answer(text, FILES).ops == {"skills/a.md": "line 1\nline 2\n"}


def test_content_containing_code_fences_survives_the_fence_around_the_answer():
    content = "# Tool\n```python\nprint('hi')\n```\n"
    answer = {"rationale": "doc", "edits": [{"path": "skills/tool.md", "content": content}]}
    text = f"```json\n{json.dumps(answer, indent=1)}\n```"
    assert parse_edit_answer(text, FILES).ops == {"skills/tool.md": content}


def test_the_object_with_edits_wins_over_an_earlier_example_object():
    text = (
        'The format is {"rationale": "...", "note": "x"}.\n'
        '{"rationale": "real", "edits": [{"path": "skills/a.md", "content": "A"}]}'
    )
    assert parse_edit_answer(text, FILES) == EditProposal("real", {"skills/a.md": "A"})


# ---------------------------------------------------------------------- edit kinds


def test_content_delete_and_search_edits_together():
    answer = {
        "rationale": "  restructure  ",
        "edits": [
            {"path": "skills/new/SKILL.md", "content": "# New\n"},
            {"path": "skills/notes.md", "delete": True},
            {"path": "skills/greet/SKILL.md", "search": "Be brief.", "replace": "Be warm."},
        ],
    }
    proposal = parse_edit_answer(json.dumps(answer), FILES)
    assert proposal.rationale == "restructure"
    assert proposal.ops == {
        "skills/new/SKILL.md": "# New\n",
        "skills/notes.md": None,
        "skills/greet/SKILL.md": "# Greet\nSay hello to the user.\nBe warm.\n",
    }
    assert list(proposal.ops) == ["skills/new/SKILL.md", "skills/notes.md",
                                  "skills/greet/SKILL.md"]


def test_search_edits_of_one_file_chain_in_order():
    answer = {
        "rationale": "two steps",
        "edits": [
            {"path": "skills/greet/SKILL.md", "search": "hello", "replace": "hi"},
            {"path": "skills/greet/SKILL.md", "search": "Say hi", "replace": "Wave and say hi"},
        ],
    }
    ops = parse_edit_answer(json.dumps(answer), FILES).ops
    assert ops == {"skills/greet/SKILL.md": "# Greet\nWave and say hi to the user.\nBe brief.\n"}


def test_search_after_content_edits_the_new_content():
    answer = {
        "rationale": "r",
        "edits": [
            {"path": "skills/x.md", "content": "alpha beta\n"},
            {"path": "skills/x.md", "search": "beta", "replace": "gamma"},
        ],
    }
    assert parse_edit_answer(json.dumps(answer), FILES).ops == {"skills/x.md": "alpha gamma\n"}


def test_replacement_text_is_literal_not_a_regex_template():
    answer = {"rationale": "r", "edits": [
        {"path": "skills/notes.md", "search": "one", "replace": r"\1 $0 \g<0>"}
    ]}
    assert parse_edit_answer(json.dumps(answer), FILES).ops == {
        "skills/notes.md": "\\1 $0 \\g<0>\ntwo\ntwo\n"
    }


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("./skills//greet/SKILL.md", "skills/greet/SKILL.md"),
        ("skills\\greet\\SKILL.md", "skills/greet/SKILL.md"),
        ("  skills/greet/SKILL.md ", "skills/greet/SKILL.md"),
    ],
)
def test_paths_are_normalised_before_lookup(raw, normal):
    answer = {"rationale": "r", "edits": [{"path": raw, "search": "Be brief", "replace": "Go"}]}
    assert parse_edit_answer(json.dumps(answer), FILES).ops == {
        normal: "# Greet\nSay hello to the user.\nGo.\n"
    }


def test_rationale_may_be_missing_and_edits_empty():
    assert parse_edit_answer('{"edits": []}', FILES) == EditProposal("", {})
    assert parse_edit_answer('{"rationale": null, "edits": []}', FILES).rationale == ""


# ---------------------------------------------------------------------- refusals


def test_no_json_is_refused_with_the_expected_format():
    err = refusal("I think the skill should greet the user by name.")
    assert (err.category, err.code) == ("invalid-proposal", "no-json")
    assert EXPECTED_SHAPE in err.message


def test_broken_json_is_no_json():
    err = refusal('```json\n{"rationale": "r", "edits": [{"path": "a.md", "content": \n```')
    assert err.code == "no-json"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"rationale": "r"}, 'no "edits"'),
        ({"rationale": "r", "edits": {"path": "skills/a.md"}}, '"edits" is an object'),
        ({"rationale": 3, "edits": []}, '"rationale" is a number'),
        ({"rationale": "r", "edits": ["skills/a.md"]}, "edit 0 is a string"),
        ({"rationale": "r", "edits": [{"content": "x"}]}, 'edit 0 has no "path"'),
        ({"rationale": "r", "edits": [{"path": "skills/a.md"}]}, "it has none of them"),
        (
            {"rationale": "r", "edits": [{"path": "skills/a.md", "content": "x", "search": "y",
                                          "replace": "z"}]},
            'it has "content", "search", "replace"',
        ),
        ({"rationale": "r", "edits": [{"path": "skills/a.md", "delete": False}]},
         '"delete" must be true'),
        ({"rationale": "r", "edits": [{"path": "skills/a.md", "content": None}]},
         '"delete": true'),
        ({"rationale": "r", "edits": [{"path": "skills/a.md", "search": "x"}]}, 'it has "search"'),
        ({"rationale": "r", "edits": [{"path": "skills/notes.md", "search": "", "replace": "x"}]},
         '"search" is empty'),
        ({"rationale": "r", "edits": [{"path": "skills/notes.md", "search": "one",
                                       "replace": 1}]},
         "must both be strings"),
    ],
)
def test_wrong_shapes_are_refused_saying_what_was_expected(answer, says):
    err = refusal(json.dumps(answer))
    assert (err.category, err.code) == ("invalid-proposal", "bad-shape")
    assert says in err.message
    assert EXPECTED_SHAPE in err.message


def test_a_top_level_list_is_not_an_answer():
    err = refusal('[{"path": "skills/a.md", "content": "x"}]')
    assert err.code == "bad-shape"


def test_search_that_does_not_match_is_refused_with_path_and_snippet():
    answer = {"rationale": "r", "edits": [
        {"path": "skills/greet/SKILL.md", "search": "Say  hello", "replace": "x"}
    ]}
    err = refusal(json.dumps(answer))
    assert (err.category, err.code) == ("invalid-proposal", "search-not-found")
    assert err.path == "skills/greet/SKILL.md"
    assert "'skills/greet/SKILL.md'" in err.message
    assert "'Say  hello'" in err.message


def test_search_in_a_missing_file_is_not_found():
    answer = {"rationale": "r", "edits": [{"path": "skills/nope.md", "search": "a",
                                           "replace": "b"}]}
    err = refusal(json.dumps(answer))
    assert err.code == "search-not-found"
    assert "does not exist" in err.message


def test_search_after_delete_of_the_same_file_is_not_found():
    answer = {"rationale": "r", "edits": [
        {"path": "skills/notes.md", "delete": True},
        {"path": "skills/notes.md", "search": "one", "replace": "1"},
    ]}
    assert refusal(json.dumps(answer)).code == "search-not-found"


def test_search_that_matches_twice_is_ambiguous():
    answer = {"rationale": "r", "edits": [{"path": "skills/notes.md", "search": "two",
                                           "replace": "2"}]}
    err = refusal(json.dumps(answer))
    assert (err.category, err.code) == ("invalid-proposal", "search-ambiguous")
    assert "2 times" in err.message
    assert "'two'" in err.message


def test_overlapping_matches_are_ambiguous_too():
    answer = {"rationale": "r", "edits": [{"path": "skills/a.md", "search": "aa",
                                           "replace": "b"}]}
    err = refusal(json.dumps(answer), {"skills/a.md": "aaa"})
    assert err.code == "search-ambiguous"
    assert "overlapping" in err.message


def test_long_search_snippets_are_shortened():
    search = "x" * 500
    answer = {"rationale": "r", "edits": [{"path": "skills/notes.md", "search": search,
                                           "replace": "y"}]}
    err = refusal(json.dumps(answer))
    assert "x" * 60 + "…" in err.message
    assert "x" * 61 not in err.message


def test_a_second_whole_file_edit_of_one_path_is_refused():
    answer = {"rationale": "r", "edits": [
        {"path": "skills/a.md", "content": "A"},
        {"path": "./skills/a.md", "delete": True},
    ]}
    err = refusal(json.dumps(answer))
    assert (err.category, err.code) == ("invalid-proposal", "duplicate-path")
    assert err.path == "skills/a.md"


@pytest.mark.parametrize(
    ("path", "code"),
    [("../outside.md", "parent-traversal"), ("/etc/passwd", "absolute-path"),
     ("skills/.git/config", "git-internal")],
)
def test_paths_that_leave_the_repository_are_refused(path, code):
    answer = {"rationale": "r", "edits": [{"path": path, "content": "x"}]}
    err = refusal(json.dumps(answer))
    assert (err.category, err.code) == ("invalid-proposal", code)


def test_artifact_rules_are_left_to_the_filetree():
    """The parser accepts a frozen/outside path; FileTree.validate_ops is what refuses it."""
    answer = {"rationale": "r", "edits": [
        {"path": "tests/test_skill.py", "content": "assert True\n"},
        {"path": "src/app.py", "content": "x = 1\n"},
    ]}
    ops = parse_edit_answer(json.dumps(answer), FILES).ops
    assert set(ops) == {"tests/test_skill.py", "src/app.py"}
    tree = FileTree(["skills"])
    with pytest.raises(RefusalError) as info:
        tree.validate_ops(ops)
    assert info.value.code == "outside-artifact"


def test_the_parsed_ops_feed_a_filetree_diff():
    proposal = parse_edit_answer(json.dumps(ANSWER), FILES)
    diff = FileTree(["skills"]).to_diff(FILES, proposal.ops, "model", 0, "artifact",
                                        rationale=proposal.rationale)
    assert diff is not None
    assert dict(diff.ops) == EXPECTED_OPS
    assert diff.rationale == "Greetings must name the user."


def test_non_text_answer_is_a_type_error():
    with pytest.raises(TypeError, match="str"):
        parse_edit_answer(None, FILES)  # type: ignore[arg-type]
