"""`sensorlm-tui` command line: argparse → headless | dashboard | plan | attach | runs | plot | presets | export.

Imports neither textual nor torch until a subcommand needs them, so `--help`
and `plan` are instant. Bare `sensorlm-tui` opens the dashboard on the demo run.
When stdin or stderr is not a terminal, `train` runs headless (a Textual app
without a TTY busy-spins), and so does an explicit `--headless`.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.core.cli_args import OneLineParser, add_train_arguments
from engine.core.exit_codes import ExitCode


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="sensorlm-tui",
        description="Train models from a terminal: live curves, predicted memory budget, pause, checkpoint-now, "
                    "attach over SSH. Bare `sensorlm-tui` opens the dashboard on the demo run.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)

    train = sub.add_parser("train", help="train a model (dashboard on a terminal, plain lines otherwise)")
    add_train_arguments(train)
    _add_view_arguments(train)
    train.add_argument("--in-process", action="store_true",
                       help="run the trainer inside the dashboard's worker thread instead of its own process")
    train.add_argument("--plot", nargs="?", const="", default=None, metavar="METRIC",
                       help="headless: when the run ends, draw its curves (METRIC, default the primary) with plotext")

    attach = sub.add_parser("attach", help="open the dashboard on a run started anywhere")
    attach.add_argument("run", nargs="?", help="run directory or name under ./runs (default: newest live run)")
    attach.add_argument("--read-only", action="store_true", help="watch only: control keys are disabled")
    attach.add_argument("--compare", metavar="OTHER", default=None,
                        help="overlay another run's curves (directory or name under ./runs), aligned by step")
    _add_view_arguments(attach)

    runs = sub.add_parser("runs", help="list runs: state, step, best primary metric, last checkpoint, age")
    runs.add_argument("dir", nargs="?", default="runs", help="directory holding runs (default ./runs)")
    runs.add_argument("--json", action="store_true", help="machine-readable output")

    plan = sub.add_parser("plan", help="predict memory, find the largest batch that fits, recommend settings")
    from engine.app.plan_cli import add_arguments
    add_arguments(plan)

    data = sub.add_parser("data", help="write a task's synthetic data set, or check a data directory")
    data_tasks = data.add_subparsers(dest="data_task", required=True, parser_class=OneLineParser)
    from engine.tasks.gapfill.data_cli import add_arguments as add_gapfill_data
    add_gapfill_data(data_tasks.add_parser("gapfill", help="six-band solar image shards + manifest (gap-filling)"))

    export = sub.add_parser("export", help="write a run's export (PEFT adapter, pretrained model) from a checkpoint")
    from engine.app.export_cmd import add_arguments as add_export_arguments
    add_export_arguments(export)

    plot = sub.add_parser("plot", help="draw a run's curves (or several runs overlaid) to standard output")
    from tui.commands.plot import add_arguments as add_plot_arguments
    add_plot_arguments(plot)

    presets = sub.add_parser("presets", help="list the tasks, and a task's presets with their parameter counts")
    presets.add_argument("--task", default=None, help="the task whose presets to list (default: the default task)")
    return parser


def _add_view_arguments(parser: argparse.ArgumentParser) -> None:
    view = parser.add_argument_group("dashboard")
    view.add_argument("--theme", default=None, type=_theme, help="dark, light, high-contrast or ansi")
    view.add_argument("--refresh", type=_refresh, default=None, metavar="HZ", help="plot redraws per second (<= 2)")
    view.add_argument("--ansi", action="store_true", help="16-colour mode for slow links")


def _theme(name: str) -> str:
    """--theme's value checked at parse time, so a headless run refuses a bad one too (exit 2, one line)."""
    from themes import ThemeError, resolve  # textual's Theme: imported only when --theme is given

    try:
        resolve(name)
    except ThemeError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--theme {name!r}: ")) from None
    return name


def _refresh(text: str) -> float:
    """--refresh checked at parse time, before `train` starts an engine (exit 2, one line)."""
    from tui.model.pace import check_refresh

    try:
        return check_refresh(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def _has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty() and sys.stdout.isatty()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sensorlm-tui` console script (``argv`` None: this process is the program, and a run
    trained here ends the process at once, engine.app.main.exit_now; tests pass ``argv`` and get the code)."""
    entry = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["train", *argv]  # bare `sensorlm-tui [train flags]` is the dashboard on the demo run
    if entry and argv[0] == "train":  # before the parser's imports: a hang-up while starting must not end the run
        from engine.app.signals import catch_hangup
        catch_hangup()
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"sensorlm-tui {version('sensorlm-tui')}")
        return 0
    try:
        if args.command == "train":
            code = _train(args, argv)
            if entry and "torch" in sys.modules:  # a run trained in this process: skip the interpreter's teardown
                from engine.app.main import exit_now
                exit_now(code)
            return code
        if args.command == "runs":
            from tui.commands.runs import main as runs_main
            return runs_main(args)
        if args.command == "plan":
            from engine.app.plan_cli import main as plan_main
            return plan_main(args)
        if args.command == "plot":
            from tui.commands.plot import main as plot_main
            return plot_main(args)
        if args.command == "presets":
            return _presets(args)
        if args.command == "data":
            from engine.tasks.gapfill.data_cli import main as gapfill_data
            return gapfill_data(args)
        if args.command == "export":
            from engine.app.export_cmd import main as export_main
            return export_main(args)
        if args.command == "attach":
            from tui.commands.attach import main as attach_main
            return attach_main(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `runs --json | head`: the reader has all it wanted
        return _reader_gone()
    parser.print_help()
    return ExitCode.BAD_INPUT


def _reader_gone() -> int:
    """Exit quietly when stdout's reader closed the pipe: 141 (128 + SIGPIPE), as `yes | head` does.

    stdout is pointed at /dev/null first, or the interpreter's final flush of the unsent buffer raises
    BrokenPipeError again at exit and prints a traceback after all.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def _train(args: argparse.Namespace, argv: list[str]) -> int:
    from engine.app.main import run_prepared
    from engine.app.prepare import UsageError, prepare
    from engine.distributed import launch

    if launch.wanted(args):  # --nproc-per-node: headless under torchrun; watch it with `attach`
        from engine.app.job_plan import refusal

        return launch.run(args, argv[1:] if argv[:1] == ["train"] else argv, preflight=refusal)

    headless = args.headless or not _has_terminal() or not _dashboard_available()
    if headless:  # its first phase at once, as the dashboard shows it (engine.app.startup)
        from engine.app.startup import tell_headless
        tell_headless()
    try:
        prepared = prepare(args)
    except UsageError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT
    if headless:
        try:
            code = run_prepared(prepared)
        except UsageError as exc:
            sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
            return ExitCode.BAD_INPUT
        if args.plot is not None:
            from tui.commands.plot import plot_after_run
            plot_after_run(prepared.run_dir.root, args.plot or None)
        return code
    from tui.commands.train import run_train_dashboard

    return run_train_dashboard(args, argv, prepared)


def _dashboard_available() -> bool:
    from importlib.util import find_spec

    return find_spec("tui.commands.run_dashboard") is not None and find_spec("tui.commands.train") is not None


def _presets(args: argparse.Namespace) -> int:
    from tui.commands.presets import main as presets_main

    return presets_main(args)


if __name__ == "__main__":
    sys.exit(main())
