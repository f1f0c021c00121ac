"""Regenerate the README's config reference from the pydantic models: `python -m engine.core.docgen`.

A test checks the README is current, so the documented fields can never drift
from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.core.config import fields_reference

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _table(rows_in) -> list[str]:
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, kind, default, description in rows_in:
        kind = kind.replace("|", "\\|")
        rows.append(f"| `{name}` | {kind} | `{default}` | {description.replace('|', '/')} |")
    return rows


def table() -> str:
    """Markdown tables: the shared sections, then each built-in task's own section (plugins document theirs)."""
    from engine.core.registry import BUILTIN_SPECS, get_spec

    out = ["Shared by every task:", "", *_table(fields_reference())]
    for name in BUILTIN_SPECS:
        spec = get_spec(name)
        out += ["", f"Task `{name}` (`--task {name}`; section `[{name}]`): {spec.summary}", "",
                *_table(fields_reference(name))]
    return "\n".join(out)


def render(readme: str) -> str:
    """README text with the reference section replaced."""
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    """Rewrite README.md in place."""
    path = Path(__file__).resolve().parents[2] / "README.md"
    path.write_text(render(path.read_text()))
    print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
