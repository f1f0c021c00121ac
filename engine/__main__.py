"""`python -m engine [train flags]`: the headless engine process (what the dashboard launches)."""

from engine.app.startup import begin_process

begin_process()  # before the imports below: a launching dashboard shows a phase from the process's first instant

from engine.app.main import exit_now, main  # noqa: E402 - after the first phase, on purpose

exit_now(main(prog="python -m engine"))  # no module teardown after the run: engine.app.main.exit_now says why
