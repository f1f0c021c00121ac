"""Builders of the hostile cases that cannot be a file in git: FIFOs, links to devices, sparse 3 GB files,
directories (a model, a data set, a run, a plugin's site) with one thing wrong.

Each builder makes its case inside ``area`` and returns the ``Invocation`` that meets it: the argv,
whether it goes through the engine (``python -m engine``) or the console script (``sensorlm-tui``),
and extra sys.path entries (a plugin's site directory). The bases a case is made from (a small
gap-filler data set, an FSDP2 run's checkpoints) are built once, on first use, by ``Bases``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CORPUS = Path(__file__).resolve().parent
#: A small valid Llama config.json: what the lm task's memory model and transformers read first.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
FAST = ["--threads", "1", "--set", "train.max_steps=2"]


@dataclass
class Invocation:
    """How a case is run: argv of ``entry`` ("engine": python -m engine; "cli": sensorlm-tui; "loop": a user's
    plain loop with the cockpit, tests/integrations/user_loop.py)."""

    argv: list[str]
    entry: str = "engine"
    path: list[str] = field(default_factory=list)


class Bases:
    """Valid inputs the cases damage, each built on first use and shared by the session."""

    def __init__(self, root: Path, spawn: Callable) -> None:
        self.root, self.spawn = root, spawn
        self._made: dict[str, Path] = {}

    def _once(self, name: str, make: Callable[[Path], None]) -> Path:
        if name not in self._made:
            make(self.root / name)
            self._made[name] = self.root / name
        return self._made[name]

    def gapfill(self) -> Path:
        """A 2-day, 16-pixel gap-filler data set (train and val one day each)."""
        from engine.tasks.gapfill import synth

        return self._once("gapfill", lambda out: synth.generate(out, days=2, val_every=2, size=16,
                                                                 cadence_minutes=240, instruments=1))

    def fsdp2_run(self) -> Path:
        """A toy run trained 4 steps under FSDP2 (a world of 1): two committed DCP step directories."""
        def make(run: Path) -> None:
            engine = self.spawn(["--task", "toy", "--threads", "1", "--set", "toy.dim=32", "--set",
                                 "toy.val_samples=8", "--strategy", "fsdp2", "--max-steps", "4", "--eval-every",
                                 "2", "--checkpoint-every", "2", "--run-dir", str(run)], self.root / "fsdp2-io")
            assert engine.wait(120) == 0, engine.stderr()

        return self._once("fsdp2", make)

    def plotted_run(self) -> Path:
        """A finished run's events.jsonl (60 steps, an eval every 20): what `plot` draws."""
        def make(run: Path) -> None:
            from engine.run import events as ev

            run.mkdir(parents=True)
            caps = {"primary": {"name": "psnr_db", "label": "PSNR", "unit": "dB", "kind": "val"}}
            lines = [ev.Schema(t=1.0), ev.RunStarted(t=1.0, name="plotted", task="toy", total_steps=60,
                                                     capabilities=caps)]
            for i in range(1, 61):
                lines.append(ev.StepLogged(t=1.0 + i, step=i, loss=math.exp(-i / 30), lr=1e-3, grad_norm=1.0))
                if i % 20 == 0:
                    lines.append(ev.EvalDone(t=1.0 + i, step=i, val_loss=1 / i, primary="psnr_db",
                                             metrics={"val_loss": 1 / i, "psnr_db": 10 + i / 10}))
            (run / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in lines))

        return self._once("plotted", make)


def _copy(source: Path, area: Path, name: str) -> Path:
    target = area / name
    shutil.copytree(source, target, symlinks=True)
    return target


def _replace(path: Path, how: str) -> None:
    """Put a FIFO, a link to /dev/zero, a sparse 3 GB file or JSON nested 20,000 deep where ``path`` was."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(3 << 30)
    elif how == "deep":
        path.write_text("[" * 20_000)
    else:
        path.write_text(how)


# -- shards / manifest (`data gapfill --check DIR`: training opens a data directory with the same reader) -------
def _manifest(area: Path, bases: Bases, edit: Callable[[dict], dict] | None = None,
              how: str | None = None) -> Invocation:
    data = _copy(bases.gapfill(), area, "data")
    target = data / "manifest.json"
    if how is not None:
        _replace(target, how)
    else:
        target.write_text(json.dumps(edit(json.loads(target.read_text()))))
    return Invocation(["data", "gapfill", "--check", str(data)], entry="cli")


def _hot_frame(area: Path, bases: Bases) -> Invocation:
    """A shard whose frame 1 is coded 1e38 (finite in float32), re-listed in the manifest with its new digest."""
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from engine.tasks.gapfill import shards

    data = _copy(bases.gapfill(), area, "data")
    manifest = json.loads((data / "manifest.json").read_text())
    name = sorted(manifest["shards"])[0]
    with safe_open(str(data / name), "np") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        meta = handle.metadata()
    tensors["frames"][1] = np.float32(1e38)
    save_file(tensors, str(data / name), metadata=meta)
    manifest["shards"][name] = {"bytes": (data / name).stat().st_size, "sha256": shards.file_digest(data / name)}
    manifest["digest"] = shards.manifest_digest(manifest["shards"])
    (data / "manifest.json").write_text(json.dumps(manifest))
    return Invocation(["data", "gapfill", "--check", str(data)], entry="cli")


# -- a model directory and its tokenizer (train --task lm) -----------------------------------------------
def _model_dir(area: Path, files: dict[str, str] | None = None, config: dict | None = None) -> Path:
    model = area / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config if config is not None else LLAMA))
    (model / "model.safetensors").write_bytes(b"never read: the case fails first")
    for name, how in (files or {}).items():
        _replace(model / name, how)
    return model


def _lm(area: Path, model: Path, tokenizer: str = "byte") -> Invocation:
    return Invocation(["--task", "lm", "--set", f"lm.model.path={model}", "--set", f"lm.tokenizer={tokenizer}",
                       *FAST, "--run-dir", str(area / "run")])


# -- checkpoints: a single file, and an FSDP2 run's DCP directories (train --resume RUN) ------------------
def _checkpoint_file(area: Path, how: str) -> Invocation:
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    _replace(run / "checkpoints" / "last.safetensors", how)
    return Invocation(["--resume", str(run)])


def _dcp(area: Path, bases: Bases, name: str, how: str) -> Invocation:
    run = _copy(bases.fsdp2_run(), area, "run")
    for step in sorted((run / "checkpoints").glob("step-*")):
        _replace(step / name, how)
    return Invocation(["--resume", str(run), "--max-steps", "6", "--threads", "1"])


# -- events (plot RUN) -------------------------------------------------------------------------------
def _events(area: Path, bases: Bases, name: str, how: str) -> Invocation:
    run = _copy(bases.plotted_run(), area, "run")
    if name == "events.jsonl" and how == "a_directory":
        (run / name).unlink()
        (run / name).mkdir()
    else:
        _replace(run / name, how)
    return Invocation(["plot", str(run)], entry="cli")


# -- export RUN ----------------------------------------------------------------------------------------
def _export(area: Path, where: str) -> Invocation:
    run = area / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(CORPUS / "checkpoint" / "config.toml", run / "config.toml")
    shutil.copy(CORPUS / "checkpoint" / "valid.safetensors", run / "checkpoints" / "last.safetensors")
    if where == "exports_is_a_file":
        (run / "exports").write_text("not a directory")
        return Invocation(["export", str(run)], entry="cli")
    (area / "a_file").write_text("not a directory")
    return Invocation(["export", str(run), "--out", str(area / "a_file" / "adapter")], entry="cli")


# -- plugins: an entry point in a site directory of the case's own ---------------------------------------
def _plugin(area: Path, name: str, source: str, argv: list[str]) -> Invocation:
    site = area / "site"
    info = site / f"hostile_{name}-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hostile-{name}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[sensorlm_tui.tasks]\n{name} = hostile_{name}:SPEC\n")
    (site / f"hostile_{name}.py").write_text(source)
    return Invocation([arg.replace("RUN", str(area / "run")) for arg in argv], entry="cli", path=[str(site)])


_SECTION = '''from pydantic import Field
from sensorlm_tui.plugin import Capabilities, Metric, Section, Setting, TaskSpec
class C(Section):
    """A plugin's section."""
    bits: int = Field(16, ge=1, le=64, description="bits")
'''
PLUGINS = {
    "fails_to_import": 'raise ImportError("the plugin needs a package that is not installed")\n',
    "config_not_a_section": _SECTION + 'SPEC = TaskSpec(name="config_not_a_section", config=dict, '
    'capabilities=Capabilities(primary=Metric("m")), task="hostile_x:T", presets={"demo": {}})\n',
    "preset_out_of_range": _SECTION + 'SPEC = TaskSpec(name="preset_out_of_range", config=C, '
    'capabilities=Capabilities(primary=Metric("m")), task="hostile_x:T", '
    'presets={"demo": {"preset_out_of_range": {"bits": 9999}}})\n',
    "wrong_types": _SECTION + 'SPEC = TaskSpec(name="wrong_types", config=C, capabilities=Capabilities('
    'primary="mae", settings=[5]), task=5, presets=["demo"])\n',
    "settings_not_settings": _SECTION + 'SPEC = TaskSpec(name="settings_not_settings", config=C, '
    'capabilities=Capabilities(primary=Metric("m"), settings=({"name": "bits"},)), task="hostile_x:T", '
    'presets={"demo": {}})\n',
    "unbounded_setting": _SECTION + 'SPEC = TaskSpec(name="unbounded_setting", config=C, '
    'capabilities=Capabilities(primary=Metric("m"), settings=(Setting("bits", "unbounded_setting.bits", "int", '
    'minimum=1),)), task="hostile_x:T", presets={"demo": {}})\n',
    "class_missing": _SECTION + 'SPEC = TaskSpec(name="class_missing", config=C, capabilities=Capabilities('
    'primary=Metric("m")), task="hostile_nowhere:Task", presets={"demo": {}})\n',
}


def _plugin_case(kind: str, command: str) -> Callable:
    argv = ["presets", "--task", kind] if command == "presets" else \
        ["train", "--headless", "--task", kind, "--threads", "1", "--max-steps", "2", "--run-dir", "RUN"]
    return lambda area, bases: _plugin(area, kind, PLUGINS[kind], argv)


# -- plugins whose own functions raise while the memory trace calls them (no analytic model: it is traced) -----
_TRACED = _SECTION + '''import torch
from torch import nn
from sensorlm_tui.plugin import Task
def check(method):
    if method == "{raises}":
        raise ValueError(f"the plugin's {{method}} is broken")
class T(Task):
    name = "{name}"
    def setup(self, state=None):
        check("setup")
    def build_model(self):
        check("build_model")
        return nn.Linear(16, 1)
    def train_size(self):
        return 64
    def val_indices(self):
        return [1000, 1001]
    def make_batch(self, indices, step, train):
        check("make_batch")
        return {{"x": torch.ones(len(indices), 16)}}
    def loss(self, model, batch, step):
        return model(batch["x"]).pow(2).mean(), {{}}
    def eval_batch(self, model, batch):
        return {{"m": 0.0}}
SPEC = TaskSpec(name="{name}", config=C, capabilities=Capabilities(primary=Metric("m")), task="hostile_{name}:T",
                presets={{"demo": {{}}}})
'''


def _traced_plugin(raises: str, command: str) -> Callable:
    name = f"{raises}_{command}"
    argv = ["plan", "--task", name, "--device", "cpu"] if command == "plan" else \
        ["train", "--headless", "--task", name, "--threads", "1", "--max-steps", "2", "--run-dir", "RUN"]
    return lambda area, bases: _plugin(area, name, _TRACED.format(name=name, raises=raises), argv)


# -- launch flags (train --nproc-per-node) -------------------------------------------------------------
def _launch(*flags: str) -> Callable:
    return lambda area, bases: Invocation(["--task", "toy", "--threads", "1", "--max-steps", "2", "--run-dir",
                                           str(area / "run"), *flags])


BUILDERS: dict[str, Callable[[Path, Bases], Invocation]] = {
    # shards / manifest
    "manifest_deep": lambda a, b: _manifest(a, b, how="deep"),
    "manifest_fifo": lambda a, b: _manifest(a, b, how="fifo"),
    "manifest_dev_zero": lambda a, b: _manifest(a, b, how="dev_zero"),
    "manifest_sparse": lambda a, b: _manifest(a, b, how="sparse"),
    "manifest_nan_cadence": lambda a, b: _manifest(a, b, lambda m: {**m, "cadence_minutes": float("nan")}),
    "manifest_zero_cadence": lambda a, b: _manifest(a, b, lambda m: {**m, "cadence_minutes": 0}),
    "manifest_negative_cadence": lambda a, b: _manifest(a, b, lambda m: {**m, "cadence_minutes": -30}),
    "manifest_no_instruments": lambda a, b: _manifest(a, b, lambda m: {**m, "instruments": {}}),
    "manifest_instruments_list": lambda a, b: _manifest(a, b, lambda m: {**m, "instruments": []}),
    "manifest_duplicate_bands": lambda a, b: _manifest(a, b, lambda m: {**m, "bands": ["094", "094"]}),
    "manifest_huge_image": lambda a, b: _manifest(a, b, lambda m: {**m, "height": 10**9}),
    "manifest_shard_entry_string": lambda a, b: _manifest(
        a, b, lambda m: {**m, "shards": {k: "big" for k in m["shards"]}}),
    "shard_frame_1e38": _hot_frame,
    # model directory
    "config_dev_zero": lambda a, b: _lm(a, _model_dir(a, {"config.json": "dev_zero"})),
    "config_fifo": lambda a, b: _lm(a, _model_dir(a, {"config.json": "fifo"})),
    "config_sparse": lambda a, b: _lm(a, _model_dir(a, {"config.json": "sparse"})),
    "config_deep": lambda a, b: _lm(a, _model_dir(a, {"config.json": "deep"})),
    "config_a_list": lambda a, b: _lm(a, _model_dir(a, {"config.json": "[1, 2]"})),
    "config_missing_fields": lambda a, b: _lm(a, _model_dir(a, config={"model_type": "llama"})),
    "config_string_sizes": lambda a, b: _lm(a, _model_dir(a, config={**LLAMA, "hidden_size": "32"})),
    "custom_code": lambda a, b: _lm(a, _model_dir(a, {"modeling_evil.py": "open('PWNED', 'w')\n"}, config={
        **LLAMA, "model_type": "evil", "auto_map": {"AutoConfig": "modeling_evil.C",
                                                    "AutoModelForCausalLM": "modeling_evil.M"}})),
    "weights_fifo": lambda a, b: _lm(a, _model_dir(a, {"model.safetensors": "fifo"})),
    # tokenizer
    "tokenizer_fifo": lambda a, b: _lm(a, _model_dir(a, {"tokenizer.json": "fifo"}), "auto"),
    "tokenizer_deep": lambda a, b: _lm(a, _model_dir(a, {"tokenizer.json": "deep"}), "auto"),
    "tokenizer_config_dev_zero": lambda a, b: _lm(a, _model_dir(a, {"tokenizer_config.json": "dev_zero"}), "auto"),
    "tokenizer_model_fifo": lambda a, b: _lm(a, _model_dir(a, {"tokenizer.model": "fifo"}), "auto"),
    # checkpoint (single file)
    "last_fifo": lambda a, b: _checkpoint_file(a, "fifo"),
    "last_dev_zero": lambda a, b: _checkpoint_file(a, "dev_zero"),
    # DCP
    "dcp_metadata_fifo": lambda a, b: _dcp(a, b, ".metadata", "fifo"),
    "dcp_metadata_sparse": lambda a, b: _dcp(a, b, ".metadata", "sparse"),
    "dcp_shard_fifo": lambda a, b: _dcp(a, b, "__0_0.distcp", "fifo"),
    "dcp_sidecar_dev_zero": lambda a, b: _dcp(a, b, "engine.safetensors", "dev_zero"),
    # events
    "events_fifo": lambda a, b: _events(a, b, "events.jsonl", "fifo"),
    "events_dev_zero": lambda a, b: _events(a, b, "events.jsonl", "dev_zero"),
    "events_a_directory": lambda a, b: _events(a, b, "events.jsonl", "a_directory"),
    "events_garbage": lambda a, b: _events(a, b, "events.jsonl", "{\"type\": \"step\", \"step\": [[[[\n\x00\xff\n"),
    # export
    "exports_is_a_file": lambda a, b: _export(a, "exports_is_a_file"),
    "out_under_a_file": lambda a, b: _export(a, "out_under_a_file"),
    # plugins
    **{f"presets_{kind}": _plugin_case(kind, "presets") for kind in PLUGINS if kind != "class_missing"},
    **{f"train_{kind}": _plugin_case(kind, "train") for kind in PLUGINS},
    **{f"traced_{raises}_{command}": _traced_plugin(raises, command)
       for raises, command in (("setup", "train"), ("make_batch", "train"), ("build_model", "train"),
                               ("make_batch", "plan"))},
    # launch flags
    "nproc_999": _launch("--nproc-per-node", "999"),
    "port_99999": _launch("--nproc-per-node", "2", "--rdzv-endpoint", "localhost:99999"),
    "port_not_a_number": _launch("--nproc-per-node", "2", "--rdzv-endpoint", "localhost:http"),
    "unresolvable_host": _launch("--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint",
                                 "no-such-host.invalid:29500", "--rdzv-timeout", "5"),
    "rdzv_timeout_zero": _launch("--nproc-per-node", "2", "--rdzv-timeout", "0"),
    "rendezvous_never_completes": _launch("--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1",
                                          "--rdzv-endpoint", "127.0.0.1:29519", "--rdzv-timeout", "1"),
}


def _integration_builders() -> dict[str, Callable[[Path, Bases], Invocation]]:
    from tests.hostile.integration_builders import INTEGRATION_BUILDERS

    return INTEGRATION_BUILDERS


BUILDERS.update(_integration_builders())  # a user's own loop in the cockpit: tests/hostile/integration_builders.py
