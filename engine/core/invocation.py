"""The commands the program prints for the user to type next, written so they run as printed.

A detach line's attach command, an exit line's resume command, `runs`' hint: each must run when pasted into a
fresh shell in the user's directory. The README's install puts the program in ``.venv/bin``, not on PATH, so
a bare ``sensorlm-tui`` there is "command not found". The program is therefore written as what runs from
here, decided from this interpreter's installation rather than from how the name was typed (a process the
dashboard launched, or a torchrun rank, sees the same interpreter and directory, so it writes the same):

- ``sensorlm-tui`` when that name on PATH is this installation's own script (an activated venv, pipx, a
  system install): the short form, and what the user typed;
- else that script's path, relative when it is under the current directory (``.venv/bin/sensorlm-tui``,
  as the README starts it), absolute otherwise;
- else (no console script beside this interpreter: a checkout run as ``python -m tui.cli``) this
  interpreter running the module.

Each further word (a run directory, a flag's value) is quoted for a POSIX shell. A word holding control
characters (a hostile run name) is written in bash's ``$'…'`` form with them escaped: the line is both safe
to print on a terminal and exact when pasted. Torch-free.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

#: The console script pyproject.toml installs.
SCRIPT = "sensorlm-tui"


def program() -> str:
    """How to start this program from the current directory (module docstring), quoted for a shell."""
    beside = Path(sys.executable).parent / SCRIPT
    if beside.is_file():
        found = shutil.which(SCRIPT)
        if found is not None and _same_file(found, beside):
            return SCRIPT
        return shell_word(_from_here(beside))
    return f"{shell_word(_from_here(Path(sys.executable)))} -m tui.cli"


def command(*words: object) -> str:
    """``program()`` followed by ``words``, each quoted for a shell: ``command("attach", run_dir)``."""
    return " ".join([program(), *(shell_word(str(word)) for word in words)])


def shell_word(word: str) -> str:
    """``word`` as one shell word: as is when safe, single-quoted when it holds spaces or shell characters,
    ``$'…'`` with escapes when it holds characters a terminal would act on (module docstring)."""
    if word.isprintable():
        return shlex.quote(word)
    out = []
    for ch in word:
        code = ord(ch)
        if ch in "'\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape): that byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "$'" + "".join(out) + "'"


def _same_file(a: str | Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _from_here(path: Path) -> str:
    """``path`` relative to the current directory when it lies under it (``.venv/bin/…``), else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except (ValueError, OSError):
        return str(absolute)
    return str(relative) if len(relative.parts) > 1 else f"./{relative}"  # a bare name would search PATH
