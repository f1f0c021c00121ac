"""The SDPA kernel choice (engine.tasks.attention_kernels) pinned for every attention call the tasks make.

Torch-free rules read from torch's sdp_utils.cpp / sdp_utils_cpp.cpp (the module docstring cites them);
each case below is a call a task really makes, on targets the project meets: the H200 the first GPU run
used (sm 9.0, torch 2.11), a T4 (sm 7.5), a consumer Ampere card (sm 8.6), Blackwell with an old and a new
torch, and a plan with no device to ask (capability unknown).
"""

from __future__ import annotations

import pytest

from engine.core.config import load
from engine.tasks.attention_kernels import CPU_FLASH, EFFICIENT, FLASH, MATH, Call, Target, choose, parse_version
from engine.tasks.lm import memory as lm_memory

H200 = Target("cuda", (9, 0), (2, 11))
T4 = Target("cuda", (7, 5), (2, 11))
AMPERE_86 = Target("cuda", (8, 6), (2, 13))
UNKNOWN = Target("cuda", None, (2, 13))


def _lm_call(precision: str = "fp32", **model) -> Call:
    config = load(task="lm", preset="demo", overrides={"lm": {"seq_len": 512, "model": model}})
    return lm_memory.attention_call(lm_memory.shape_of(config), 512, precision)


def test_the_demo_lm_in_fp32_runs_the_math_path_on_every_gpu_and_the_fused_kernel_on_cpu() -> None:
    call = _lm_call()
    assert (call.heads, call.kv_heads, call.head_dim, call.enable_gqa, call.causal, call.mask) == \
        (4, 2, 16, True, True, False)  # what transformers 5 passes: causal, no mask, enable_gqa
    for target in (H200, T4, AMPERE_86, UNKNOWN, Target("cuda", (12, 0), (2, 13))):
        kernel = choose(call, target)
        assert kernel.name == MATH and kernel.materialises, (target, kernel)
    why = choose(call, H200).reason
    assert "needs fp16/bf16, got fp32" in why and "no grouped-query attention" in why
    assert choose(call, Target("cpu", None, (2, 13))).name == CPU_FLASH
    # the CPU flash kernel takes grouped-query attention only from torch 2.9; unknown torch: the bound
    assert choose(call, Target("cpu", None, (2, 8))).name == MATH
    assert choose(call, Target("cpu", None, None)).name == MATH


def test_lm_in_bf16_runs_flash_where_flash_runs_and_math_where_it_does_not() -> None:
    call = _lm_call("bf16")
    assert choose(call, H200).name == FLASH and choose(call, AMPERE_86).name == FLASH
    assert choose(call, T4).name == MATH  # flash needs sm 8.0; memory-efficient takes no GQA
    assert choose(call, UNKNOWN).name == FLASH  # a bf16 run is planned for a device with native bf16
    assert choose(_lm_call("fp16"), UNKNOWN).name == MATH  # an fp16 run may be on a T4
    # Blackwell: the fused kernels know sm 10.0 only from torch 2.7
    assert choose(call, Target("cuda", (10, 0), (2, 6))).name == MATH
    assert choose(call, Target("cuda", (10, 0), (2, 7))).name == FLASH
    # a head dim above 192 trains with flash on sm 9.0 but not on sm 8.6
    wide = Call("bf16", 8, 2, 256, 512, 512, causal=True, enable_gqa=True)
    assert choose(wide, H200).name == FLASH and choose(wide, AMPERE_86).name == MATH


def test_without_grouped_heads_fp32_takes_the_memory_efficient_kernel_if_the_head_dim_is_aligned() -> None:
    mha = _lm_call(kv_heads=4)
    assert not mha.enable_gqa and choose(mha, H200).name == EFFICIENT and choose(mha, T4).name == EFFICIENT
    assert choose(mha, UNKNOWN).name == EFFICIENT
    odd = Call("fp32", 4, 4, 18, 128, 128, causal=True)  # 18 is not a multiple of 4
    assert choose(odd, H200).name == MATH and "not a multiple of 4" in choose(odd, H200).reason
    # transformers repeats k and v to every head when the head dim is over 256: no GQA in the call then
    huge = lm_memory.attention_call(lm_memory.Shape(d=4 * 320, f=64, H=4, Hk=2, L=1, V=256, tied=False,
                                                    eager=False, lora=False, r=8, targets=(), norms_train=True),
                                    64, "bf16")
    assert (huge.kv_heads, huge.enable_gqa) == (4, False)


@pytest.mark.parametrize("preset", ["demo", "base"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_sensorlm_attention_runs_a_fused_kernel_on_the_gpus_it_is_planned_for(preset, precision) -> None:
    m = load(task="sensorlm", preset=preset).task_config
    model, data = m.model, m.data
    P = (data.minutes // model.patch_time) * (data.channels // model.patch_channels)
    L = model.max_caption_tokens
    dtype = "bf16" if precision == "bf16" else "fp32"
    calls = {  # engine/tasks/sensorlm/model.py: every F.scaled_dot_product_attention it makes
        "sensor encoder": Call(dtype, model.heads, model.heads, model.dim // model.heads, P, P),
        "text encoder (padding mask)": Call(dtype, model.text_heads, model.text_heads,
                                            model.text_dim // model.text_heads, L, L, mask=True),
        "decoder self-attention": Call(dtype, model.text_heads, model.text_heads,
                                       model.text_dim // model.text_heads, L - 1, L - 1, causal=True),
        "decoder cross-attention": Call(dtype, model.text_heads, model.text_heads,
                                        model.text_dim // model.text_heads, L - 1, P),
        "pooler (one query)": Call(dtype, model.heads, model.heads, model.dim // model.heads, 1, P),
    }
    for name, call in calls.items():
        for target in (H200, UNKNOWN):
            kernel = choose(call, target)
            assert not kernel.materialises, (name, target, kernel)
    # a masked call is never flash (it takes no mask): memory-efficient, in bf16 from sm 8.0 only
    masked = calls["text encoder (padding mask)"]
    assert choose(masked, H200).name == EFFICIENT
    assert choose(masked, T4).name == (MATH if dtype == "bf16" else EFFICIENT)


def test_versions_parse_from_package_metadata_strings() -> None:
    assert parse_version("2.11.0+cu130") == (2, 11) and parse_version("2.13.0+cpu") == (2, 13)
    assert parse_version("nightly") is None
    assert Target("cuda", (9, 0), (2, 11)).describe() == "cuda sm 9.0, torch 2.11"
    assert Target("cuda", None, None).describe() == "cuda (capability unknown)"


def test_sensorlm_prices_its_encoders_sdpa_as_the_math_path_where_torch_would_run_that() -> None:
    from engine.budget import analytic

    config = load(task="sensorlm", preset="tiny", overrides={"train": {"batch_size": 16},
                                                             "runtime": {"precision": "bf16"}})
    on_h200 = analytic.estimate(config, device="cuda", target=H200).total
    on_t4 = analytic.estimate(config, device="cuda", target=T4).total  # bf16 on sm 7.5: no fused kernel
    assert on_t4 == analytic.estimate(config, device="cuda", target=H200, attn_backend="math").total > on_h200
    assert analytic.estimate(config, device="cuda", target=UNKNOWN).total == on_h200
