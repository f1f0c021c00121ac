"""LoRA on the tiny Llama, its decoder layers compiled: the same losses as eager, and the same PEFT export.

``aot_eager``: peft's adapters inside dynamo's and AOTAutograd's graphs, without inductor's C++ codegen
(the toy's test, tests/engine/test_compile.py, runs inductor).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.engine.compile_check import assert_close, compare
from tests.engine.lm.conftest import make_config

pytestmark = pytest.mark.slow


def test_lora_layers_compile_match_eager_and_export_the_same_adapter(corpus_file, tmp_path) -> None:
    config = make_config(corpus_file, train={"max_steps": 2}, evaluation={"every": 0}, finetune="lora")
    eager, compiled = compare(config, "blocks", "aot_eager")
    assert_close(eager.losses, compiled.losses, rel=1e-6)
    assert compiled.of("compile")[0].frames >= 1
    paths = [run.trainer.task.export(run.trainer.model, tmp_path / name, "peft_adapter")
             for name, run in (("eager", eager), ("compiled", compiled))]
    files = [sorted(p.name for p in path.iterdir()) for path in paths]
    assert files[0] == files[1] and "adapter_model.safetensors" in files[0]
    assert (paths[0] / "adapter_config.json").read_text() == (paths[1] / "adapter_config.json").read_text()
    a, b = (load_file(path / "adapter_model.safetensors") for path in paths)
    assert sorted(a) == sorted(b) and not [k for k in b if "_orig_mod" in k]
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a)
