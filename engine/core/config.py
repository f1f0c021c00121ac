"""Run configuration: pydantic v2 models, TOML loading, presets and CLI overrides.

The core's sections are the ones every task shares: ``name``, ``task`` (name and
preset), ``train``, ``optimizer``, ``schedule``, ``evaluation``, ``policies``, ``runtime``,
``data`` (where the data is), ``checkpoint``, ``budget`` and ``autotune``: one per component
that reads it (engine.core.core_sections).
Each task brings its own section, named after it (``[toy]``, or sub-tables like ``[<task>.model]``),
declared by its torch-free spec (engine.tasks.<name>.spec). ``RunConfig`` is the
shared part; ``config_class(task)`` is RunConfig with that task's section added
as a field of the task's name (built once per task with pydantic's
``create_model``, so validation, error locations and ``model_dump`` treat it like
any other section), and ``config.task_config`` reaches it without knowing the name.

Precedence, lowest first: field defaults → the task's preset → the TOML file
(``--config``) → CLI flags. The resolved config is written to the run
directory as ``config.toml`` with ``version = 3`` and is what ``--resume`` reads
back; older layouts are migrated first (engine.core.migrate), and an old key in a
user's file or ``--set`` flag is read under its new name with a note.

Every error is a ``ConfigError`` whose message is one line naming the place
(``file:line``, ``field`` or ``--flag``), the value and what is allowed.
Torch-free.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, create_model

from engine.core import migrate, registry
from engine.core.core_sections import (
    AutotuneConfig,
    BudgetConfig,
    CheckpointConfig,
    DataConfig,
    EvaluationConfig,
    OptimizerConfig,
    PoliciesConfig,
    RuntimeConfig,
    ScheduleConfig,
    TaskConfig,
    TrainConfig,
)
from engine.core.safe_files import read_regular
from engine.core.sections import Section

_Section = Section


class ConfigError(ValueError):
    """A bad configuration value; ``str()`` is the one-line message for the user."""


class RunConfig(_Section):
    """The shared part of a run's resolved configuration; ``config_class(task)`` adds the task's section."""

    version: int = Field(migrate.CONFIG_VERSION, ge=migrate.CONFIG_VERSION, le=migrate.CONFIG_VERSION,
                         description="Layout version of this file (older ones are migrated on read).")
    name: str = Field("", description="Run name (default: a timestamp); the run directory is runs/<name>.")
    run_id: str = Field("", max_length=64, pattern=r"^[0-9a-f]*$",
                        description="The run's identity, made when it is created (never set by hand); every "
                        "checkpoint carries it and a resume takes only its own run's.")
    task: TaskConfig = Field(default_factory=TaskConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    autotune: AutotuneConfig = Field(default_factory=AutotuneConfig)

    @property
    def task_config(self) -> Any:
        """The task's own section (the field named after ``task.name``)."""
        return getattr(self, self.task.name)


SECTIONS = ("task", "train", "optimizer", "schedule", "evaluation", "policies", "runtime", "data", "checkpoint",
            "budget", "autotune")


def _spec(name: str, place: str):
    """The task's spec, or ConfigError naming the tasks there are (or the broken plugin)."""
    try:
        return registry.get_spec(name)
    except registry.UnknownTask as exc:
        raise ConfigError(f"{place}task.name={name!r}: {exc}") from None
    except registry.TaskLoadError as exc:
        raise ConfigError(f"task.name={name!r}: {exc}") from None


@lru_cache(maxsize=None)
def _class_for(name: str) -> type[RunConfig]:
    spec = registry.get_spec(name)
    return create_model(f"RunConfig_{name}", __base__=RunConfig, __doc__=f"RunConfig with [{name}].",
                        **{name: (spec.config, Field(default_factory=spec.config, description=spec.summary))})


def config_class(name: str) -> type[RunConfig]:
    """RunConfig with task ``name``'s own section as the field ``name`` (ConfigError for an unknown task)."""
    _spec(name, "")
    return _class_for(name)


def deep_merge(base: dict, update: dict) -> dict:
    """``base`` with ``update`` laid over it: tables merged key by key, any other value replaced."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _line_of(text: str, section: str | None, key: str) -> int | None:
    """Best-effort line number of ``key`` (inside ``[section]``) in TOML text, for error messages."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[([^\[\]]+)\]", stripped)
        if header:
            current = header.group(1).strip()
            if section is not None and key == section and current == section:
                return number
            continue
        if re.match(rf"^{re.escape(key)}\s*=", stripped) and (section is None or current == section):
            return number
    return None


def _describe(error: dict, cls: type[Section]) -> tuple[str, str]:
    """(dotted field, 'message') for one pydantic error in a ``cls`` (an unknown key: with the keys allowed)."""
    loc = ".".join(str(p) for p in error.get("loc", ()) if not isinstance(p, int) or True)
    msg = error.get("msg", "invalid")
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        allowed = _keys_at(cls, error.get("loc", ())[:-1])
        msg = f"unknown key; allowed: {', '.join(allowed)}" if allowed else "unknown key"
    elif kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        msg = f"allowed: {expected}"
    return loc, msg


def _keys_at(cls: type[Section], loc: tuple) -> list[str]:
    """The keys of the section at ``loc`` in ``cls`` ([] when ``loc`` is not a section)."""
    for part in loc:
        info = cls.model_fields.get(part) if isinstance(part, str) else None
        if info is None or not (isinstance(info.annotation, type) and issubclass(info.annotation, Section)):
            return []
        cls = info.annotation
    return list(cls.model_fields)


def _clip(text: str, limit: int = 80) -> str:
    """At most ``limit`` characters: a 1 MB key or value must not become a 1 MB error line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _task_name(data: dict, origin: str) -> str:
    task = data.get("task")
    name = task.get("name", registry.DEFAULT_TASK) if isinstance(task, dict) else registry.DEFAULT_TASK
    if not isinstance(name, str):
        raise ConfigError(f"{origin}: task.name={_clip(repr(name), 60)}: must be a string")
    return name


def _place(origin: str, text: str | None, field: str) -> str:
    """``origin:line`` of a dotted field when the TOML text shows where it is (v1 section names tried too)."""
    if text is None:
        return origin
    parts = field.split(".")
    sections = [".".join(parts[:-1]) or None]
    if len(parts) > 2:
        sections.append(".".join(parts[1:-1]))  # [<task>.model] written as [model] in a v1 file
    if len(parts) == 2 and sections[0] not in SECTIONS:
        sections += ["model", "data"]  # a flat task section ([toy]) whose keys a v1 file kept in these
    keys = [parts[-1]] * len(sections)
    old = _OLD_NAMES.get(field)
    if old is not None:  # a file in the layout before 3 wrote it in [train], under its old name
        sections.append("train")
        keys.append(old)
    for section, key in zip(sections, keys):
        line = _line_of(text, section, key)
        if line:
            return f"{origin}:{line}"
    return origin


#: Layout 3 path → its [train] key before layout 3 (where an older file shows the line).
_OLD_NAMES = {new: old for old, new in migrate.LAYOUT_3.items()}


def upgrade(data: dict, origin: str, notes: list[str] | None = None, text: str | None = None) -> dict:
    """``data`` (a file's table or an override dict) in the current layout; ``notes`` gets one line naming the
    keys that moved (``origin`` is the file, or ``--set`` for flags). ConfigError when a field is given under
    both its old and new name."""
    moves: list[tuple[str, str]] = []
    try:
        data = migrate.config(data, moves)
    except migrate.LayoutConflict as exc:
        raise ConfigError(f"{_place(origin, text, str(exc).split()[0])}: {exc}") from None
    if moves and notes is not None:
        shown = ", ".join(f"{old} → {new}" for old, new in moves[:4]) + (", …" if len(moves) > 4 else "")
        place = _place(origin, text, moves[0][1]) if len(moves) == 1 else origin
        notes.append(f"{place}: read under config layout 3's names ({shown}); the old names keep working")
    return data


def validate(data: dict, origin: str = "config", text: str | None = None) -> RunConfig:
    """Validate a merged dict (migrated first when it is an older layout); ConfigError naming the first bad
    field, with file:line when the text shows it."""
    data = upgrade(data, origin, text=text)
    cls = config_class_at(_task_name(data, origin), origin)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field, msg = _describe(error, cls)
        place = _place(origin, text, field)
        value = error.get("input")
        shown = "" if isinstance(value, dict) or error.get("type") == "missing" else f"={_clip(repr(value), 60)}"
        if error.get("type") == "value_error":
            raise ConfigError(f"{place}: {_clip(msg.removeprefix('Value error, '), 200)}") from None
        raise ConfigError(f"{place}: {_clip(field)}{shown}: {_clip(msg, 200)}") from None


def config_class_at(name: str, origin: str) -> type[RunConfig]:
    """``config_class(name)`` with the error naming where the task name came from."""
    _spec(name, f"{origin}: " if origin not in ("flags", "config") else "")
    return _class_for(name)


def preset_dict(task: str, preset: str) -> dict:
    """The overrides a named preset of ``task`` applies, or ConfigError listing the presets there are."""
    presets = _spec(task, "").presets
    if preset not in presets:
        allowed = ", ".join(presets) or "none"
        raise ConfigError(f"--preset {preset!r}: unknown preset for task {task!r}; allowed: {allowed}")
    return presets[preset]


#: Largest config file read (a real one is a few KiB); /dev/zero or a 10 GB file must not fill memory.
MAX_CONFIG_BYTES = 1 << 20


def read_toml(path: str | Path) -> tuple[dict, str]:
    """Parse a TOML file; ConfigError with file:line for syntax errors or unreadable files."""
    path = Path(path)
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per nesting level: `a = [[[[…` thousands deep
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        where = f"{path}:{match.group(1)}:{match.group(2)}" if match else str(path)
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", message) or "invalid TOML"
        raise ConfigError(f"{where}: invalid TOML: {reason}") from None
    return data, text


#: Key of an override dict holding live-setting flags by setting name (``--<setting-name>`` flags from
#: engine.core.cli_args); ``load`` puts each at its path in the chosen task's section.
SETTING_FLAGS = "__settings__"


def _resolve_setting_flags(overrides: dict, task_name: str) -> dict:
    """``overrides`` with the task-setting flags moved to their declared paths (ConfigError if undeclared)."""
    flags = overrides.get(SETTING_FLAGS)
    if not flags:
        return {k: v for k, v in overrides.items() if k != SETTING_FLAGS}
    out = {k: v for k, v in overrides.items() if k != SETTING_FLAGS}
    capabilities = _spec(task_name, "").capabilities
    for name, value in flags.items():
        setting = capabilities.setting(name)
        if setting is None:
            names = ", ".join(s.name for s in capabilities.settings) or "none"
            raise ConfigError(f"--{name.replace('_', '-')}: task {task_name!r} has no such setting; its "
                              f"settings: {names}")
        node = out
        *parents, leaf = setting.path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def load(
    config_path: str | Path | None = None,
    preset: str | None = None,
    overrides: dict | None = None,
    task: str | None = None,
    notes: list[str] | None = None,
) -> RunConfig:
    """Resolve defaults → preset → TOML file → overrides (nested dict, e.g. from CLI flags) into a RunConfig.

    A file or override in an older layout is read in the current one; ``notes`` gets a line saying so."""
    file_data: dict = {}
    text = None
    origin = "config"
    if config_path is not None:
        file_data, text = read_toml(config_path)
        origin = str(config_path)
        if not migrate.is_v1_config(file_data):  # a v1 file is migrated whole below, once its task is known
            file_data = upgrade(file_data, origin, notes, text)
    overrides = overrides or {}
    file_task = file_data.get("task", {}) if isinstance(file_data.get("task"), dict) else {}
    if "task" in file_data and not isinstance(file_data["task"], dict):
        validate(file_data, origin, text)  # the section's own type error, with its line
    task_name = task or overrides.get("task", {}).get("name") or file_task.get("name") or registry.DEFAULT_TASK
    if not isinstance(task_name, str):
        raise ConfigError(f"{origin}: task.name={task_name!r}: must be a string")
    if migrate.is_v1_config(file_data):  # an older file: its [model]/[data] belong to the task being run
        file_data = migrate.config({**file_data, "task": {**file_task, "name": task_name}})
    spec = _spec(task_name, "")
    preset_name = preset or overrides.get("task", {}).get("preset") or file_task.get("preset") or \
        spec.default_preset
    if not isinstance(preset_name, str):
        raise ConfigError(f"{origin}: task.preset={preset_name!r}: must be a string")
    # a plugin's preset written for the layout before 3 is read in this one (its user cannot change it: no note)
    base = deep_merge(upgrade(preset_dict(task_name, preset_name), f"preset {preset_name!r} of task {task_name!r}")
                      if spec.presets or preset else {}, {"task": {"name": task_name, "preset": preset_name}})
    if registry.is_plugin(task_name):  # a plugin's preset its own section refuses: named as the preset's error
        validate(base, f"preset {preset_name!r} of task {task_name!r}")
    # Validate the file on its own first so its errors point at its own lines.
    merged = deep_merge(base, file_data)
    if config_path is not None:
        validate(merged, origin, text)
    overrides = _resolve_setting_flags(overrides, task_name)
    if migrate.is_v1_config(overrides):  # an override dict in the old layout (a script written for v1)
        overrides = migrate.config({**overrides, "task": {**overrides.get("task", {}), "name": task_name}})
        overrides.pop("version")
    overrides = upgrade(overrides, "--set", notes)
    merged = deep_merge(merged, overrides)
    return validate(merged, "flags")


def load_resolved(path: str | Path) -> RunConfig:
    """Read a run directory's resolved config.toml back (what --resume uses; older layouts migrated)."""
    data, text = read_toml(path)
    if not data:  # every resolved config names its task: an empty one is a write that never finished, not defaults
        raise ConfigError(f"{path}: empty; a run's config.toml holds at least its task, so this one was never "
                          "written whole and there is no run here to resume")
    return validate(data, str(path), text)


def dump_toml(config: RunConfig) -> str:
    """The resolved config as TOML text (None values are left out: TOML has no null)."""
    import tomli_w

    def strip_none(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip_none(v) for k, v in value.items() if v is not None}
        if isinstance(value, tuple):
            return list(value)
        return value

    return tomli_w.dumps(strip_none(config.model_dump()))


def _rows(prefix: str, model: type) -> list[tuple[str, str, str, str]]:
    rows = []
    for key, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, Section):
            rows += _rows(f"{prefix}{key}.", annotation)
            continue
        kind = getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
        rows.append((f"{prefix}{key}", kind, repr(info.default), info.description or ""))
    return rows


def fields_reference(task: str | None = None) -> list[tuple[str, str, str, str]]:
    """(section.field, type, default, description) of the shared fields, or of ``task``'s own section."""
    if task is not None:
        return _rows(f"{task}.", _spec(task, "").config)
    rows = [(key, "int" if key == "version" else "str", repr(RunConfig.model_fields[key].default),
             RunConfig.model_fields[key].description) for key in ("version", "name")]
    for section in SECTIONS:
        rows += _rows(f"{section}.", RunConfig.model_fields[section].annotation)
    return rows
