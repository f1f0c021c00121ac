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
- each adapted Linear: its ``lora_A`` output (lp·B·T·r), kept by ``lora_B``;
  with ``lm.lora.dropout`` > 0 its own dropout's output (lora_A's input, lp)
  and mask (CPU: fp32 noise; CUDA: bool) instead of the projection's input
  (``adapter_dropout``: 44.67 MiB predicted for a step that held 64.42
  without it, LoRA b12 s300 dropout 0.1).

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
from engine.tasks.ledger import Pending, Stage, TaskLedger
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
    #: lm.lora.dropout > 0: every adapter runs its input through its own nn.Dropout (module docstring).
    lora_dropout: bool = False

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
                   targets=tuple(lm.lora.target_list()) if lora else (), norms_train=not lora or lm.lora.train_norms,
                   lora_dropout=lora and lm.lora.dropout > 0)

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

    def keeps_input(self, name: str) -> bool:
        """Whether something of a projection keeps its input itself for backward: a trained weight, or an adapter
        without dropout (``lora_A`` reads the input); with dropout the adapter keeps its dropout's output instead."""
        return not self.lora or (name in self.targets and not self.lora_dropout)


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


def _norm_saved(s: Shape, B: int, T: int, lp: int, out_kept: bool, input_grad: bool = True) -> int:
    """What an RMSNorm keeps: for its input's gradient its input and rsqrt (only when the input requires
    one), the normalised copy when its weight trains, and its output when a consumer keeps it."""
    u = B * T * s.d
    return ((F32 * u + F32 * B * T if input_grad else 0) + (F32 * u if s.norms_train else 0)
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


def grads_needed(s: Shape, input_grad: bool) -> tuple[bool, bool, bool]:
    """Which parts of a layer autograd records: (q, k or v needs a gradient; the residual after the
    attention does; the gate and up outputs do), given whether the layer's input does."""
    qkv = input_grad or s.norms_train or any(s.trains(n) for n in ATTN[:3])
    residual = qkv or s.trains("o_proj")
    return qkv, residual, residual or s.norms_train or s.trains("gate_proj") or s.trains("up_proj")


def mlp_kept(s: Shape, B: int, T: int, lp: int, gate_up_grad: bool) -> int:
    """The MLP's uf-sized saved tensors: gate's output (the SiLU's input), the SiLU's and up's outputs (the
    product's inputs), and the product when down keeps its input (``Shape.keeps_input``)."""
    uf = B * T * s.f
    return (3 * lp * uf if gate_up_grad else 0) + (lp * uf if s.keeps_input("down_proj") else 0)


def layer_saved(s: Shape, B: int, T: int, lp: int, math: bool = False, input_grad: bool = True,
                cpu: bool = True) -> int:
    """Bytes one decoder layer keeps for backward (module docstring); ``math``: SDPA runs the math path."""
    return sum(layer_halves(s, B, T, lp, math, input_grad, cpu))


def adapter_dropout(s: Shape, B: int, T: int, lp: int, names, input_grad: bool, cpu: bool) -> int:
    """What the dropouts of the adapters on ``names`` keep (lm.lora.dropout > 0), their input requiring a
    gradient or not.

    peft runs ``lora_B(lora_A(dropout(x.to(fp32))))`` with one nn.Dropout per adapter, so each keeps its own:
    ``lora_A`` keeps the dropout's output as its input (lp bytes: its autocast copy, else the fp32 output),
    and the dropout's multiply keeps its mask when x needs a gradient (on CPU the scaled noise, fp32; on CUDA
    native_dropout's bool mask). In exchange nothing keeps x itself for the adapter (``Shape.keeps_input``).
    """
    if not s.lora_dropout:
        return 0
    mask = (F32 if cpu else 1) if input_grad else 0
    return sum((lp + mask) * B * T * s.linear(n)[0] for n in names if n in s.targets)


def layer_halves(s: Shape, B: int, T: int, lp: int, math: bool = False,
                 input_grad: bool = True, cpu: bool = True) -> tuple[int, int]:
    """(attention half, MLP half) of what a decoder layer keeps: the MLP half does not exist yet while the
    attention runs forward, and is freed again before the attention's backward.

    ``input_grad``: whether the layer's input requires a gradient. The first layer of a LoRA model takes
    the frozen embedding's output: autograd records nothing until the first op that trains (an adapter,
    a trained norm), so the norm before it keeps no input, and an attention none of whose inputs needs a
    gradient keeps nothing at all (a 2-layer LoRA model was bounded +10.6 % over without this).
    """
    u, ukv = B * T * s.d, B * T * s.Hk * s.Q
    kv = ukv if s.Q <= 256 or s.Hk == s.H else u  # k and v repeated to every head before SDPA
    qkv_kept = any(s.keeps_input(n) for n in ATTN[:3])
    qkv_grad, residual_grad, gate_up_grad = grads_needed(s, input_grad)
    # sdpa's output is laid out (B, T, H, Q) already: o_proj reads it without a copy
    attn = lp * u + 2 * lp * kv + lp * u + F32 * B * s.H * T
    if math and not s.eager:
        attn = 3 * F32 * u + F32 * B * s.H * T * T + (lp * u if s.keeps_input("o_proj") else 0)
    if s.eager:
        # eager_attention_forward keeps q, k and v repeated to every head (repeat_kv copies: the matmuls
        # save them), the softmax output @v reads, and, if o_proj trains, the merged-heads copy it reads;
        # no logsumexp and no separate output (the (B, H, T, Q) product is freed once copied)
        attn = 3 * lp * u + F32 * B * s.H * T * T + (lp * u if s.keeps_input("o_proj") else 0)
    if not qkv_grad:  # nothing in the attention needs a gradient: only an adapted o_proj keeps its input
        attn = lp * u if s.keeps_input("o_proj") else 0
    mlp = mlp_kept(s, B, T, lp, gate_up_grad)
    adapted = sum(1 for n in s.targets if n in ATTN)
    attn += lp * B * T * s.r * adapted + _norm_saved(s, B, T, lp, qkv_kept, input_grad)
    mlp += lp * B * T * s.r * (len(s.targets) - adapted) + \
        _norm_saved(s, B, T, lp, any(s.keeps_input(n) for n in MLP[:2]), residual_grad)
    # the adapters' dropouts; each input needs a gradient as the layer's does at that point (grads_needed)
    attn += adapter_dropout(s, B, T, lp, ATTN[:3], input_grad or s.norms_train, cpu) + \
        adapter_dropout(s, B, T, lp, ATTN[3:], qkv_grad, cpu)
    mlp += adapter_dropout(s, B, T, lp, MLP[:2], residual_grad or s.norms_train, cpu) + \
        adapter_dropout(s, B, T, lp, MLP[2:], gate_up_grad, cpu)
    return attn, mlp


def embedding_stage(s: Shape, B: int, T: int) -> Stage:
    """The embedding, with what lives from the first forward op to the last backward one.

    The rotary tables: cos and sin (1, T, Q) in fp32, made once per forward (LlamaRotaryEmbedding: position
    ids (1, T), whatever the batch) and saved by every layer's q·cos and rotate_half(q)·sin until the last
    backward; a term that does not scale with the batch, missing it made the bound 0.1-0.5 % low. A trained
    embedding's backward (embedding_dense_backward) reads the residual stream's gradient while it makes its
    own (grad_in). Tied embeddings: the shared weight's gradient made at the head's backward waits in
    autograd's input buffer (``tied_pending``); the embedding's backward makes its own beside it and the
    buffer adds the two out of place, the sum becoming the weight's gradient.
    """
    full, vd = not s.lora, F32 * s.V * s.d
    return Stage("embedding", saved={"rotary tables": 2 * F32 * T * s.Q}, grads=vd if full else 0,
                 bwd_extra=vd if full and s.tied else 0, fwd_extra=F32 * B * T * s.d,
                 grad_in=F32 * B * T * s.d if full else 0)


def tied_pending(s: Shape) -> list[Pending]:
    """A tied, trained head's gradient of the shared weight, held from the head's backward to the embedding's."""
    return [Pending("norm + head", "embedding", F32 * s.V * s.d)] if s.tied and not s.lora else []


def layer_transients(s: Shape, B: int, T: int, lp: int, cpu: bool, math: bool, mlp_half: int,
                     input_grad: bool = True) -> tuple[int, int]:
    """(forward, backward) transients of a decoder layer beyond what the ledger counts as alive.

    Forward: the MLP's largest moment (gate, up, SiLU, product alive before down). Backward, the MLP's, above
    everything the layer keeps: down's backward makes the product's gradient beside its weight gradient
    (full fine-tune); the product's backward the SiLU's and up's gradients beside it, the product itself
    freed if down kept it; and once the MLP's uf-sized tensors are freed, up's and gate's input gradients,
    their sum and the norm's (four residual-sized) beside a weight gradient. Math path or eager: their
    score-sized transients (module docstring), while the layer's MLP half is not made yet (forward) or
    already freed (backward): the math path's raw and scaled scores two at a time, the softmax's gradient
    and the scores' in backward; eager's own moments are given where they are computed. Eager's float causal mask
    (B, 1, T, T, create_causal_mask) is alive through the whole forward.
    """
    u, uf, scores = B * T * s.d, B * T * s.f, B * s.H * T * T
    fwd = 2 * lp * uf + F32 * u
    down_kept = s.keeps_input("down_proj")  # the product is saved (freed before the SiLU's and up's gradients)
    weight = F32 * s.d * s.f if not s.lora else 0
    freed = mlp_kept(s, B, T, lp, grads_needed(s, input_grad)[2])
    bwd = max(lp * uf + weight, (2 if down_kept else 3) * lp * uf, 4 * F32 * u + weight - freed)
    if math and not s.eager:
        fwd = max(fwd, (2 * F32 + 1) * scores + lp * u - mlp_half)
    elif s.eager:  # two score-sized tensors at a time (scores and scaled, scaled and masked, masked and the
        # softmax), the softmax output being one the layer keeps: one more beyond what it keeps
        fwd = max(fwd, F32 * scores + lp * u - mlp_half)
    if math and not s.eager:
        bwd = max(bwd, (2 + (0 if cpu else 1)) * F32 * scores + 3 * F32 * u - mlp_half)
    elif s.eager:  # its two heaviest moments: matmul(P, v)'s backward (P's and v's gradients, o_proj's copy
        # already consumed), then the softmax's (P, its gradient and the scores', v consumed too; v's
        # gradient waits for repeat_kv's backward, which runs after the softmax's)
        o_kept = lp * u if s.keeps_input("o_proj") else 0
        bwd = max(bwd, F32 * scores + 2 * F32 * u - o_kept - mlp_half,
                  2 * F32 * scores + F32 * u - lp * u - o_kept - mlp_half)
    return fwd + (F32 * B * T * T if s.eager else 0), bwd


def stages(s: Shape, B: int, T: int, lp: int, checkpointing: bool, cpu: bool, math: bool = False) -> list[Stage]:
    """The step's stages in forward order: embedding, L layers, final norm + head, loss; ``math``: the
    attention runs SDPA's math path (module docstring)."""
    u, BTV = B * T * s.d, B * T * s.V
    every, train = layer_tensors(s)
    full = not s.lora
    unit = {"units": (sum(every),), "unit_grads": F32 * sum(train)}  # a decoder layer is an FSDP unit
    piece = {"grad_piece": F32 * max(train, default=0)}  # one projection's gradient at a time (ledger.Stage)
    mask = F32 * B * T * T if s.eager else 0  # eager's float causal mask (layer_transients)
    out = [embedding_stage(s, B, T)]
    for i in range(s.L):
        attn_half, mlp_half = layer_halves(s, B, T, lp, math, input_grad=full or i > 0, cpu=cpu)
        per_layer = attn_half + mlp_half
        fwd_extra, bwd_extra = layer_transients(s, B, T, lp, cpu, math, mlp_half, input_grad=full or i > 0)
        if checkpointing:  # a checkpoint keeps its layer's inputs: the residual stream, and under eager the
            # causal mask every layer shares (so from the first layer's forward to its backward)
            kept = F32 * u + (CPU_RNG_STATE if cpu else 0) + (mask if i == 0 else 0)
            out.append(Stage(f"layer {i}", saved={"activations: layers": kept},
                             grads=F32 * sum(train), fwd_extra=per_layer + fwd_extra - mask,
                             bwd_extra=per_layer + bwd_extra, grad_in=F32 * u, **piece, **unit))
        else:
            out.append(Stage(f"layer {i}", saved={"activations: layers": per_layer}, grads=F32 * sum(train),
                             fwd_extra=fwd_extra, bwd_extra=bwd_extra, grad_in=F32 * u, **piece, **unit))
    head_saved = _norm_saved(s, B, T, lp, full)
    head_weight = F32 * s.V * s.d if full else 0  # its gradient: the head's own, or (tied) pending
    head_grads = F32 * s.d + (0 if s.tied else head_weight) if full else (F32 * s.d if s.norms_train else 0)
    out.append(Stage("norm + head", saved={"activations: head": head_saved}, grads=head_grads,
                     fwd_extra=lp * BTV, bwd_extra=2 * F32 * u + (head_weight if s.tied else 0),
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
                      pending=tied_pending(s),
                      param_tensors=all_every, input_bytes=8 * B * (T + 1),
                      cast_elements=sum(n for n in all_every if n >= s.d * s.r) if lp < F32 else 0,
                      activation_tensors=30 * s.L + 20, trainable_tensors=train * s.L + o_train)


def parameter_counts(config) -> tuple[int, int]:
    """(parameters, trainable parameters) of the run's model, by arithmetic (no torch)."""
    s = shape_of(config)
    every, train = layer_tensors(s)
    o_every, o_train = outer_tensors(s)
    return sum(every) * s.L + sum(o_every) - s.Q // 2, sum(train) * s.L + sum(o_train)
