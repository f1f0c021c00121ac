"""`python -m engine [train flags]`: the headless engine process (what the dashboard launches)."""

import sys

from engine.app.startup import begin_process

begin_process()  # before the imports below: a launching dashboard shows a phase from the process's first instant

from engine.app.main import main  # noqa: E402 - after the first phase, on purpose

sys.exit(main(prog="python -m engine"))
