"""The SensorLM step as a ledger (engine.tasks.ledger): every tensor autograd keeps, stage by stage.

Torch-free. Read against engine/tasks/sensorlm/model.py and task.py (the
batch, ``_forward`` and the losses); the per-block forms are in
engine.tasks.sensorlm.blocks. Symbols: B micro-batch, T minutes, C channels, P patches
(= N tokens of the encoder), K = patch_time·patch_channels (so B·P·K = B·T·C),
D/F/H the encoder's width/MLP width/heads, Dt/Ft/Ht the text side's, L caption
tokens and L' = L − 1 decoder positions, V vocabulary, E embedding size.
``lp`` is the bytes of a matmul output (2 under autocast, else 4); the
residual streams are fp32 in every precision (a bf16 branch added to the fp32
sum of embedding and positions promotes).

Stages in forward order (backward runs them in reverse; what each keeps):

- ``sensor input``: patchify's copy of x kept by patch_embed (4·BTC; its
  autocast copy lp·BTC); positions and mask-token ``where`` are transient.
- ``encoder block i``: blocks.saved (or only its input under activation
  checkpointing, the rest recomputed during its backward); on CPU every
  checkpoint call (one per block, one per query chunk of ``chunked``) also
  keeps a snapshot of the generator state (CPU_RNG_STATE bytes) until the
  block's backward, the chunks' snapshots inside a checkpointed block too (its
  frame is held by the graph, not by the block's checkpoint): 768 of them in
  ``tiny`` with ``chunked`` 16 and checkpointing, 3.7 MiB the allocator's
  events saw and the ledger once left out (−0.5 % at batch 4). Host memory:
  on CUDA the snapshots (``torch.cuda.get_rng_state`` too) are CPU tensors.
- ``encoder norm``: its input, mean/rstd, and the output the three heads keep
  (fp32: one tensor shared; autocast: one lp copy per consuming Linear).
- ``recon head``: nothing new; its B·T·C output lives until the loss returns.
- with ``model.text_view = "clean"`` the three encoder stages come twice: first the masked pass
  (tagged ``(masked pass)``; its output kept by the recon head only), then, after the recon head,
  the unmasked pass that the pool and memory read. The clean pass's backward runs first (autograd
  goes by creation order), so it allocates the encoder's parameter gradients; the masked pass's
  backward then makes each one as a transient before adding it in, and the recon head's input
  gradient is pending for the masked pass's norm.
- ``pool``: kv of the tokens (2·lp·BPD) and a few (B, D) tensors; with
  0 < contrastive_encoder_grad < 1 also grad_scale's copy of the tokens.
- ``text encoder``: text blocks (masked SDPA) and the masked mean's weights.
- ``memory``: Linear(D→Dt) output (lp·BPDt), kept by every decoder cross-attention.
- ``decoder``: decoder blocks (causal self-attention, cross-attention keeping
  kv of the memory, 2·lp·BPDt per block), dec_norm and its output.
- ``loss``: log_softmax of the logits (4·BL'V), the int64 targets copy, the
  recon weight and difference (2 · 4·BTC), the contrastive B×B maps. At its
  forward peak (the squared error of the recon loss) also alive: logits,
  their fp32 copy under autocast, recon and its fp32 copy, patchified targets
  and validity (4 + 1 bytes·BTC), the square and the weighted square.

Pending gradients: the recon gradient (from the loss's backward to the recon
head's), the memory's gradient (accumulated by the decoder's cross-attention
backward, consumed by ``memory``) and the encoder output's gradient (from
``memory`` to ``encoder norm``, the pool and recon head adding into it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from engine.tasks.attention_kernels import Call, Target, choose, sdpa_dtype
from engine.tasks.ledger import Pending, Stage, TaskLedger
from engine.tasks.sensorlm import blocks
from engine.tasks.sensorlm.blocks import BlockShape

F32 = 4
#: Bytes of the CPU generator state ``torch.utils.checkpoint`` snapshots per checkpoint call (preserve_rng_state);
#: host memory, so it counts on CPU only. No tensor trace sees it (it is made outside the dispatcher).
CPU_RNG_STATE = 5056


@dataclass(frozen=True)
class Shape:
    """The SensorLM dimensions one estimate needs, read once from a RunConfig (plain ints)."""

    T: int
    C: int
    pt: int
    pc: int
    D: int
    depth: int
    H: int
    F: int
    Dt: int
    text_depth: int
    dec_depth: int
    Ht: int
    Ft: int
    L: int
    V: int
    E: int
    dropout: bool = False
    #: model.contrastive_encoder_grad: 0 detaches the pool's input, ≥ 1 passes it, between makes a copy.
    pool_grad: float = 1.0
    #: model.text_view == "clean": a second, unmasked encoder pass feeds the pool and the memory.
    clean_view: bool = True

    @property
    def P(self) -> int:
        return (self.T // self.pt) * (self.C // self.pc)

    @property
    def K(self) -> int:
        return self.pt * self.pc

    @classmethod
    def of(cls, config) -> "Shape":
        """Dimensions of ``config`` (data.channels is the channel count: true for synthetic data and for
        CSV files with at least that many channels)."""
        m, d = config.task_config.model, config.task_config.data
        return cls(T=d.minutes, C=d.channels, pt=m.patch_time, pc=m.patch_channels, D=m.dim, depth=m.depth,
                   H=m.heads, F=int(m.dim * m.mlp_ratio), Dt=m.text_dim, text_depth=m.text_depth,
                   dec_depth=m.decoder_depth, Ht=m.text_heads, Ft=int(m.text_dim * m.mlp_ratio),
                   L=m.max_caption_tokens, V=m.vocab_size, E=m.embed_dim, dropout=m.dropout > 0,
                   pool_grad=float(getattr(m, "contrastive_encoder_grad", 1.0)),
                   clean_view=getattr(m, "text_view", "clean") == "clean")


def param_tensors(s: Shape) -> dict[str, list[int]]:
    """Element counts of every parameter tensor, grouped by the stage whose backward makes its gradient."""
    D, Dt = s.D, s.Dt
    cross = [Dt * Dt, Dt, 2 * Dt * Dt, 2 * Dt, Dt * Dt, Dt]
    dec_block = [Dt, Dt, 3 * Dt * Dt, 3 * Dt, Dt * Dt, Dt, Dt, Dt] + cross + [Dt, Dt, s.Ft * Dt, s.Ft, Dt * s.Ft, Dt]
    return {
        "sensor input": [s.K * D, D, D, (s.T // s.pt) * D, (s.C // s.pc) * D],
        "encoder blocks": blocks.params(D, s.F) * s.depth,
        "encoder norm": [D, D],
        "recon head": [D * s.K, s.K],
        "pool": [D, D * D, D, 2 * D * D, 2 * D, D * D, D, D, D, s.E * D],
        "text encoder": blocks.params(Dt, s.Ft) * s.text_depth + [Dt, Dt, s.E * Dt],
        "memory": [Dt * D, Dt],
        "decoder": dec_block * s.dec_depth + [Dt, Dt, s.L * Dt],
        "loss": [s.V * Dt, 1, 1],  # tok_embed (tied: its first gradient is the logits'), logit scale and bias
    }


def unit_sizes(s: Shape) -> dict[str, int]:
    """Parameter elements of one block of each ModuleList (FSDP units: Task.shard_units)."""
    Dt = s.Dt
    decoder = sum(param_tensors(s)["decoder"]) - (2 * Dt + s.L * Dt)  # less dec_norm and the positions
    return {"encoder": sum(blocks.params(s.D, s.F)), "text": sum(blocks.params(Dt, s.Ft)),
            "decoder": decoder // max(1, s.dec_depth)}


#: Tensors an autocast forward casts once and keeps (Linear weights and biases, the tied LM head).
def cast_params(s: Shape) -> int:
    """Elements of parameters autocast copies to lp (everything a matmul reads; not norms or embeddings)."""
    groups = param_tensors(s)
    total = sum(sum(v) for v in groups.values())
    norms = 2 * s.D * (2 * s.depth + 2) + 2 * s.Dt * (2 * s.text_depth + 3 * s.dec_depth + 2)
    embeds = (s.T // s.pt) * s.D + (s.C // s.pc) * s.D + 2 * s.D + s.L * s.Dt + 2
    return total - norms - embeds  # tok_embed stays: F.linear(…, tok_embed.weight) casts it


@dataclass(frozen=True)
class Numerics:
    """Element sizes for one precision on one device (see blocks.py)."""

    lp: int
    ln: int
    softmax_bytes: int
    autocast: bool
    cuda: bool

    @classmethod
    def of(cls, precision: str, device: str) -> "Numerics":
        autocast = precision != "fp32"
        cuda = device == "cuda"
        lp = 2 if autocast else 4
        # CUDA autocast runs softmax in fp32 and the following matmul keeps a bf16 copy: 4 + 2 bytes.
        softmax = (4 + 2) if (autocast and cuda) else lp
        return cls(lp=lp, ln=lp, softmax_bytes=softmax, autocast=autocast, cuda=cuda)


def _block(s: Shape, n: Numerics, B: int, N: int, d: int, f: int, heads: int, backend: str, chunk: int,
           masked: bool = False) -> BlockShape:
    return BlockShape(B=B, N=N, d=d, f=f, heads=heads, backend=backend, chunk=chunk, masked=masked,
                      lp=n.lp, ln=n.ln, softmax_bytes=n.softmax_bytes, cuda=n.cuda, dropout=s.dropout)


@dataclass(frozen=True)
class StepSizes:
    """What every stage's sizes are read from: the shape, the micro-batch, the attention and precision
    choices, and the counts most stages multiply (bytes are ``lp`` for a matmul output, ``R`` = fp32)."""

    s: Shape
    n: Numerics
    B: int
    backend: str
    chunk: int
    checkpointing: bool

    @cached_property
    def lp(self) -> int:
        return self.n.lp

    @cached_property
    def btc(self) -> int:
        """Elements of the input window (B·T·C = B·P·K)."""
        return self.B * self.s.P * self.s.K

    @cached_property
    def u(self) -> int:
        """Elements of the encoder's activations (B·P·D)."""
        return self.B * self.s.P * self.s.D

    @cached_property
    def um(self) -> int:
        """Elements of the memory the decoder attends to (B·P·Dt)."""
        return self.B * self.s.P * self.s.Dt

    @cached_property
    def params(self) -> dict[str, int]:
        """Parameter elements of each stage group (param_tensors, summed once: the planner asks many times)."""
        return {k: sum(v) for k, v in param_tensors(self.s).items()}

    @cached_property
    def units(self) -> dict[str, int]:
        """Parameter elements of one block of each ModuleList (unit_sizes)."""
        return unit_sizes(self.s)

    def grads(self, stage: str) -> int:
        """Bytes of the fp32 parameter gradients of a stage group."""
        return F32 * self.params[stage]

    def cast_w(self, stage: str) -> int:
        """Under autocast, the lp weight gradient a stage group makes before its fp32 one; 0 otherwise."""
        return self.lp * self.params[stage] if self.n.autocast else 0


R = F32


def stages(s: Shape, B: int, backend: str, chunk: int, checkpointing: bool, n: Numerics
           ) -> tuple[list[Stage], list[Pending]]:
    """The SensorLM step's stages and pending gradients for micro-batch ``B`` (module docstring)."""
    z = StepSizes(s, n, B, backend, chunk, checkpointing)
    recon_head = Stage("recon head", saved={}, grads=z.grads("recon head"), fwd_extra=z.lp * z.btc,
                       bwd_extra=z.lp * z.u + 2 * R * z.u + z.cast_w("recon head"))  # input grad, cast, accumulate
    out: list[Stage] = []
    if s.clean_view:
        # model.forward: the masked pass and the recon head, then the clean pass for pool and memory.
        # Backward visits the clean pass first (created later), so it allocates the encoder's gradients.
        out += encoder_pass(z, " (masked pass)", 1, first_grads=False) + [recon_head]
        out += encoder_pass(z, "", 2, first_grads=True)
    else:
        out += encoder_pass(z, "", 3, first_grads=True) + [recon_head]
    out += [pool_stage(z), *text_stages(z), decoder_stage(z), loss_stage(z)]
    pending = [Pending("loss", "recon head", z.lp * z.btc),
               Pending("decoder", "memory", z.lp * z.um),
               Pending("memory", "encoder norm", R * z.u)]
    if s.clean_view:  # the recon head's input gradient, for the masked pass's norm
        pending.append(Pending("recon head", "encoder norm (masked pass)", R * z.u))
    return out, pending


def encoder_pass(z: StepSizes, tag: str, heads: int, first_grads: bool) -> list[Stage]:
    """One pass of the sensor encoder whose output ``heads`` Linear layers read.

    ``first_grads``: this pass's backward runs first and allocates the encoder's parameter
    gradients; the other pass's backward makes each block's gradient as a transient and adds it in.
    """
    s, n, lp, u = z.s, z.n, z.lp, z.u
    P, D = s.P, s.D
    blk = _block(s, n, z.B, P, D, s.F, s.H, z.backend, z.chunk)
    per_block_params = F32 * sum(blocks.params(D, s.F))
    rng = 0 if n.cuda else CPU_RNG_STATE
    chunk_rng = rng * (-(-P // z.chunk) if P > z.chunk else 1) if z.backend == "chunked" else 0  # one per chunk
    full = blocks.saved(blk) + chunk_rng
    nn_saved = blk.softmax_bytes * blk.nn if z.backend == "math" else 0
    unit = z.units["encoder"]
    group = f"activations: sensor encoder{tag}"
    grads = (lambda k: k) if first_grads else (lambda k: 0)
    again = (lambda k: 0) if first_grads else (lambda k: k)
    out: list[Stage] = [Stage(
        f"sensor input{tag}", saved={group: (lp if n.autocast else R) * z.btc},
        grads=grads(z.grads("sensor input")),
        fwd_extra=2 * lp * u + R * u + R * P * D,           # patch_embed out, where out, h + pos, pos
        bwd_extra=2 * R * u + R * P * D + z.cast_w("sensor input") + again(z.grads("sensor input")),
        grad_in=R * u)]
    # Every block of the pass keeps and needs the same. A checkpoint call's generator snapshot lives in its frame,
    # which the graph holds until the region's backward: the chunks' calls are made in the block's forward, inside
    # a checkpointed block too (then its recompute makes a second set beside them); a recompute forks the
    # generator once more while it runs (torch.random.fork_rng).
    forks = rng if z.checkpointing or z.backend == "chunked" else 0
    if z.checkpointing:
        # Only the block's input survives the forward; its backward first recomputes the whole block.
        saved = {group: R * u + rng + chunk_rng}
        bwd = full - R * u + forks + max(blocks.forward_extra(blk), blocks.backward_extra(blk))
        fwd = full - R * u + blocks.forward_extra(blk)
    else:
        saved = {group: full - nn_saved}
        if nn_saved:
            saved[f"attention N×N: sensor encoder{tag}"] = nn_saved
        bwd = blocks.backward_extra(blk) + forks
        fwd = blocks.forward_extra(blk)
    bwd += (lp * per_block_params // F32 if n.autocast else 0) + again(per_block_params)
    for i in range(s.depth):
        out.append(Stage(f"encoder block {i}{tag}", saved=dict(saved), grads=grads(per_block_params),
                         fwd_extra=fwd, grad_in=R * u, units=(unit,), unit_grads=grads(per_block_params),
                         bwd_extra=bwd))
    copies = heads * lp * u if n.autocast else R * u  # the output as its heads keep it (fp32: one tensor)
    out.append(Stage(f"encoder norm{tag}", saved={group: R * u + 8 * z.B * P + copies},
                     grads=grads(z.grads("encoder norm")), fwd_extra=R * u,
                     bwd_extra=R * u + again(z.grads("encoder norm"))))
    return out


def pool_stage(z: StepSizes) -> Stage:
    """The contrastive pool over the encoder's tokens."""
    s, n, lp, u, B = z.s, z.n, z.lp, z.u, z.B
    small = 10 * R * B * max(s.D, s.E) + 4 * B * s.H
    # 0 < contrastive_encoder_grad < 1: grad_scale's x.detach() + α·(x − x.detach()) is a new fp32 tensor
    # the pool keeps (its kv Linear's input; under autocast the lp copy is already counted), two more
    # transiently, and in backward α·grad is one more encoder-output-sized tensor.
    scaled = 0.0 < s.pool_grad < 1.0
    pool_copy = R * u if scaled and not n.autocast else 0
    return Stage("pool", saved={"activations: pool": 2 * lp * u + small + pool_copy}, grads=z.grads("pool"),
                 fwd_extra=2 * lp * u + (2 * R * u if scaled else 0),
                 # SDPA backward: k and v grads beside the saved kv; then kv's input grad, its
                 # fp32 cast and the accumulate into the encoder-output gradient.
                 bwd_extra=max(2 * lp * u, lp * u + R * u + (R * u if n.autocast else 0))
                 + (R * u if scaled else 0) + z.cast_w("pool"),
                 grad_in=R * B * s.E)


def text_stages(z: StepSizes) -> list[Stage]:
    """The caption's text encoder, and the memory (the encoder's tokens projected for the decoder)."""
    s, n, lp, u, B, Dt = z.s, z.n, z.lp, z.u, z.B, z.s.Dt
    ut = B * s.L * Dt
    tblk = _block(s, n, B, s.L, Dt, s.Ft, s.Ht, "sdpa", z.chunk, masked=True)
    units = z.units
    # Blocks, then text_norm's input and stats, the masked mean's weights (B, L, 1) and divisor, and
    # text_proj's input (and its autocast copy). The embedding backward writes a dense (V, Dt) gradient
    # before adding it into the tied tok_embed's.
    text_saved = blocks.saved(tblk) * s.text_depth + R * ut + 8 * B * s.L + 4 * B * s.L + 4 * B \
        + (R + (lp if n.autocast else 0)) * B * Dt
    text = Stage("text encoder", saved={"activations: text encoder": text_saved}, grads=z.grads("text encoder"),
                 units=(units["text"],) * s.text_depth, unit_grads=F32 * units["text"] * s.text_depth,
                 fwd_extra=2 * R * ut + blocks.forward_extra(tblk),
                 bwd_extra=blocks.backward_extra(tblk) + F32 * s.V * Dt + z.cast_w("text encoder"),
                 grad_in=R * ut)
    memory = Stage("memory", saved={"activations: caption decoder cross-attention":
                                    lp * z.um + (lp * u if n.autocast else 0)},
                   grads=z.grads("memory"), fwd_extra=0,
                   bwd_extra=lp * u + R * u + z.cast_w("memory"))  # the encoder-output grad and its cast
    return [text, memory]


def decoder_stage(z: StepSizes) -> Stage:
    """The caption decoder's blocks (self-attention, cross-attention to the memory, MLP) and dec_norm."""
    s, n, lp, um, B, Dt = z.s, z.n, z.lp, z.um, z.B, z.s.Dt
    Lp = s.L - 1
    units = z.units
    # Decoder block (forward order): ln1 input, stats, ln1 output's copy, qkv (3), self-attention output,
    # logsumexp | x_mid1, stats, ln2 output's copy, q, cross-attention output, logsumexp, kv of the memory
    # (2·lp·um) | x_mid2, stats, ln3 output's copy, fc1 output, GELU output. Then dec_norm's input,
    # stats and output (what the tied LM head keeps).
    ud = B * Lp * Dt
    dblk = _block(s, n, B, Lp, Dt, s.Ft, s.Ht, "sdpa", z.chunk)
    self_part = (R + n.ln + 4 * lp) * ud + 8 * B * Lp + 4 * B * s.Ht * Lp
    cross_part = (R + n.ln + 2 * lp) * ud + 8 * B * Lp + 4 * B * s.Ht * Lp + 2 * lp * um
    mlp_part = (R + n.ln) * ud + 8 * B * Lp + 2 * lp * B * Lp * s.Ft + (3 * lp * ud if s.dropout else 0)  # 3 masks
    dec_head = R * ud + 8 * B * Lp + n.ln * ud
    # Cross-attention backward: k, v grads (2·lp·um) beside the saved kv, then their stack and the
    # reshape copy (2·lp·um each) with kv freed, then kv's grad into the memory and the accumulate.
    cross_bwd = 2 * lp * um + 2 * lp * um
    return Stage("decoder",
                 saved={"activations: caption decoder self-attention + MLP":
                        s.dec_depth * (self_part + mlp_part) + dec_head,
                        "activations: caption decoder cross-attention": s.dec_depth * cross_part},
                 grads=z.grads("decoder"), units=(units["decoder"],) * s.dec_depth,
                 unit_grads=F32 * units["decoder"] * s.dec_depth,
                 fwd_extra=2 * R * ud + max(blocks.forward_extra(dblk), 2 * lp * um),
                 bwd_extra=max(blocks.backward_extra(dblk), cross_bwd) + F32 * s.V * Dt + z.cast_w("decoder"),
                 grad_in=R * ud)


def loss_stage(z: StepSizes) -> Stage:
    """The caption cross-entropy, the reconstruction loss and the contrastive maps."""
    s, n, lp, btc, B = z.s, z.n, z.lp, z.btc, z.B
    Lp = s.L - 1
    ud = B * Lp * s.Dt
    blv = B * Lp * s.V
    contrastive = F32 * (8 * B * s.E + 6 * B * B + 4 * B)  # centred and normalised embeddings, B×B maps
    loss_saved = F32 * blv + 8 * B * Lp + 2 * F32 * btc + contrastive
    # At the squared error: logits (+ fp32 copy), recon (+ fp32 copy), patches, validity, square, product.
    loss_fwd = lp * blv + (F32 * blv if n.autocast else 0) + lp * btc + (F32 * btc if n.autocast else 0) \
        + F32 * btc + btc + 2 * F32 * btc + F32 * B * B
    # Backward: recon branch (grad of the square, pow's two temporaries) or the caption CE (nll and
    # log_softmax grads, the cast back to lp, the logits' input and weight grads and the weight's clone).
    loss_bwd = max(3 * F32 * btc, 2 * F32 * blv + (lp * blv if n.autocast else 0) + lp * ud + F32 * s.V * s.Dt)
    return Stage("loss", saved={"loss": loss_saved}, grads=z.grads("loss"), fwd_extra=loss_fwd,
                 bwd_extra=loss_bwd + z.cast_w("loss"))


def input_bytes(s: Shape, B: int) -> int:
    """x (float32) and valid (bool) as (B, T, C), patch_mask (bool) as (B, P), tokens (int64) as (B, L)."""
    return F32 * B * s.T * s.C + B * s.T * s.C + B * s.P + 8 * B * s.L


def encoder_backend(shape: Shape, backend: str, precision: str, target: Target) -> str:
    """The sensor encoder's attention as priced: ``sdpa`` is priced as ``math`` where torch would run SDPA's
    math path for its call on ``target`` (engine.tasks.attention_kernels: e.g. bf16 on a pre-Ampere GPU, or a
    head dim the fused kernels do not align), since that path keeps the N×N probabilities."""
    if backend != "sdpa":
        return backend
    call = Call(sdpa_dtype(precision), shape.H, shape.H, shape.D // shape.H, shape.P, shape.P)
    return "math" if choose(call, target).materialises else backend


def ledger(config, B: int, precision: str, device: str, target: Target | None = None) -> TaskLedger:
    """The task's analytic memory model (``SPEC.analytic_memory``): the step's ledger for micro-batch ``B``;
    ``target``: the device the sensor encoder's attention kernel is chosen for (default: ``device`` here)."""
    shape = Shape.of(config)
    m = config.task_config.model
    numerics = Numerics.of(precision, device)
    backend = encoder_backend(shape, m.attn_backend, precision, target or Target.local(device))
    st, pend = stages(shape, B, backend, m.attn_chunk, m.activation_checkpointing, numerics)
    return TaskLedger(stages=st, pending=pend,
                      param_tensors=[n for group in param_tensors(shape).values() for n in group],
                      input_bytes=input_bytes(shape, B),
                      cast_elements=cast_params(shape) if numerics.autocast else 0,
                      activation_tensors=40 * (shape.depth + shape.text_depth + shape.dec_depth) + 60,
                      unit_elements=_unit_elements(shape))


def _unit_elements(s: Shape) -> int:
    """Parameter elements inside FSDP units, each block once (the encoder's run in both passes)."""
    u = unit_sizes(s)
    return u["encoder"] * s.depth + u["text"] * s.text_depth + u["decoder"] * s.dec_depth
