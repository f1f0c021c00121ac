"""The public package as a user meets it: installed, not the checkout.

The project and examples/plugin_task are installed into one temporary target
(``pip install --no-deps --target``: the real packaging, so a module left out
of ``[tool.setuptools.packages.find]`` fails here), and everything runs with
that target as the only source of the project's code:

- every ``python`` block of docs/INTEGRATIONS.md, with small objects of the
  user's for the names the recipe leaves to them, each a real run whose
  directory is then read back;
- the plugin example, trained through its entry point;
- ``--help`` and a toy run under ``-W error::DeprecationWarning`` (the built-in
  code never reads a deprecated path).

And in this process: each old path still gives the same object, with one
DeprecationWarning naming the new import.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, output

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "INTEGRATIONS.md"
#: What of the checkout a wheel is built from (copied: an in-tree build would leave build/ and *.egg-info in it).
PROJECT = ("pyproject.toml", "README.md", "engine", "tui", "themes", "sensorlm_tui")
#: The user's own objects each recipe names, by the public module the block imports: small real ones.
OBJECTS = {
    "sensorlm_tui.lightning": '''
import torch
import lightning.pytorch as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 1)

    def training_step(self, batch, index):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.manual_seed(0)
model = Model()
x = torch.randn(256, 8)
train_loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
''',
    "sensorlm_tui.hf": '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))
rows = torch.randint(0, 32, (64, 8))
train_data = [{"input_ids": row, "labels": row.clone()} for row in rows]
one_batch = {"input_ids": rows[:8], "labels": rows[:8].clone()}
args = TrainingArguments(output_dir="hf", max_steps=4, per_device_train_batch_size=8, logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
''',
    "sensorlm_tui.loop": '''
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step(model, optimizer, step):
    x = torch.randn(16, 8)
    loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss

def evaluate(model):
    with torch.no_grad():
        x = torch.randn(64, 8)
        return nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
''',
}
#: Steps each recipe's run takes (its own numbers, or its objects').
STEPS = {"sensorlm_tui.lightning": 200, "sensorlm_tui.hf": 4, "sensorlm_tui.loop": 1000}
#: A warning from a deprecated path is an error in the blocks (third-party deprecations are not ours to fail on).
STRICT = ('import warnings\nwarnings.filterwarnings("error", message=r"engine\\\\..* is deprecated",'
          ' category=DeprecationWarning)\n')


def code_blocks() -> list[str]:
    """The ``python`` fenced blocks of docs/INTEGRATIONS.md, in order."""
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def _public_module(block: str) -> str:
    """The public module a block imports (the key of its objects)."""
    found = {node.module for node in ast.walk(ast.parse(block))
             if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sensorlm_tui")}
    assert len(found) == 1, f"each block imports one public module, found {found}:\n{block}"
    return found.pop()


@pytest.fixture(scope="module")
def site(tmp_path_factory, worker_id) -> Path:
    """The project and the plugin example, installed into one target directory: once per test session, the
    first test worker to need it installs it (~8 s under load) and the other reads the same directory (the
    tests only import from it and run it)."""
    from filelock import FileLock

    if worker_id == "master":  # no xdist workers: this process is the session
        return _install(tmp_path_factory.mktemp("public"))
    shared = tmp_path_factory.getbasetemp().parent  # the session's directory, above each worker's own
    with FileLock(str(shared / "public-site.lock")):
        if (shared / "public" / "installed").is_file():
            return shared / "public" / "site"
        target = _install(shared / "public")
        (shared / "public" / "installed").touch()
        return target


def _install(work: Path) -> Path:
    """The project and the plugin example copied into ``work`` and pip-installed into ``work``/site."""
    work.mkdir(exist_ok=True)
    source = work / "project"
    source.mkdir()
    for name in PROJECT:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    plugin = shutil.copytree(ROOT / "examples" / "plugin_task", work / "plugin_task",
                             ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(source), str(plugin)], check=True, capture_output=True, text=True, timeout=300)
    return target


def _run(site: Path, cwd: Path, *args: str, warnings_as_errors: bool = False,
         timeout: float = 240) -> subprocess.CompletedProcess:
    """``python *args`` with the installed target as the project's only source (not the checkout)."""
    env = cli_env()
    env["PYTHONPATH"] = str(site)
    if warnings_as_errors:  # the engine's own subprocesses too
        env["PYTHONWARNINGS"] = "error::DeprecationWarning"
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


def test_the_doc_has_one_block_per_recipe() -> None:
    assert sorted(_public_module(block) for block in code_blocks()) == sorted(OBJECTS)


@pytest.mark.parametrize("index", range(len(code_blocks())))
def test_every_block_of_the_integrations_doc_runs_against_the_installed_package(site, tmp_path, index) -> None:
    block = code_blocks()[index]
    module = _public_module(block)
    script = tmp_path / "recipe.py"
    where = f"\nimport sys\nprint('public module at', sys.modules[{module!r}].__file__)\n"
    script.write_text(STRICT + OBJECTS[module] + "\n# ---- the block, as the doc has it ----\n" + block + where)
    done = _run(site, tmp_path, str(script))
    assert done.returncode == 0, output(done)
    run = tmp_path / "runs" / "mine"
    events = _events(run)
    started = next(e for e in events if e["type"] == "run_started")
    finished = [e for e in events if e["type"] == "run_finished"]
    assert [f["status"] for f in finished] == ["finished"] and finished[0]["steps"] == STEPS[module], output(done)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    if module == "sensorlm_tui.hf":  # the recipe hands over a batch: the step is traced
        assert started["budget"]["source"] == "trace" and started["budget"]["predicted"] > 0
    if module == "sensorlm_tui.loop":  # save_every=100: the default save, readable by the next run
        assert (run / "checkpoints" / "last.pt").is_file()
    assert f"public module at {site}" in done.stdout, output(done)  # the installed copy, not the checkout


def test_the_plugin_example_trains_from_the_installed_package_without_a_deprecation(site, tmp_path) -> None:
    run = tmp_path / "runs" / "ones"
    done = _run(site, tmp_path, "-m", "tui.cli", "train", "--task", "ones", "--threads", "1", "--max-steps", "4",
                "--eval-every", "2", "--run-dir", str(run), "--headless", warnings_as_errors=True)
    assert done.returncode == 0, output(done)
    evals = [e for e in _events(run) if e["type"] == "eval"]
    assert evals and all(e["primary"] == "mae" for e in evals)


def test_built_in_paths_never_warn(site, tmp_path) -> None:
    helped = _run(site, tmp_path, "-W", "error::DeprecationWarning", "-m", "tui.cli", "--help")
    assert helped.returncode == 0 and "usage" in helped.stdout.lower(), output(helped)
    run = tmp_path / "toy"
    trained = _run(site, tmp_path, "-W", "error::DeprecationWarning", "-m", "tui.cli", "train", "--task", "toy",
                   "--threads", "1", "--max-steps", "3", "--run-dir", str(run), "--headless",
                   warnings_as_errors=True)
    assert trained.returncode == 0, output(trained)
    assert [e["status"] for e in _events(run) if e["type"] == "run_finished"] == ["finished"]


#: Every old path (module, name) and the public module that now gives the same object.
OLD_PATHS = [
    ("engine.app.integrations", "cockpit", "sensorlm_tui.loop"),
    ("engine.app.integrations", "Run", "sensorlm_tui.loop"),
    ("engine.app.integrations", "StopRun", "sensorlm_tui.loop"),
    ("engine.app.integrations", "CockpitError", "sensorlm_tui.loop"),
    ("engine.app.integrations.loop", "cockpit", "sensorlm_tui.loop"),
    ("engine.app.integrations.loop", "Run", "sensorlm_tui.loop"),
    ("engine.app.integrations.loop", "StopRun", "sensorlm_tui.loop"),
    ("engine.app.integrations.lightning", "CockpitCallback", "sensorlm_tui.lightning"),
    ("engine.app.integrations.hf", "CockpitCallback", "sensorlm_tui.hf"),
    ("engine.tasks.base", "Task", "sensorlm_tui.plugin"),
    ("engine.tasks.base", "TaskError", "sensorlm_tui.plugin"),
    ("engine.tasks.spec", "TaskSpec", "sensorlm_tui.plugin"),
    ("engine.tasks.spec", "Capabilities", "sensorlm_tui.plugin"),
    ("engine.tasks.spec", "Metric", "sensorlm_tui.plugin"),
    ("engine.tasks.spec", "Setting", "sensorlm_tui.plugin"),
    ("engine.sections", "Section", "sensorlm_tui.plugin"),
]


@pytest.mark.parametrize(("old", "name", "new"), OLD_PATHS, ids=[f"{o}.{n}" for o, n, _ in OLD_PATHS])
def test_each_old_path_works_and_warns_naming_the_new_import(old, name, new) -> None:
    import importlib

    public = getattr(importlib.import_module(new), name)
    namespace: dict = {}
    with pytest.warns(DeprecationWarning, match=re.escape(f"from {new} import {name}")) as caught:
        exec(f"from {old} import {name}", namespace)  # noqa: S102 - a user's import line, run as written
    assert namespace[name] is public
    assert all(w.filename == "<string>" for w in caught if issubclass(w.category, DeprecationWarning)), \
        [w.filename for w in caught]  # raised at the user's line, where Python's default filter shows it


def _shim_modules() -> set[str]:
    """Every module of the engine that is a deprecation shim (it calls engine.core.moved's ``moved``)."""
    out = set()
    for path in (ROOT / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "moved":
                out.add(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    return out


def test_the_table_covers_every_shim_and_no_code_of_ours_imports_a_deprecated_path() -> None:
    shims: dict[str, set[str]] = {}
    for old, name, _ in OLD_PATHS:
        shims.setdefault(old, set()).add(name)
    assert _shim_modules() == set(shims), "a shim (engine.core.moved) missing from OLD_PATHS, or the reverse"
    found = []
    for top in ("engine", "tui", "bench", "sensorlm_tui", "examples", "tests"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module in shims:
                    used = {a.name for a in node.names} & shims[node.module]
                    found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {n}" for n in used]
    assert not found, "import the internal home (or sensorlm_tui) instead:\n" + "\n".join(found)


def test_the_public_package_imports_no_torch_until_a_run_needs_it() -> None:
    probe = ("import sys, sensorlm_tui, sensorlm_tui.loop, sensorlm_tui.plugin, sensorlm_tui.lm, sensorlm_tui.steps; "
             "print(sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", output(done)


def test_readme_docs_and_examples_import_only_the_public_package() -> None:
    """What users copy: every tracked file of README.md, docs/ (the architecture page excepted: it is about the
    insides) and examples/ names no ``engine`` import."""
    tracked = subprocess.run(["git", "ls-files", "README.md", "docs", "examples"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    found = [f"{name}:{number}: {line.strip()}" for name in tracked if name != "docs/ARCHITECTURE.md"
             and name.endswith((".md", ".py", ".toml"))
             for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bfrom engine\b|\bimport engine\b", line)]
    assert not found, "use sensorlm_tui (add the name there if it is missing):\n" + "\n".join(found)
