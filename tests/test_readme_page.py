"""The README is a user's page (issue 29): its sections in a user's order, under 350 lines, opening as the field's
best do (issue 44: one line, highlights, install, the two commands); the GitHub Actions steps the reference shows are
the ones of the job file that tests/test_ci_example.py runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["Install", "Quickstart", "Your own environment", "For environment authors", "Train", "Check in CI",
         "Troubleshooting"]


def test_a_users_page_in_a_users_order():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 350
    headings = [h for h in re.findall(r"^## (.+)$", text, re.MULTILINE) if h != "Contents"]
    assert [next(o for o in ORDER if h.startswith(o)) for h in headings] == ORDER, headings


def test_the_first_screen_says_what_it_is_then_highlights_install_and_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first = text[:text.index("\n## ")]
    title, line, highlights = first.split("\n\n")[:3]
    assert title == "# orsgen" and line.count("\n") <= 1 and "ORS" in line and "GRPOTrainer" in line
    assert 3 <= len(re.findall(r"^- \*\*", highlights, re.MULTILINE)) <= 5, highlights
    assert first.index("pip install") < first.index("make demo") < first.index("make test")
    assert len(first.splitlines()) <= 40  # a screen


def test_the_ci_steps_shown_are_the_job_files():
    text = (ROOT / "docs" / "reference.md").read_text()
    job = (ROOT / "examples/ci/orsgen-check.yml").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) if "ORSGEN_PORT" in b]
    assert blocks, "no GitHub Actions steps in the README"
    for block in blocks:
        steps = [step for step in re.split(r"(?m)^(?=      - name: )", block) if step]
        assert steps and all(step in job for step in steps), steps
