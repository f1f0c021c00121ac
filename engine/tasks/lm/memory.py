"""The LM's training step as a ledger (engine.tasks.ledger): an upper bound on its peak, torch-free, in microseconds.

Read against transformers' Llama (``LlamaDecoderLayer``, ``LlamaRMSNorm``,
``LlamaMLP``, the sdpa/eager attention functions) and engine/tasks/lm/task.py's
loss. Symbols: B micro-batch, T seq_len, d hidden, f intermediate, H heads,
Hk key/value heads, Q = d/H head dim, V vocabulary, L layers, r LoRA rank;
u = B·T·d, ukv = B·T·Hk·Q, uf = B·T·f elements. ``lp`` is the bytes of a
matmul output (2 under autocast, else 4); RMSNorm computes in fp32 and the
residual stream is fp32 in every precision.

What autograd keeps depends on what trains, and this is where LoRA changes
the budget besides its tiny optimizer state: a frozen Linear keeps no input
(its input gradient needs only the weight), a frozen norm weight keeps no
normalised copy, and a frozen LM head keeps no input at all. So per layer:

- RMSNorm (×2): its input (4·u, kept by ``pow`` and the ``x·rsqrt`` product),
  rsqrt (4·B·T), the normalised copy (4·u) only if the norm weight trains,
  and its output (4·u, or its lp copy under autocast) only if a consumer
  Linear trains (weight or adapter);
- attention: which SDPA kernel runs decides it (engine.tasks.attention_kernels:
  transformers 5 calls SDPA causal, without a mask, with ``enable_gqa`` when
  there are fewer key/value heads). A fused kernel keeps rotary q and k
  (lp·u, lp·ukv), v (lp·ukv), its output (lp·u; laid out (B, T, H, Q), so it
  is o_proj's input too, no copy) and its logsumexp (4·B·H·T). The math
  path (fp32 GQA on any GPU: see that module) keeps q and k scaled (k
  repeated to every head), v repeated (3 · 4·u: it computes in fp32 even
  under autocast), the T×T softmax (4·B·H·T²) and, if o_proj trains, the
  merged-heads copy o_proj reads (lp·u); for a moment of its forward the raw
  scores, the softmax and its -inf test beside the saved result (9 bytes a
  score), and in backward the softmax's gradient and the scores' (2 · 4 bytes
  a score). On CUDA one more score-sized fp32 buffer is alive at that
  backward peak: the H200 run measured the CPU composition of this path plus
  exactly one such buffer at both shapes it ran (research/gpu-h200.md); its
  source in ATen is not identified, so the bound keeps it. Eager keeps the
  T×T softmax (4·B·H·T²) and, if o_proj trains, the merged-heads copy it
  reads (lp·u);
- MLP: gate (lp·uf), its SiLU (lp·uf), up (lp·uf), and down's input (lp·uf)
  only if down trains;
- each adapted Linear: its ``lora_A`` output (lp·B·T·r), kept by ``lora_B``.

Activation checkpointing keeps a layer's input only (4·u, plus the CPU RNG
snapshot), and its backward holds the recomputed layer beside the incoming
gradient. The head and loss: logits (lp·B·T·V, plus an fp32 copy under
autocast) are alive at the forward's peak; ``log_softmax`` keeps its fp32
output (4·B·T·V) and ``nll_loss`` the int64 targets; the loss's backward holds
that output, its gradient and the logits' gradient at once (3 × 4·B·T·V) —
at a 32k vocabulary this, not attention, is what a long sequence runs into.

engine.budget.analytic adds the static terms around this ledger: fp32
weights (base, adapters, norm copies), AdamW state only for what trains
(``trainable_tensors``), the int64 batch, the loss scalars, and on CUDA the
allocator's rounding and the cuBLAS workspaces; the peak is the largest
moment the ledger sees, with gradient accumulation the larger of the first
and a later micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.tasks.attention_kernels import Call, Kernel, Target, choose, sdpa_dtype
from engine.tasks.ledger import Stage, TaskLedger
from engine.tasks.lm.model_dir import read_config, shape_fields
from engine.tasks.lm.spec import LMConfig

F32 = 4
#: Bytes of the CPU generator state torch.utils.checkpoint snapshots per call (host memory; CPU only).
CPU_RNG_STATE = 5056
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    """The model's dimensions and what trains in it."""

    d: int
    f: int
    H: int
    Hk: int
    L: int
    V: int
    tied: bool
    eager: bool
    lora: bool
    r: int
    targets: tuple[str, ...]
    norms_train: bool

    @classmethod
    def of(cls, lm: LMConfig, hf: dict | None = None) -> "Shape":
        """From the [lm] section; ``hf`` is a model directory's config.json when lm.model.path is set."""
        m = lm.model
        if hf:
            n = shape_fields(m.path, hf)
            dims = (n["hidden_size"], n["intermediate_size"], n["num_attention_heads"], n["num_key_value_heads"],
                    n["num_hidden_layers"], n["vocab_size"], hf.get("tie_word_embeddings", False) is True)
        else:
            dims = (m.hidden_size, m.intermediate_size, m.heads, m.kv_heads, m.layers, m.vocab_size, m.tie_embeddings)
        lora = lm.finetune == "lora"
        return cls(*dims, eager=m.attn_implementation == "eager", lora=lora, r=lm.lora.r,
                   targets=tuple(lm.lora.target_list()) if lora else (), norms_train=not lora or lm.lora.train_norms)

    @property
    def Q(self) -> int:
        return self.d // self.H

    def linear(self, name: str) -> tuple[int, int]:
        """(in, out) features of a decoder-layer projection."""
        kv = self.Hk * self.Q
        return {"q_proj": (self.d, self.d), "k_proj": (self.d, kv), "v_proj": (self.d, kv), "o_proj": (self.d, self.d),
                "gate_proj": (self.d, self.f), "up_proj": (self.d, self.f), "down_proj": (self.f, self.d)}[name]

    def trains(self, name: str) -> bool:
        """Whether a projection has a gradient of its own (full fine-tune, or an adapter on it)."""
        return not self.lora or name in self.targets


def layer_tensors(s: Shape) -> tuple[list[int], list[int]]:
    """(every parameter tensor, the trainable ones) of one decoder layer, in elements."""
    every, train = [s.d, s.d], []
    for name in ATTN + MLP:
        i, o = s.linear(name)
        every.append(i * o)
        if not s.lora:
            train.append(i * o)
        elif name in s.targets:
            every += [s.r * i, o * s.r]
            train += [s.r * i, o * s.r]
    if s.lora and s.norms_train:
        every += [s.d, s.d]  # modules_to_save copies
    if s.norms_train:
        train += [s.d, s.d]
    return every, train


def outer_tensors(s: Shape) -> tuple[list[int], list[int]]:
    """(every, trainable) parameter tensors outside the layers: embedding, final norm, head; and rotary buffer."""
    every = [s.V * s.d, s.d] + ([] if s.tied else [s.V * s.d]) + [s.Q // 2]
    train = [] if s.lora else [s.V * s.d, s.d] + ([] if s.tied else [s.V * s.d])
    if s.lora and s.norms_train:
        every.append(s.d)
        train.append(s.d)
    return every, train


def _norm_saved(s: Shape, B: int, T: int, lp: int, out_kept: bool) -> int:
    u = B * T * s.d
    return (F32 * u + F32 * B * T + (F32 * u if s.norms_train else 0)
            + ((lp if lp < F32 else F32) * u if out_kept else 0))


def attention_call(s: Shape, T: int, precision: str) -> Call:
    """The SDPA call transformers 5 makes in training (``sdpa_attention_forward``): causal, no mask, and
    ``enable_gqa`` when there are fewer key/value heads and the head dim is at most 256 (else k and v are
    repeated to every head first, and the call has H of each)."""
    gqa = s.Hk < s.H and s.Q <= 256
    return Call(dtype=sdpa_dtype(precision), heads=s.H, kv_heads=s.Hk if gqa else s.H, head_dim=s.Q,
                q_len=T, kv_len=T, causal=True, enable_gqa=gqa)


def attention_kernel(s: Shape, T: int, precision: str, target: Target) -> Kernel:
    """The kernel the model's attention runs on ``target`` (eager never calls SDPA: reported as math)."""
    if s.eager:
        return Kernel("math", "attn_implementation = eager")
    return choose(attention_call(s, T, precision), target)


def layer_saved(s: Shape, B: int, T: int, lp: int, math: bool = False) -> int:
    """Bytes one decoder layer keeps for backward (module docstring); ``math``: SDPA runs the math path."""
    return sum(layer_halves(s, B, T, lp, math))


def layer_halves(s: Shape, B: int, T: int, lp: int, math: bool = False) -> tuple[int, int]:
    """(attention half, MLP half) of what a decoder layer keeps: the MLP half does not exist yet while the
    attention runs forward, and is freed again before the attention's backward."""
    u, ukv, uf = B * T * s.d, B * T * s.Hk * s.Q, B * T * s.f
    kv = ukv if s.Q <= 256 or s.Hk == s.H else u  # k and v repeated to every head before SDPA
    attn = lp * u + 2 * lp * kv + lp * u + F32 * B * s.H * T
    if math and not s.eager:
        attn = 3 * F32 * u + F32 * B * s.H * T * T + (lp * u if s.trains("o_proj") else 0)
    if s.eager:
        attn += F32 * B * s.H * T * T  # the softmax output @v reads
        # o_proj's input is a merged-heads copy of the (B, H, T, Q) output
        attn += lp * u if s.trains("o_proj") else 0
    # sdpa's output is laid out (B, T, H, Q) already: o_proj reads it without a copy
    mlp = 3 * lp * uf + (lp * uf if s.trains("down_proj") else 0)
    adapted = sum(1 for n in s.targets if n in ATTN)
    attn += lp * B * T * s.r * adapted + _norm_saved(s, B, T, lp, any(s.trains(n) for n in ATTN[:3]))
    mlp += lp * B * T * s.r * (len(s.targets) - adapted) + _norm_saved(s, B, T, lp, any(s.trains(n) for n in MLP[:2]))
    return attn, mlp


def stages(s: Shape, B: int, T: int, lp: int, checkpointing: bool, cpu: bool, math: bool = False) -> list[Stage]:
    """The step's stages in forward order: embedding, L layers, final norm + head, loss; ``math``: the
    attention runs SDPA's math path (module docstring)."""
    u, uf, BTV = B * T * s.d, B * T * s.f, B * T * s.V
    every, train = layer_tensors(s)
    full = not s.lora
    unit = {"units": (sum(every),), "unit_grads": F32 * sum(train)}  # a decoder layer is an FSDP unit
    out = [Stage("embedding", grads=F32 * s.V * s.d if full else 0, fwd_extra=F32 * u)]
    attn_half, mlp_half = layer_halves(s, B, T, lp, math)
    per_layer = attn_half + mlp_half
    scores = B * s.H * T * T
    attn_map = F32 * scores if s.eager else 0
    # Transients: the forward's largest is the MLP's (gate, up, SiLU, product alive before down); the
    # backward's the MLP's: two uf-sized gradients at once (product's, then SiLU's and up's, the saved
    # inputs freed as each Linear's backward finishes) beside two residual-sized ones and, full
    # fine-tune, the largest weight gradient being made.
    fwd_extra = 2 * lp * uf + F32 * u + attn_map
    bwd_extra = 2 * lp * uf + 2 * F32 * u + 2 * attn_map + (F32 * s.d * s.f if full else 0)
    if math and not s.eager:  # SDPA's math path: its score-sized transients (module docstring), while the
        # layer's MLP half is not made yet (forward) or already freed (backward)
        fwd_extra = max(fwd_extra, (2 * F32 + 1) * scores + lp * u - mlp_half)
        bwd_extra = max(bwd_extra, (2 + (0 if cpu else 1)) * F32 * scores + 3 * F32 * u - mlp_half)
    for i in range(s.L):
        if checkpointing:
            out.append(Stage(f"layer {i}", saved={"activations: layers": F32 * u + (CPU_RNG_STATE if cpu else 0)},
                             grads=F32 * sum(train), fwd_extra=per_layer + fwd_extra,
                             bwd_extra=per_layer + bwd_extra, grad_in=F32 * u, **unit))
        else:
            out.append(Stage(f"layer {i}", saved={"activations: layers": per_layer}, grads=F32 * sum(train),
                             fwd_extra=fwd_extra, bwd_extra=bwd_extra, grad_in=F32 * u, **unit))
    head_saved = _norm_saved(s, B, T, lp, full)
    head_grads = F32 * (s.d + (s.V * s.d if not s.tied else 0)) if full else (F32 * s.d if s.norms_train else 0)
    out.append(Stage("norm + head", saved={"activations: head": head_saved}, grads=head_grads,
                     fwd_extra=lp * BTV, bwd_extra=2 * F32 * u + (F32 * s.V * s.d if full else 0),
                     grad_in=F32 * BTV))
    casts = F32 * BTV if lp < F32 else 0  # logits.float() under autocast
    out.append(Stage("loss", saved={"logits + loss": F32 * BTV + 8 * B * T},
                     fwd_extra=lp * BTV + casts + F32 * B * T, bwd_extra=F32 * BTV + casts, grad_in=F32 * BTV))
    return out


def _hf_config(lm: LMConfig) -> dict | None:
    """A model directory's config.json (bounded and checked: engine.tasks.lm.model_dir), None without one."""
    return read_config(lm.model.path) if lm.model.path else None


def shape_of(config) -> Shape:
    """The run's model shape and trainable set (from config.json when lm.model.path is set)."""
    lm: LMConfig = config.task_config
    return Shape.of(lm, _hf_config(lm))


def ledger(config, B: int, precision: str, device: str, target: Target | None = None) -> TaskLedger:
    """The task's analytic memory model (``SPEC.analytic_memory``): the step's ledger for micro-batch ``B``.

    ``config`` already carries the settings being priced (seq_len among them); ``target``: the device the
    attention kernel is chosen for (default: ``device`` with this machine's torch, capability unknown).
    """
    lm: LMConfig = config.task_config
    s = shape_of(config)
    T = lm.seq_len
    lp = 2 if precision in ("bf16", "fp16") else F32
    every, train = layer_tensors(s)
    o_every, o_train = outer_tensors(s)
    all_every = every * s.L + o_every
    math = attention_kernel(s, T, precision, target or Target.local(device)).materialises
    return TaskLedger(stages=stages(s, B, T, lp, lm.model.activation_checkpointing, device == "cpu", math),
                      pending=[],
                      param_tensors=all_every, input_bytes=8 * B * (T + 1),
                      cast_elements=sum(n for n in all_every if n >= s.d * s.r) if lp < F32 else 0,
                      activation_tensors=30 * s.L + 20, trainable_tensors=train * s.L + o_train)


def parameter_counts(config) -> tuple[int, int]:
    """(parameters, trainable parameters) of the run's model, by arithmetic (no torch)."""
    s = shape_of(config)
    every, train = layer_tensors(s)
    o_every, o_train = outer_tensors(s)
    return sum(every) * s.L + sum(o_every) - s.Q // 2, sum(train) * s.L + sum(o_train)
