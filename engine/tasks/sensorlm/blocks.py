"""Closed forms for one pre-LN transformer block: what it saves for backward, and its transients.

Torch-free arithmetic, in bytes. The block is engine.tasks.sensorlm.model.Block
(``x + attn(ln1(x))``, then ``+ mlp(ln2(x))``, GELU MLP, bias everywhere);
the derivations follow the tensors autograd keeps, read from the model's code
and checked op by op against FakeTensorMode + MemTracker timelines.

Units: ``u = B·N·d`` and ``uf = B·N·f`` elements (f the MLP width), element
sizes ``r`` = 4 (the residual stream is always fp32: a bf16 branch added to
an fp32 stream promotes), ``lp`` = bytes of a matmul output (2 under
autocast, else 4), ``ln`` = bytes of a LayerNorm output as the next Linear
keeps it (its autocast copy, ``lp``, or the fp32 output itself).

Saved per block (derivation, forward order)::

    ln1:   input x (r·u), mean and rstd (2 · 4·B·N)
    qkv:   its input, ln1's output (ln·u)
    attn   sdpa:    q, k, v as views of the qkv output (3·lp·u); the output, which is also
                    proj's input (lp·u, same storage); logsumexp (4·B·H·N)
           math:    bmm copies of q, kᵀ, v (3·lp·u); softmax output (P·B·H·N², P = lp, or
                    4 + 2 on CUDA autocast where softmax runs in fp32 and @v keeps a bf16 copy);
                    proj's input, a merged-heads copy (lp·u)
           chunked: contiguous q, k, v (3·lp·u); proj's input (lp·u); nothing N×N
    ln2:   input (r·u), mean and rstd (2 · 4·B·N)
    fc1:   ln2's output (ln·u)
    GELU:  its input, fc1's output (lp·uf);   fc2: GELU's output (lp·uf)
    dropout (model.dropout > 0 only): per residual branch the mask the multiply keeps — on CPU
           the scaled noise in the branch's dtype (lp·u), on CUDA a bool mask (u): 2·lp·u bounds both

    fp32 sdpa: 32·u + 8·uf + 16·B·N + 4·B·H·N bytes = (8 + 2M)·B·N·d elements + …,
    the closed form in research/memory.md.

A masked SDPA call (the text encoder) also keeps its mask as an additive
float (4·B·N per call on CPU; bounded by the math case on CUDA where the
memory-efficient kernel pads and expands it).

Backward, in the order autograd runs it, with the incoming residual gradient
``g`` (r·u) alive throughout; the peak beyond the block's own saved bytes is
the largest of (derivation in ``backward_extra``):

- fc2 / GELU backward: g + grad of GELU's output + grad of fc1's output,
  with GELU's output already freed: ``r·u + lp·uf`` (plus the autocast cast of
  g to the branch's dtype, ``lp·u``);
- attention backward: sdpa: grad of q, k, v (3·lp·u), then their ``stack``
  (3·lp·u) and the reshape copy back to (B, N, 3d) (3·lp·u), two of the three
  alive at once, the saved q, k, v freed by then; math: the gradient of the
  softmax output, the softmax backward output and the scaled-scores gradient
  (two N×N alive beside the saved probabilities); chunked: per chunk the
  recomputed probabilities and two N×N-chunk gradients (3·P·B·H·c·N) plus
  full-size k and v gradient accumulators (4·lp·u).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockShape:
    """One block's shape and numerics; sizes in elements, bytes per element as in the module docstring."""

    B: int
    N: int
    d: int
    f: int
    heads: int
    backend: str = "sdpa"
    chunk: int = 256
    masked: bool = False
    lp: int = 4
    ln: int = 4
    softmax_bytes: int = 4
    cuda: bool = False
    dropout: bool = False

    @property
    def u(self) -> int:
        return self.B * self.N * self.d

    @property
    def uf(self) -> int:
        return self.B * self.N * self.f

    @property
    def nn(self) -> int:
        """Elements of one N×N attention map over the batch and heads."""
        return self.B * self.heads * self.N * self.N


R = 4  # residual stream and LayerNorm statistics: fp32


def params(d: int, f: int) -> list[int]:
    """Element counts of a block's parameter tensors (ln1, qkv, proj, ln2, fc1, fc2; weights and biases)."""
    return [d, d, 3 * d * d, 3 * d, d * d, d, d, d, f * d, f, d * f, d]


def attention_saved(s: BlockShape) -> int:
    """Bytes the self-attention keeps for backward beyond the block's ln1 output (see module docstring)."""
    base = 3 * s.lp * s.u + s.lp * s.u  # q, k, v (views or copies) and proj's input
    if s.backend == "sdpa" or s.masked:
        # logsumexp, fp32; CUDA's memory-efficient kernel pads its rows to a multiple of 32
        extra = 4 * s.B * s.heads * (-(-s.N // 32) * 32 if s.cuda else s.N)
        if s.masked:
            extra += _mask_bytes(s)
        return base + extra
    if s.backend == "math":
        return base + s.softmax_bytes * s.nn
    return base  # chunked: nothing N×N survives the forward


def _mask_bytes(s: BlockShape) -> int:
    """The additive float mask a masked SDPA call keeps: (B,1,1,N) on CPU; on CUDA bounded by (B,H,N,N+pad)."""
    if s.cuda:
        return 4 * s.B * s.heads * s.N * (-(-s.N // 16) * 16)
    return 4 * s.B * s.N


def saved(s: BlockShape) -> int:
    """Bytes one block keeps for backward (module docstring)."""
    stats = 2 * 2 * 4 * s.B * s.N  # two LayerNorms × (mean, rstd)
    drop = 2 * s.lp * s.u if s.dropout else 0  # two dropout masks (CPU: scaled noise in the input dtype)
    return R * s.u + s.ln * s.u + attention_saved(s) + R * s.u + s.ln * s.u + 2 * s.lp * s.uf + stats + drop


def backward_extra(s: BlockShape) -> int:
    """Peak bytes beyond the block's saved tensors and its incoming gradient while its backward runs.

    Each term is the live set at one point of the backward (module docstring)
    minus what the block has freed by then. MLP half: fc2's input grad
    (lp·uf) is alive when GELU's backward writes fc1's (lp·uf) and GELU's
    output is already freed, so +lp·uf. Attention half, after the MLP half
    freed x_mid, ln2's output and both MLP activations (``freed``).
    """
    cast = s.lp * s.u if s.lp != R else 0  # the fp32 residual grad cast to the branch's dtype (autocast)
    mlp = s.lp * s.uf + cast
    freed = 2 * s.lp * s.uf + s.ln * s.u + R * s.u + 8 * s.B * s.N
    if s.backend == "sdpa" or s.masked:
        # grad of proj's input + grads of q, k, v while q, k, v, o are still saved.
        attn = cast + s.lp * s.u + 3 * s.lp * s.u
    elif s.backend == "math":
        # grad of proj's input and its bmm copy, grad of v, then the probabilities' grad and the
        # softmax backward output (2 N×N; under CUDA autocast a bf16 grad cast to fp32 as well).
        nn_grad = 2 * max(s.softmax_bytes, s.lp) * s.nn + (s.lp * s.nn if s.softmax_bytes > s.lp else 0)
        attn = cast + 3 * s.lp * s.u + nn_grad
    else:
        c = min(s.chunk, s.N)
        chunk_nn = s.B * s.heads * c * s.N
        # One chunk: its recomputed probabilities and two chunk-map grads; the proj-input grad; the
        # full-size q grad slice_backward writes, k and v grads and their accumulators.
        attn = cast + s.lp * s.u + 3 * max(s.softmax_bytes, s.lp) * chunk_nn + 5 * s.lp * s.u
    # q/k/v grads stacked, then reshaped (a copy) back to (B, N, 3d): two 3·lp·u alive, q/k/v/o freed.
    stack = 6 * s.lp * s.u - 4 * s.lp * s.u
    return max(mlp, max(attn, stack) - freed)


def forward_extra(s: BlockShape) -> int:
    """Peak bytes beyond the block's saved tensors (all of them) while its forward runs.

    math: the scaled scores beside the softmax output (one N×N; the raw scores
    die after the multiply), with the qkv output still alive (3·lp·u); under
    CUDA autocast also softmax's fp32 copy of its input (4·N×N). chunked: two
    of one chunk's scores / scaled scores / probabilities at once, and the
    chunk outputs and their ``cat`` before the merged-heads copy (2·lp·u). Otherwise the
    MLP's GELU output before fc2 reads it is already saved: no extra.
    """
    if s.masked or s.backend == "sdpa":
        return 0
    if s.backend == "math":
        cuda_cast = 4 * s.nn if s.softmax_bytes > s.lp else 0
        return s.lp * s.nn + cuda_cast + 3 * s.lp * s.u
    c = min(s.chunk, s.N)
    per = 4 if s.softmax_bytes > s.lp else s.lp  # CUDA autocast: the fp32 softmax input and output
    return 2 * per * s.B * s.heads * c * s.N + 2 * s.lp * s.u
