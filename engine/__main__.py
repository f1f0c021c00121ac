"""`python -m engine [train flags]`: the headless engine process (what the dashboard launches)."""

from engine.app.signals import catch_hangup

catch_hangup()  # first: an SSH drop while starting must not end the run (engine.app.signals)

from engine.app.startup import begin_process  # noqa: E402 - after the hang-up is caught, on purpose

begin_process()  # before the imports below: a launching dashboard shows a phase from the process's first instant

from engine.app.main import exit_now, main  # noqa: E402 - after the first phase, on purpose

exit_now(main(prog="python -m engine"))  # no module teardown after the run: engine.app.main.exit_now says why
