"""Regenerate the README's config reference from the pydantic models: `python -m engine.docgen`.

A test checks the README is current, so the documented fields can never drift
from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.config import fields_reference

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def table() -> str:
    """The markdown table of every config field."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, kind, default, description in fields_reference():
        kind = kind.replace("|", "\\|")
        rows.append(f"| `{name}` | {kind} | `{default}` | {description.replace('|', '/')} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    """README text with the reference section replaced."""
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    """Rewrite README.md in place."""
    path = Path(__file__).resolve().parents[1] / "README.md"
    path.write_text(render(path.read_text()))
    print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
