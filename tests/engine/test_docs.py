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


def _printed_strings(path: Path):
    """(line, text) of every string constant in ``path`` that can reach a user (docstrings left out: only
    ``help()`` shows them), f-strings' literal parts included."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_every_document_the_program_cites_exists() -> None:
    """A line the program prints that points at a document (`plan`'s "measured on an H200 (…)", a config field's
    help, a bench page) names a file of this repository: a reader who follows it finds it."""
    import re

    root = README.parent
    cited = re.compile(r"[\w.-]+(?:/[\w.-]+)+\.md\b")
    missing, seen = [], 0
    for package in ("engine", "tui", "bench", "themes"):
        for source in sorted((root / package).rglob("*.py")):
            for line, text in _printed_strings(source):
                for path in cited.findall(text):
                    seen += 1
                    if not (root / path).is_file():
                        missing.append(f"{source.relative_to(root)}:{line}: {path}")
    assert seen >= 3, "the scan found no citations: the pattern no longer matches how the program cites"
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)
