"""The `train` flags, shared by `sensorlm-tui train` and `python -m engine`, and their mapping onto the config.

Torch-free and textual-free, so `--help` is instant. Errors are one line:
``sensorlm-tui: --batch-size=0 (train.batch_size): must be >= 1``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from engine.core.config import SETTING_FLAGS, ConfigError
from engine.core.registry import DEFAULT_TASK

#: flag dest → dotted config field it sets.
FLAG_FIELDS: dict[str, str] = {
    "task": "task.name",
    "preset": "task.preset",
    "data": "data.path",
    "max_steps": "train.max_steps",
    "eval_every": "evaluation.every",
    "batch_size": "train.batch_size",
    "grad_accum": "train.grad_accum",
    "lr": "optimizer.lr",
    "seed": "train.seed",
    "schedule": "schedule.kind",
    "precision": "runtime.precision",
    "overfit": "evaluation.overfit",
    "steps_per_epoch": "train.steps_per_epoch",
    "epochs": "train.epochs",
    "device": "runtime.device",
    "threads": "runtime.threads",
    "on_hangup": "policies.on_hangup",
    "strategy": "runtime.strategy",
    "compile": "runtime.compile",
    "checkpoint_every": "checkpoint.every_steps",
    "vram_gb": "budget.vram_gb",
    "name": "name",
}


#: How ``--strategy`` spreads a model over ranks (what the start guard may suggest instead).
STRATEGIES = ("ddp", "fsdp2")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump) and exits 2, and takes no abbreviations:
    ``--max-step 10`` is an unknown flag, never silently ``--max-steps`` (nor a later flag's prefix)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        message = message.replace("argument ", "")
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def _integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    return value


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `train` flag (each also settable in the TOML file; see the README's config reference)."""
    g = parser.add_argument_group("run")
    g.add_argument("--config", metavar="TOML", help="TOML file with any config fields")
    g.add_argument("--preset", help="named preset: demo, tiny, small, base (default demo)")
    g.add_argument("--task", help=f"task to train (default {DEFAULT_TASK}; toy is the engine's self-test task; "
                   "`presets` lists all)")
    g.add_argument("--data", metavar="PATH", help="data file or directory in the task's format (data.path; "
                   "default: the task's synthetic data)")
    g.add_argument("--run-dir", metavar="DIR", help="run directory (default ./runs/<timestamp>)")
    g.add_argument("--name", help="run name (default a timestamp)")
    g.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest good checkpoint")
    g.add_argument("--headless", action="store_true", help="no dashboard: plain log lines (automatic without a TTY)")
    g.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set any config field, e.g. --set schedule.warmup_frac=0.1 (repeatable)")
    t = parser.add_argument_group("training")
    t.add_argument("--max-steps", type=_integer)
    t.add_argument("--epochs", type=_integer)
    t.add_argument("--steps-per-epoch", type=_integer)
    t.add_argument("--eval-every", type=_integer)
    t.add_argument("--batch-size", type=_integer)
    t.add_argument("--grad-accum", type=_integer)
    t.add_argument("--lr", type=float)
    t.add_argument("--seed", type=_integer)
    t.add_argument("--schedule", choices=["constant", "cosine", "rsqrt", "onecycle"])
    t.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    t.add_argument("--overfit", type=_integer, metavar="N", help="overfit gate on N frozen samples")
    t.add_argument("--device", choices=["auto", "cpu", "cuda"])
    t.add_argument("--compile", choices=["off", "blocks", "model"],
                   help="torch.compile the task's blocks or the whole model (default off)")
    t.add_argument("--threads", type=_integer, help="torch intra-op threads")
    t.add_argument("--checkpoint-every", type=_integer, metavar="N")
    t.add_argument("--on-hangup", choices=["continue", "stop"], help="SIGHUP: keep training (default) or stop")
    t.add_argument("--autotune", action="store_true",
                   help="after the first steps, search the fastest settings that fit, on the run's own steps "
                   "(autotune.on_start; the [autotune] section narrows it)")
    add_setting_flags(parser)
    b = parser.add_argument_group("memory budget")
    b.add_argument("--vram-gb", type=float, help="memory budget in GiB (caps the batch size to fit)")
    b.add_argument("--no-vram-check", action="store_true", help="start even when predicted not to fit")
    add_distributed_arguments(parser)


def setting_flags() -> dict[str, list]:
    """Live-setting name → the settings the built-in tasks declare under it (the flags ``train`` offers)."""
    from engine.core import registry as tasks

    out: dict[str, list] = {}
    for name in tasks.BUILTIN_SPECS:  # plugins' settings go through --set; a broken plugin must not break --help
        for setting in tasks.get_spec(name).capabilities.settings:
            out.setdefault(setting.name, []).append((name, setting))
    return out


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per live setting a built-in task declares (``--<setting-name>``); it sets that task's field."""
    group = parser.add_argument_group("task settings (the task's own; also --set <task>.<field>=VALUE)")
    for name, owners in setting_flags().items():
        _, setting = owners[0]
        kw: dict[str, Any] = {"dest": f"setting__{name}",
                              "help": f"{setting.help or setting.label} (task {', '.join(t for t, _ in owners)})"}
        choices = sorted({c for _, s in owners for c in s.choices}, key=str)
        if setting.kind == "choice" and all(isinstance(c, bool) for c in choices):
            kw.update(type=_boolean, choices=choices, metavar="{true,false}")
        elif setting.kind == "choice":
            kw["choices"] = choices
        else:
            kw["type"] = _integer if setting.kind == "int" else float
        group.add_argument("--" + name.replace("_", "-"), **kw)


def _boolean(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (true or false)")


def flag_of_setting(name: str, value: Any) -> str:
    """The flag text that selects task setting ``name`` = ``value`` (``--<name> <value>`` style)."""
    shown = str(value).lower() if isinstance(value, bool) else value
    return f"--{name.replace('_', '-')} {shown}"


def _parse_scalar(text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string


def overrides_from(args: argparse.Namespace) -> dict:
    """The nested override dict the flags describe (flags left unset are absent)."""
    out: dict = {}

    def put(dotted: str, value: Any) -> None:
        node = out
        *parents, leaf = dotted.split(".")
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # `--set train=1 --set train.seed=…`: a section was given a value
                section = ".".join(parents[:depth + 1])
                raise ConfigError(f"--set {dotted}: {section} was already set to a value ({node!r}); "
                                  f"{section} is a section, set its fields as {section}.FIELD=VALUE")
        node[leaf] = value

    for item in getattr(args, "set", []) or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. --set schedule.warmup_frac=0.1")
        key, _, value = item.partition("=")
        put(key.strip(), _parse_scalar(value.strip()))
    for dest, dotted in FLAG_FIELDS.items():
        value = getattr(args, dest, None)
        if value is not None:
            put(dotted, value)
    for dest, value in vars(args).items():
        if dest.startswith("setting__") and value is not None:
            out.setdefault(SETTING_FLAGS, {})[dest.removeprefix("setting__")] = value
    if getattr(args, "no_vram_check", False):
        put("budget.check", False)
    if getattr(args, "autotune", False):
        put("autotune.on_start", True)
    return out


def flag_for(field: str) -> str | None:
    """The CLI flag that sets a dotted config field, if there is one."""
    for dest, dotted in FLAG_FIELDS.items():
        if dotted == field:
            return "--" + dest.replace("_", "-")
    return None


def explain_flag_error(error: ConfigError) -> ConfigError:
    """Rewrite 'flags: train.batch_size=0: …' as '--batch-size=0 (train.batch_size): …'."""
    text = str(error)
    if not text.startswith("flags: "):
        return error
    rest = text[len("flags: "):]
    field = rest.split("=", 1)[0].split(":", 1)[0]
    flag = flag_for(field)
    if flag is None:
        return ConfigError(f"--set {rest}")
    return ConfigError(f"{flag}{rest[len(field):].split(':', 1)[0]} ({field}):{rest.split(':', 1)[1]}")


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    """The `train` flags that launch under torchrun (absent: one process, as always)."""
    d = parser.add_argument_group("distributed (torchrun)")
    d.add_argument("--nproc-per-node", type=int, metavar="N", help="train on N processes on this machine (torchrun)")
    d.add_argument("--nnodes", type=int, metavar="N", help="machines in the job (default 1)")
    d.add_argument("--node-rank", type=int, metavar="R", help="this machine's rank among --nnodes")
    d.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous address (multi-node)")
    d.add_argument("--rdzv-timeout", type=float, metavar="S", help="seconds to resolve the rendezvous host and for "
                   "every node to join it before the job is refused in one line (default 30)")
    d.add_argument("--strategy", choices=STRATEGIES,
                   help="ddp replicates the model on every rank (default); fsdp2 shards it (fully_shard, DCP "
                   "checkpoints; without --nproc-per-node: one process, a world of 1)")
    d.add_argument("--max-restarts", type=int, metavar="K", help="restart all ranks up to K times after a failure")
