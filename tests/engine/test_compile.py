"""runtime.compile on the toy task, in-process: losses as eager, recompiles counted, checkpoints independent of it.

Backends, chosen per test: ``aot_eager`` (dynamo's guards and AOTAutograd's graphs without inductor's C++
code generation) where the point is the wiring (recompiles, state-dict names, resume), ``inductor`` once,
for the real kernels. The session shares one inductor cache (tests/conftest.py).
"""

from __future__ import annotations

import pytest

from engine.budget.guard import check_start
from engine.budget.measure import DeviceInfo
from engine.checkpoint import format as ckpt
from engine.core import config as cfg
from engine.run.control.requests import Controls, set_value
from tests.engine.compile_check import assert_close, compare, train, with_compile

#: A toy of fast steps: dim 16, 2 channels × 32 samples.
SMALL = {"toy": {"dim": 16, "depth": 2, "channels": 2, "length": 32, "dropout": 0.0}}
#: Live batch changes: at the end of step k the batch becomes BATCHES[k] (three new sizes).
BATCHES = {2: 6, 5: 8, 8: 5}


def _config():
    return cfg.load(task="toy", overrides={**SMALL, "train": {"max_steps": 12, "batch_size": 4},
                                           "evaluation": {"every": 6}, "schedule": {"kind": "constant"},
                                           "checkpoint": {"every_steps": 6, "keep_last": 2}})


def _batch_changes(controls: Controls):
    def on_step(step: int) -> None:
        if step in BATCHES:
            controls.submit(set_value("batch_size", BATCHES[step]))
    return on_step


def _run(config, directory, resume=None):
    controls = Controls()
    return train(config, directory, resume=resume, on_step=_batch_changes(controls), controls=controls)


def _step6(directory):
    return ckpt.read(next(directory.glob("step-*6.safetensors")))


@pytest.fixture(scope="module")
def eager_and_compiled(tmp_path_factory):
    """The toy with three live batch changes, eager and compiled (model mode, aot_eager), each checkpointed."""
    root = tmp_path_factory.mktemp("compile")
    eager = _run(_config(), root / "eager")
    compiled = _run(with_compile(_config(), "model", "aot_eager"), root / "compiled")
    return root, eager, compiled


def test_compiled_losses_match_eager_through_three_live_batch_changes(eager_and_compiled) -> None:
    _, eager, compiled = eager_and_compiled
    # aot_eager runs eager's kernels on AOTAutograd's graphs: the same numbers (measured identical); 1e-6 allows
    # for a decomposition summing in another order.
    assert_close(eager.losses, compiled.losses, rel=1e-6)
    assert [e.new for e in compiled.of("setting") if e.name == "batch_size"] == [6, 8, 5]


def test_compile_is_a_start_up_phase_and_each_new_batch_size_recompiles_at_most_once(eager_and_compiled) -> None:
    _, eager, compiled = eager_and_compiled
    assert not eager.of("compile") and not [p for p in eager.of("phase") if p.phase == "compiling"]
    names = [e.type for e in compiled.events]
    assert names.index("phase") < names.index("compile") < names.index("step")
    first, *later = compiled.of("compile")
    assert first.step == 1 and first.first and first.frames >= 1 and first.seconds > 0 and not first.recompiles
    # Steps 3-5 train at 6, 6-8 at 8, 9-12 at 5: each new size may recompile once (dynamo then makes the batch
    # dimension symbolic, so later sizes need none), never more, and each recompile says why.
    by_size = {3: 6, 6: 8, 9: 5}
    assert {e.step for e in later} <= set(by_size), [(e.step, e.reasons) for e in later]
    assert all(e.recompiles <= 1 and len(e.reasons) == e.recompiles for e in later)
    assert all("size mismatch" in reason for e in later for reason in e.reasons)
    assert compiled.trainer.compiler.recompiles == sum(e.recompiles for e in later) <= len(by_size)


def test_checkpoints_do_not_depend_on_compile_and_resume_crosses_it_both_ways(eager_and_compiled) -> None:
    root, eager, compiled = eager_and_compiled
    saved_eager, saved_compiled = _step6(root / "eager"), _step6(root / "compiled")
    assert set(saved_compiled.tensors) == set(saved_eager.tensors)
    assert not [k for k in saved_compiled.tensors if "_orig_mod" in k]
    # A compiled run's checkpoint resumes eager, an eager one compiled; steps 7-12 as the whole runs had them.
    to_eager = _run(_config(), root / "to-eager", resume=saved_compiled)
    to_compiled = _run(with_compile(_config(), "blocks", "aot_eager"), root / "to-compiled", resume=saved_eager)
    later = {s: v for s, v in compiled.losses.items() if s > 6}
    assert to_eager.losses == later  # eager after compiled (aot_eager): bit-identical on CPU
    assert_close({s: v for s, v in eager.losses.items() if s > 6}, to_compiled.losses, rel=1e-6)
    assert to_compiled.of("compile")[0].step == 7 and to_compiled.trainer.settings.batch_size == 5


@pytest.mark.slow
def test_inductor_compiles_the_toy_and_matches_eager() -> None:
    config = cfg.load(task="toy", overrides={"toy": {"dim": 16, "depth": 1, "channels": 2, "length": 16},
                                             "train": {"max_steps": 4, "batch_size": 4}, "evaluation": {"every": 0},
                                             "checkpoint": {"every_steps": 0}})
    eager, compiled = compare(config, "model", "inductor")
    # Inductor's fused kernels sum in their own order: losses agree to float rounding, not bit for bit.
    assert_close(eager.losses, compiled.losses, rel=1e-5)
    first = compiled.of("compile")[0]
    assert first.backend == "inductor" and first.frames == 1 and first.seconds > 0


def test_the_guard_judges_a_compiled_step_by_eager_on_cpu_and_refuses_it_on_a_device_saying_why() -> None:
    config = with_compile(cfg.load(task="toy"), "blocks", "inductor")
    gib = 1 << 30
    cpu = check_start(config, DeviceInfo(type="cpu", total=16 * gib, free=8 * gib))
    assert cpu.ok
    cuda = check_start(config, DeviceInfo(type="cuda", name="GPU", total=80 * gib, free=80 * gib, context=0))
    assert not cuda.ok and "\n" not in cuda.message
    assert "runtime.compile=blocks under the memory guard" in cuda.message and "not yet measured" in cuda.message
    assert any(option.startswith("--no-vram-check") for option in cuda.options)
    assert check_start(with_compile(config, "off", "inductor"),
                       DeviceInfo(type="cuda", name="GPU", total=80 * gib, free=80 * gib, context=0)).ok
