"""Line-level three-way merge of texts (git merge-file underneath)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdescent_core.artifacts.merge3 import Merge3Error, Merge3Result, merge3

BASE = "".join(f"line {i}\n" for i in range(1, 11))


def change(text: str, number: int, new: str) -> str:
    return text.replace(f"line {number}\n", f"{new}\n")


def test_non_overlapping_hunks_merge():
    ours = change(BASE, 2, "ours 2")
    theirs = change(BASE, 8, "theirs 8")
    result = merge3(BASE, ours, theirs)
    assert result == Merge3Result(change(ours, 8, "theirs 8"), 0)
    assert result.clean


def test_insertions_and_deletions_in_different_regions_merge():
    ours = "header\n" + BASE
    theirs = BASE.replace("line 9\n", "")
    result = merge3(BASE, ours, theirs)
    assert result.clean
    assert result.text == "header\n" + BASE.replace("line 9\n", "")


def test_same_change_on_both_sides_is_not_a_conflict():
    both = change(BASE, 5, "same edit")
    assert merge3(BASE, both, both) == Merge3Result(both, 0)
    # Identical hunk plus a distinct one elsewhere still merges.
    ours = change(both, 1, "ours 1")
    theirs = change(both, 10, "theirs 10")
    result = merge3(BASE, ours, theirs)
    assert result.clean
    assert result.text == change(ours, 10, "theirs 10")


def test_one_side_unchanged_takes_the_other():
    ours = change(BASE, 3, "x")
    assert merge3(BASE, ours, BASE).text == ours
    assert merge3(BASE, BASE, ours).text == ours


def test_overlapping_change_is_a_conflict_with_markers():
    ours = change(BASE, 5, "ours 5")
    theirs = change(BASE, 5, "theirs 5")
    result = merge3(BASE, ours, theirs)
    assert result.conflicts == 1
    assert not result.clean
    assert "<<<<<<< ours\nours 5\n=======\ntheirs 5\n>>>>>>> theirs\n" in result.text
    assert result.text.startswith("line 1\n")
    assert result.text.endswith("line 10\n")


def test_conflicts_are_counted():
    ours = change(change(BASE, 2, "o2"), 9, "o9")
    theirs = change(change(BASE, 2, "t2"), 9, "t9")
    result = merge3(BASE, ours, theirs)
    assert result.conflicts == 2
    assert result.text.count("<<<<<<<") == 2


def test_labels_name_the_sides():
    result = merge3("a\n", "b\n", "c\n", labels=("base branch", "ancestor", "ledger"))
    assert "<<<<<<< base branch\n" in result.text
    assert ">>>>>>> ledger\n" in result.text


def test_both_sides_adding_different_text_to_an_empty_base_conflicts():
    result = merge3("", "ours\n", "theirs\n")
    assert result.conflicts == 1


def test_missing_final_newline_and_crlf_survive():
    base = "a\r\nb\r\nc"
    ours = "A\r\nb\r\nc"
    theirs = "a\r\nb\r\nC"
    result = merge3(base, ours, theirs)
    assert result == Merge3Result("A\r\nb\r\nC", 0)


def test_unicode_text():
    base = "héllo\nwörld\n✓\n"
    result = merge3(base, base.replace("héllo", "HÉLLO"), base.replace("✓", "✗"))
    assert result == Merge3Result("HÉLLO\nwörld\n✗\n", 0)


def test_binary_content_is_an_error_not_a_conflict():
    with pytest.raises(Merge3Error, match="merge"):
        merge3("a\x00\n", "b\x00\n", "c\x00\n")


def test_user_git_config_does_not_change_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = tmp_path / "gitconfig"
    config.write_text("[merge]\n\tconflictStyle = diff3\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))
    result = merge3("a\n", "b\n", "c\n")
    assert "|||||||" not in result.text
    assert result.text == "<<<<<<< ours\nb\n=======\nc\n>>>>>>> theirs\n"
