"""The README's config reference matches the code (regenerate with `python -m engine.core.docgen`)."""

from pathlib import Path

from engine.core.docgen import render

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_config_reference_is_current() -> None:
    text = README.read_text()
    assert render(text) == text, "README config reference is stale: run `python -m engine.core.docgen`"


def test_readme_has_the_three_commands() -> None:
    text = README.read_text()
    assert "pip install torch==2.13.0 -e '.[dev]'" in text
    assert ".venv/bin/sensorlm-tui\n" in text
    assert ".venv/bin/python -m pytest -q" in text
