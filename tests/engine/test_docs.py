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


def test_readme_commands_run_as_written_after_its_install(tmp_path: Path) -> None:
    """The README's commands are written as its install runs them (`.venv/bin/sensorlm-tui`: the install does
    not put the name on PATH), and the ones that need nothing made first run as written from a fresh shell in
    the directory installed in (here: a directory whose .venv is this interpreter's)."""
    import os
    import re
    import subprocess
    import sys

    text = README.read_text()
    prose = text.split("<!-- config-reference:start -->")[0] + text.split("<!-- config-reference:end -->")[1]
    bare = [line for line in prose.splitlines()[1:] if re.search(r"(?<![\w/.-])sensorlm-tui (?!works)", line)]
    assert not bare, "a command written `sensorlm-tui …` is 'command not found' after the README's install:\n" + \
        "\n".join(bare)
    written = re.findall(r"`(\.venv/bin/sensorlm-tui[^`]*)`", prose)
    assert len(written) >= 15
    ready = [c for c in written if not re.search(r"\[|…|\b[A-Z_]{3,}\b|\bruns/", c) and (
        " plan " in c or c.endswith((" presets", " --help")))]
    assert len(ready) >= 3, ready
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
           "PYTHONPATH": str(README.parent)}
    for command in ready:
        ran = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
        assert ran.returncode == 0 and ran.stdout, f"{command}: exit {ran.returncode}\n{ran.stderr[-2000:]}"
