"""Which kernel ``scaled_dot_product_attention`` runs on a target, from what a plan knows: torch-free task vocabulary.

Memory depends on the answer: the math path keeps the (…, Lq, Lk) softmax
output for backward (and its upcast scores for a moment); every fused kernel
keeps only its output and a logsumexp row. A task's analytic model describes
each SDPA call it makes (``Call``), asks ``choose`` on the run's ``Target``
and prices the answer. The contract is an upper bound: where the rules below
cannot decide (capability unknown, a torch version they were not read
against), the answer is the path that materialises the scores.

The rules are torch's own dispatch (``select_sdp_backend`` in
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and
``select_sdp_backend_cpp`` in sdp_utils_cpp.cpp), read for the torch range the
project supports (2.5 up), reduced to what decides a dense training call:

CUDA (priority flash → memory-efficient → math; cuDNN, first on some recent
Hopper/Blackwell setups, needs fp16/bf16 too and is left out: not counting it
can only raise the bound):

* flash: q/k/v in fp16 or bf16; no ``attn_mask``; one head dim for q, k and v,
  at most 256 (and a multiple of 8, which older releases required);
  compute capability 8.0 up to 9.0 (12.0 from torch 2.7, 12.1 from 2.8, when
  Blackwell was added); on 8.6/8.9/12.x training with a head dim above 192 is
  refused; ``is_causal`` only with as many queries as keys; grouped-query
  attention (fewer key/value heads) with ``enable_gqa`` when the key/value
  heads divide the query heads.
* memory-efficient: fp32 or fp16 (bf16 too from capability 8.0); capability
  5.0 up to the same upper bound; q and k head dims equal and aligned (a
  multiple of 4 in fp32, 8 in fp16/bf16); a mask is allowed. **No
  grouped-query attention** through torch 2.13: the dense check is built with
  ``supports_gqa = false`` for it (the documentation of 2.13 says GQA "works
  only for Flash_attention and math kernel on CUDA", and its meta backward
  sizes the key gradient by the query heads). Native GQA for it landed after
  (pytorch#191085); a later torch is not assumed to have it.
* otherwise math, which keeps the softmax in fp32 even for fp16/bf16 inputs.

CPU (flash → math): the CPU flash kernel takes fp32/fp64/bf16/fp16 and masks,
no dropout, and grouped-query attention only from torch 2.9 (pytorch#157893).

So the demo LM (4 query heads, 2 key/value heads: transformers 5 passes
``enable_gqa=True`` when there is no mask) trains in fp32 on CUDA through the
math path on every GPU — flash needs fp16/bf16, memory-efficient takes no GQA
— and keeps a B·H·T² fp32 softmax per layer that the CPU fused kernel never
makes. An H200 run measured exactly that gap (research/gpu-h200.md).

An unknown capability (a plan with no device to ask) is answered for every
capability class the torch version runs on, and the worst answer is kept; a
bf16 run is taken to be on a device with native bf16 (8.0 or newer), the only
place it is fast enough to be planned for.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

MATH = "math"
FLASH = "flash"
EFFICIENT = "memory-efficient"
CPU_FLASH = "cpu-flash"
#: Capability classes an unknown CUDA device may be (the oldest torch 2.5 builds for, up to Blackwell).
CAPABILITIES = ((5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0), (12, 1))
#: Torch versions whose CPU flash kernel takes grouped-query attention.
CPU_GQA_SINCE = (2, 9)


@dataclass(frozen=True)
class Target:
    """Where the step runs: device type, CUDA compute capability and torch version (None: unknown)."""

    device: str = "cpu"
    capability: tuple[int, int] | None = None
    torch: tuple[int, int] | None = None

    @classmethod
    def local(cls, device: str, capability: tuple[int, int] | None = None) -> "Target":
        """A target with this machine's installed torch version (read from its metadata; torch not imported)."""
        return cls("cpu" if device == "cpu" else "cuda", capability, installed_torch())

    def describe(self) -> str:
        """'cuda sm 9.0, torch 2.11' style text."""
        cap = f" sm {self.capability[0]}.{self.capability[1]}" if self.capability else \
            (" (capability unknown)" if self.device == "cuda" else "")
        version = f", torch {self.torch[0]}.{self.torch[1]}" if self.torch else ""
        return f"{self.device}{cap}{version}"


def installed_torch() -> tuple[int, int] | None:
    """(major, minor) of the installed torch, from its package metadata; None without torch."""
    try:
        return parse_version(metadata.version("torch"))
    except metadata.PackageNotFoundError:
        return None


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as '2.11.0+cu130'; None when it does not parse."""
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Call:
    """One SDPA call as the kernel choice sees it: q/k/v dtype (as SDPA receives them, autocast applied),
    heads of the query and of the key/value, head dim, sequence lengths and flags."""

    dtype: str
    heads: int
    kv_heads: int
    head_dim: int
    q_len: int
    kv_len: int
    mask: bool = False
    causal: bool = False
    enable_gqa: bool = False
    dropout: bool = False

    @property
    def grouped(self) -> bool:
        """Fewer key/value heads than query heads."""
        return self.kv_heads != self.heads


@dataclass(frozen=True)
class Kernel:
    """The kernel chosen and why (the first rule that ruled out each faster one)."""

    name: str
    reason: str

    @property
    def materialises(self) -> bool:
        """Whether the call keeps its (…, Lq, Lk) probabilities for backward (the math path)."""
        return self.name == MATH


def choose(call: Call, target: Target) -> Kernel:
    """The kernel torch runs ``call`` with on ``target`` (module docstring); math wherever unsure."""
    if target.device != "cuda":
        return _cpu(call, target.torch)
    if target.capability is not None:
        return _cuda(call, target.capability, target.torch)
    classes = [c for c in CAPABILITIES if c <= _top(target.torch) and (call.dtype != "bf16" or c >= (8, 0))]
    picks = [(_cuda(call, c, target.torch), c) for c in classes]
    worst = next(((k, c) for k, c in picks if k.materialises), None)
    if worst is not None:
        kernel, cap = worst
        return Kernel(MATH, f"capability unknown; on sm {cap[0]}.{cap[1]}: {kernel.reason}")
    names = {k.name for k, _ in picks}
    return Kernel(picks[-1][0].name if len(names) == 1 else "fused",
                  "capability unknown; a fused kernel on every class: " + "; ".join(sorted(names)))


def _top(version: tuple[int, int] | None) -> tuple[int, int]:
    """The newest capability torch's fused kernels accept at ``version`` (9.0 when the version is unknown)."""
    if version is None or version < (2, 7):
        return (9, 0)
    return (12, 0) if version < (2, 8) else (12, 1)


def _cpu(call: Call, version: tuple[int, int] | None) -> Kernel:
    if call.dropout:
        return Kernel(MATH, "the CPU flash kernel takes no dropout")
    if call.grouped:
        if not call.enable_gqa or call.heads % call.kv_heads:
            return Kernel(MATH, "key/value heads differ without enable_gqa")
        if version is None or version < CPU_GQA_SINCE:
            return Kernel(MATH, "grouped-query attention on the CPU flash kernel needs torch 2.9")
    return Kernel(CPU_FLASH, "the CPU flash kernel")


def _cuda(call: Call, cap: tuple[int, int], version: tuple[int, int] | None) -> Kernel:
    if call.grouped and (not call.enable_gqa or call.heads % call.kv_heads):
        return Kernel(MATH, "key/value heads differ without enable_gqa")
    flash = _flash_refusal(call, cap, version)
    if flash is None:
        return Kernel(FLASH, "flash attention")
    efficient = _efficient_refusal(call, cap, version)
    if efficient is None:
        return Kernel(EFFICIENT, f"memory-efficient attention (flash: {flash})")
    return Kernel(MATH, f"flash: {flash}; memory-efficient: {efficient}")


def _flash_refusal(call: Call, cap: tuple[int, int], version: tuple[int, int] | None) -> str | None:
    """Why flash attention does not take ``call`` on ``cap`` (None: it does)."""
    if call.dtype not in ("fp16", "bf16"):
        return f"needs fp16/bf16, got {call.dtype}"
    if not (8, 0) <= cap <= _top(version):
        return f"runs on sm 8.0-{_top(version)[0]}.{_top(version)[1]}, not {cap[0]}.{cap[1]}"
    if call.mask:
        return "takes no attn_mask"
    if call.head_dim > 256 or call.head_dim % 8:
        return f"head dim {call.head_dim}: at most 256, a multiple of 8"
    if (cap[0] == 8 and cap[1] in (6, 7, 8, 9) or cap[0] == 12) and call.head_dim > 192:
        return f"training with head dim {call.head_dim} > 192 is refused on sm {cap[0]}.{cap[1]}"
    if call.causal and call.q_len != call.kv_len:
        return "is_causal with fewer queries than keys"
    return None


def _efficient_refusal(call: Call, cap: tuple[int, int], version: tuple[int, int] | None) -> str | None:
    """Why memory-efficient attention does not take ``call`` on ``cap`` (None: it does)."""
    if call.grouped:
        return "takes no grouped-query attention (enable_gqa) through torch 2.13"
    if not (5, 0) <= cap <= _top(version):
        return f"runs on sm 5.0-{_top(version)[0]}.{_top(version)[1]}, not {cap[0]}.{cap[1]}"
    if call.dtype == "bf16" and cap < (8, 0):
        return f"bf16 needs sm 8.0, not {cap[0]}.{cap[1]}"
    if call.dtype not in ("fp32", "fp16", "bf16"):
        return f"dtype {call.dtype}"
    align = 4 if call.dtype == "fp32" else 8
    if call.head_dim % align:
        return f"head dim {call.head_dim} not a multiple of {align} in {call.dtype}"
    return None


def sdpa_dtype(precision: str) -> str:
    """The dtype q/k/v reach SDPA in for a run of ``precision`` (autocast casts them to bf16/fp16; fp32 runs
    stay fp32)."""
    return precision if precision in ("bf16", "fp16") else "fp32"
