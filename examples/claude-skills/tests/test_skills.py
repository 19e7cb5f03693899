"""What the team expects of its two skills, as ordinary pytest tests.

Every test marked ``evolve`` is a task of ``pytest --evolve skills/``.  The
model tests assert on properties of Claude's answer (a subject line of at most
50 characters, Keep a Changelog headings ...), which the skill text has to ask
for; the routing tests assert which skill a request picks, which depends on the
skills' descriptions alone.  The ``holdout=True`` tasks are never shown to the
proposer: they pass only if what it wrote into the skills is a general rule.
The guard keeps every SKILL.md a valid skill.
"""

from __future__ import annotations

import re

import anthropic
import pytest
from agent import SKILLS, choose_skill, load_skills, write_commit_message, write_release_notes

UPLOAD_TIMEOUT_DIFF = """\
diff --git a/src/uploads/client.py b/src/uploads/client.py
--- a/src/uploads/client.py
+++ b/src/uploads/client.py
@@ -9,7 +9,9 @@ from .retry import backoff
-UPLOAD_TIMEOUT_SECONDS = 5
+# Large files on slow links took longer than 5 seconds and were cut off.
+UPLOAD_TIMEOUT_SECONDS = 30
"""

DARK_MODE_DIFF = """\
diff --git a/web/settings.ts b/web/settings.ts
--- a/web/settings.ts
+++ b/web/settings.ts
@@ -3,6 +3,7 @@ export interface Settings {
   language: string;
+  theme: "light" | "dark";
 }
"""

PULL_REQUESTS = """\
#231 [feature] Export reports as CSV
#236 [bug] Dates in reports used the server's time zone instead of the user's
#240 [internal] Bump pytest to 8.3
#244 [feature] Dark mode for the dashboard
#247 [internal] Refactor the report builder
"""
USER_FACING = (231, 236, 244)
INTERNAL = (240, 247)


def route(request: str) -> str | None:
    skill = choose_skill(request, load_skills())
    return skill.name if skill else None


def subject_of(message: str) -> str:
    return message.strip().splitlines()[0]


# -------------------------------------------------------------- commit-message

@pytest.mark.evolve
def test_commit_subject_fits_in_50_characters(claude: anthropic.Anthropic) -> None:
    subject = subject_of(write_commit_message(UPLOAD_TIMEOUT_DIFF, "fix/482-upload-timeout",
                                              client=claude))
    assert len(subject) <= 50


@pytest.mark.evolve
def test_commit_subject_is_in_the_imperative(claude: anthropic.Anthropic) -> None:
    subject = subject_of(write_commit_message(UPLOAD_TIMEOUT_DIFF, "fix/482-upload-timeout",
                                              client=claude))
    first_word = subject.split()[0].lower()
    assert not first_word.endswith("ed")
    assert not re.fullmatch(r"\w+[^s]s", first_word)  # "Adds", "Fixes" (not "Process")


@pytest.mark.evolve
def test_commit_subject_has_no_trailing_period(claude: anthropic.Anthropic) -> None:
    subject = subject_of(write_commit_message(UPLOAD_TIMEOUT_DIFF, "fix/482-upload-timeout",
                                              client=claude))
    assert not subject.endswith(".")


@pytest.mark.evolve
def test_commit_body_follows_a_blank_line(claude: anthropic.Anthropic) -> None:
    lines = write_commit_message(UPLOAD_TIMEOUT_DIFF, "fix/482-upload-timeout",
                                 client=claude).strip().splitlines()
    assert len(lines) >= 3
    assert lines[1] == ""


@pytest.mark.evolve
def test_commit_references_the_issue_of_the_branch(claude: anthropic.Anthropic) -> None:
    message = write_commit_message(UPLOAD_TIMEOUT_DIFF, "fix/482-upload-timeout", client=claude)
    assert message.strip().splitlines()[-1] == "Refs #482"


@pytest.mark.evolve(holdout=True)
def test_commit_references_the_issue_of_a_feature_branch(claude: anthropic.Anthropic) -> None:
    message = write_commit_message(DARK_MODE_DIFF, "feat/97-dark-mode", client=claude)
    assert message.strip().splitlines()[-1] == "Refs #97"


# -------------------------------------------------------------- release-notes

@pytest.mark.evolve
def test_release_notes_name_the_version(claude: anthropic.Anthropic) -> None:
    notes = write_release_notes("2.3.0", PULL_REQUESTS, client=claude)
    assert "2.3.0" in notes.strip().splitlines()[0]


@pytest.mark.evolve
def test_release_notes_group_changes_as_added_and_fixed(claude: anthropic.Anthropic) -> None:
    notes = write_release_notes("2.3.0", PULL_REQUESTS, client=claude)
    headings = [line.strip() for line in notes.splitlines() if line.startswith("#")]
    assert "### Added" in headings
    assert "### Fixed" in headings


@pytest.mark.evolve
def test_release_notes_link_every_pull_request(claude: anthropic.Anthropic) -> None:
    notes = write_release_notes("2.3.0", PULL_REQUESTS, client=claude)
    missing = [number for number in USER_FACING if f"(#{number})" not in notes]
    assert missing == []


@pytest.mark.evolve
def test_release_notes_leave_out_internal_changes(claude: anthropic.Anthropic) -> None:
    notes = write_release_notes("2.3.0", PULL_REQUESTS, client=claude)
    mentioned = [number for number in INTERNAL if f"#{number}" in notes]
    assert mentioned == []


# -------------------------------------------------------------- which skill is used

@pytest.mark.evolve
def test_a_changelog_request_uses_the_release_notes_skill() -> None:
    assert route("Update CHANGELOG.md for the 2.4.0 tag") == "release-notes"


@pytest.mark.evolve
def test_a_staged_changes_request_uses_the_commit_skill() -> None:
    assert route("Describe my staged changes for the commit") == "commit-message"


@pytest.mark.evolve(holdout=True)
def test_a_changelog_question_uses_the_release_notes_skill() -> None:
    assert route("What should go in the changelog this time?") == "release-notes"


# -------------------------------------------------------------- the guard

NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@pytest.mark.evolve_guard
def test_skills_are_well_formed() -> None:
    """Claude's rules for a skill: a frontmatter name (lower-case words joined by '-',
    at most 64 characters, the folder's name) and a description of at most 1024."""
    skills = load_skills()  # raises on a SKILL.md without frontmatter
    assert sorted(s.name for s in skills) == ["commit-message", "release-notes"]
    for skill in skills:
        assert NAME.fullmatch(skill.name), f"{skill.path}: bad name {skill.name!r}"
        assert len(skill.name) <= 64
        assert skill.path.parent.name == skill.name
        assert 0 < len(skill.description) <= 1024, f"{skill.path}: description length"
        assert len(skill.body.splitlines()) <= 80, f"{skill.path} is too long"
    assert len(list(SKILLS.glob("*/SKILL.md"))) == len(skills)
