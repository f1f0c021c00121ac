"""`python -m engine [train flags]`: the headless engine process (what the dashboard launches)."""

import sys

from engine.app.main import main

sys.exit(main(prog="python -m engine"))
