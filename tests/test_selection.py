"""Read-based selection's rules: what a change touches, which reads it meets, what is kept."""

from __future__ import annotations

import pytest

from agentdescent_core.evaluation.records import TestRecord
from agentdescent_core.evaluation.selection import (
    ReadIndex,
    SelectionBook,
    reaches,
    touched_paths,
)
from pytest_agentdescent.selecting import SelectionLog
from pytest_agentdescent.terminal import round_line

BASE = {"skills/a/SKILL.md": "a", "skills/b/SKILL.md": "b", "skills/b/notes.md": "n"}


def test_an_edited_file_is_touched_but_no_listing_is() -> None:
    after = {**BASE, "skills/a/SKILL.md": "a2"}
    assert touched_paths(BASE, after) == {"skills/a/SKILL.md"}


def test_an_added_or_removed_entry_touches_the_listing_of_its_directory() -> None:
    added = {**BASE, "skills/c/SKILL.md": "c"}
    assert touched_paths(BASE, added) == {"skills/c/SKILL.md", "skills/c/", "skills/"}
    removed = {k: v for k, v in BASE.items() if k != "skills/b/notes.md"}
    assert touched_paths(BASE, removed) == {"skills/b/notes.md", "skills/b/"}
    gone = {k: v for k, v in BASE.items() if not k.startswith("skills/b/")}
    assert touched_paths(BASE, gone) == {"skills/b/SKILL.md", "skills/b/notes.md",
                                         "skills/b/", "skills/"}
    top = {**BASE, "AGENTS.md": "x"}  # a root-level file: the listing of the top folder
    assert touched_paths(BASE, top) == {"AGENTS.md", "./"}


def test_reaches_names_the_read_a_change_meets() -> None:
    touched = touched_paths(BASE, {**BASE, "skills/c/SKILL.md": "c"})
    assert reaches(["skills/a/SKILL.md"], touched) is None
    assert reaches(["skills/a/SKILL.md", "skills/"], touched) == "skills/"
    assert reaches(["skills"], touched) == "skills"  # an open() of the directory itself
    assert reaches(["skills/b/"], touched) is None  # that listing did not change


def test_a_test_without_traced_reads_always_runs_and_a_failed_tracer_sticks() -> None:
    index = ReadIndex()
    touched = frozenset({"skills/a/SKILL.md"})
    assert index.why("t", touched) == "no recorded reads"
    index.record("t", ("skills/b/SKILL.md",), traced=True)
    assert index.why("t", touched) is None
    index.record("t", None, traced=False)  # a cache record from before tracing: no news
    assert index.why("t", touched) is None
    index.record("t", None, traced=True)  # tracing was on and came back empty-handed
    assert index.why("t", touched) == "tracer failed"


def test_reads_that_vary_between_runs_are_united() -> None:
    index = ReadIndex()
    index.record("t", ("skills/a/SKILL.md",), traced=True)
    index.record("t", ("skills/b/notes.md",), traced=True)
    assert index.why("t", frozenset({"skills/b/notes.md"})) == "reads skills/b/notes.md"


def _book_with_base(mode: str = "reads") -> SelectionBook:
    book = SelectionBook(mode, guards=["guard"])
    book.seen("base", BASE)
    for nodeid, read in (("ta", "skills/a/SKILL.md"), ("tb", "skills/b/SKILL.md"),
                         ("guard", "skills/a/SKILL.md")):
        book.ran("base", [TestRecord(nodeid, "passed", 1.0, reads=(read,))], traced=True)
        book.holds("base", (nodeid, 0))
    return book


def test_a_candidate_keeps_the_evidence_of_tests_its_change_cannot_reach() -> None:
    book = _book_with_base()
    book.seen("cand", {**BASE, "skills/a/SKILL.md": "a2"})
    assert book.donor("cand", ("tb", 0)) == "base"
    assert book.donor("cand", ("ta", 0)) is None
    assert book.donor("cand", ("guard", 0)) is None  # guards always run
    assert book.donor("cand", ("tb", 1)) is None  # no run 1 anywhere to keep
    assert book.kept("cand") == [("tb", 0)]
    selection = book.select("base", "cand", ["ta", "tb"])
    assert selection.selected == ("ta",)
    assert selection.why == {"ta": "reads skills/a/SKILL.md"}
    assert selection.touched == ("skills/a/SKILL.md",)


def test_under_all_every_test_runs_and_is_logged() -> None:
    book = _book_with_base("all")
    book.seen("cand", {**BASE, "skills/a/SKILL.md": "a2"})
    assert book.donor("cand", ("tb", 0)) is None
    assert book.select("base", "cand", ["ta", "tb"]).selected == ("ta", "tb")


def test_a_miss_is_named_counted_and_its_test_then_always_runs() -> None:
    book = _book_with_base()
    book.seen("cand", {**BASE, "skills/a/SKILL.md": "a2"})
    kept = {("tb", 0): TestRecord("tb", "passed", 1.0)}
    fresh = {("tb", 0): TestRecord("tb", "failed", 0.0)}
    assert book.confirm("cand", kept, kept) == []
    assert book.confirm("cand", kept, fresh) == ["tb"]
    assert book.misses == [{"test": "tb", "state": "cand", "kept": "passed", "fresh": "failed"}]
    assert book.index.why("tb", frozenset()) == "selection miss"
    assert book.donor("cand", ("tb", 0)) is None


def test_an_unknown_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"reads\|all"):
        SelectionBook("some")


def test_the_round_line_and_the_report_say_what_ran() -> None:
    book = _book_with_base()
    book.seen("cand", {**BASE, "skills/a/SKILL.md": "a2"})
    log = SelectionLog(book)
    book.select("base", "cand", ["ta", "tb"])
    book.ran("cand", [TestRecord("ta", "passed", 1.0, reads=("skills/a/SKILL.md",))],
             traced=True)
    words = log.close_round(1)
    assert words == "ran 1 of 2 tests (reads)"
    assert log.close_round(2) is None  # nothing new in round 2
    # later runs at the state (it is now the base later candidates pair against) are not
    # what judging it cost
    book.ran("cand", [TestRecord("tb", "passed", 1.0, repeat=1)], traced=True)
    report = log.report(tests=2)
    assert report["mode"] == "reads"
    assert report["candidates"] == 1
    assert report["candidate_runs"] == 1
    assert report["per_candidate"][0]["round"] == 1
    assert report["per_candidate"][0]["selected"] == ["ta"]
    from agentdescent_core.loop.result import RoundInfo

    line = round_line(RoundInfo(round=1, reward=0.5), total=3, previous=None, calls=1,
                      elapsed=1.0, ran=words)
    assert line.endswith("ran 1 of 2 tests (reads)")


def test_report_md_lists_per_candidate_what_re_ran_and_why() -> None:
    from agentdescent_core.report import render_markdown

    book = _book_with_base()
    book.seen("cand", {**BASE, "skills/a/SKILL.md": "a2"})
    log = SelectionLog(book)
    book.select("base", "cand", ["ta", "tb"])
    log.close_round(1)
    block = log.report(tests=2)
    block["misses"] = ["tb"]
    text = render_markdown({"selection": block})
    assert "## Tests re-run per candidate" in text
    assert "| 1 | `cand` | skills/a/SKILL.md | 1 of 2 | reads skills/a/SKILL.md ×1 |" in text
    assert "1 selection miss(es)" in text
    assert "`tb`" in text
    assert "re-run per candidate" not in render_markdown({})
