"""SensorLM model: a ViT sensor encoder plus a CoCa-style text side, with a masked-patch reconstruction head.

Shapes (B batch, T minutes, C channels, pt × pc patches, D = model.dim, Dt = model.text_dim,
L = model.max_caption_tokens, V = model.vocab_size, E = model.embed_dim, H heads, hd = D / H)::

    x (B, T, C) ──patchify──► (B, P, pt·pc), P = (T/pt)·(C/pc), time-major order (t, c)
      patch_embed Linear(pt·pc → D); masked patches replaced by the learned mask_token (D)
      + pos_time[t] + pos_chan[c]           (factorised 2-D learned positions: (T/pt + C/pc)·D params)
      depth × Block (pre-LN): x += attn(ln1(x)); x += mlp(ln2(x))      ← attention backend switchable
      norm LayerNorm ──► tokens (B, P, D)
        ├─ recon_head Linear(D → pt·pc)                            masked-patch reconstruction
        ├─ grad_scale → pool (1 learned query, cross-attention) → sensor_proj Linear(D → E)  contrastive
        └─ memory Linear(D → Dt) → (B, P, Dt)                       keys/values for the caption decoder
      (text_view="clean": pool and memory read a second encoder pass of the unmasked x instead)
    tokens (B, L) ─ tok_embed (V·Dt, shared with the decoder, tied to the LM head) + text_pos
        ├─ text_depth × Block, bidirectional with a key-padding mask; mean over real tokens;
        │  text_norm → text_proj Linear(Dt → E)                                              contrastive
        └─ decoder on tokens[:, :-1]: decoder_depth × DecoderBlock
              (causal self-attention, cross-attention into memory, MLP; all pre-LN, SDPA)
           dec_norm → logits = h @ tok_embed.weightᵀ  (B, L-1, V)                            captioning

Design choices and what they cost:

* Masking uses a mask token (SimMIM-style), not dropping (MAE-style): every encoder block sees all
  P tokens whatever ``mask_ratio`` is, so activation memory is a function of P alone. Dropping
  would save (mask_ratio)·P tokens of compute but make the budget depend on the ratio.
* ``text_view="clean"`` (default) runs the encoder twice per step: masked for reconstruction, unmasked
  for the pooler and the decoder's memory (as SLIP gives its two objectives separate views). It
  costs one more encoder forward and backward and a second set of encoder activations (the budget
  counts both). ``"masked"`` shares the reconstruction pass: the text objectives then see half the
  day blanked, and on ``demo`` retrieval stopped learning (below).
* The text encoder is bidirectional (captions are whole sentences known in advance; the
  contrastive embedding gets context from both sides); the decoder is causal.
* Only the sensor encoder's self-attention follows ``attn_backend``/``attn_chunk``: it is the
  N = P sequence that dominates memory (P = 2448 for ``base``). Text self-attention (L ≤ 1024),
  the 1-query pooler and the decoder's cross-attention (L × P scores) always use SDPA.
* Dropout (``model.dropout``) sits on the residual branches only, so the backends agree exactly.
* The contrastive gradient reaches the sensor encoder scaled by ``model.contrastive_encoder_grad``
  (default 1, end-to-end as CoCa; 0 locks the encoder for it, as LiT, and only the pooler and the
  projections learn from it).

What made ``demo`` learn retrieval within 300 steps (Trainer, batch 16, cosine lr, train.seed 0, 64
validation windows in batches of 16, chance 0.0625; ``python -m bench --only demo_learning`` re-runs
the chosen preset). With the earlier preset — 60×4 patches (192 tokens), lr 2e-3, masked text view,
contrastive_encoder_grad 0 — retrieval stayed at chance for ten variants (top-1 0.03-0.125; PSNR
15.4-17.1 dB; token accuracy 0.62, the captions' language prior: decoder-likelihood retrieval was at
chance too). Isolating the towers with a hand loop, contrastive loss only, 300 steps:

    hourly channel means + MLP  ↔ bag-of-words MLP          0.45   (the data is learnable)
    ViT, 60×4 patches            ↔ bag-of-words MLP          0.09   shared patch projection across
    ViT, 60×4 patches, per-group patch projection ↔ BoW      0.22   channel groups hides which channel
    ViT, 60×32 patches (24 tokens), unmasked ↔ BoW           0.34   a reading came from
    ViT, 60×32, unmasked ↔ text encoder, lr 2e-3 / 1e-3 / 5e-4   0.05 / 0.23 / 0.41   both towers
                                                              random: lr 2e-3 never gets started
    ViT, 60×32, masked (ratio 0.5 / 0.25) ↔ BoW               0.13 / 0.14

and the whole model (three losses, lr 5e-4, 60×32 patches): masked view 0.17, clean view 0.45 (token
accuracy 0.33; lr 1e-3 gave 0.16 and 0.52). So ``demo`` uses hour-long patches over all channels and
lr 5e-4, with the clean view; the larger presets keep small 2-D patches (they train for thousands of
steps, where a per-patch projection has time to learn channel identity from ``pos_chan``).

Tensors saved for backward per sensor-encoder Block (fp32 → 4 bytes per element; M = mlp_ratio;
measured with ``torch.autograd.graph.saved_tensors_hooks`` on torch 2.13 CPU, each storage counted
once, parameters excluded; ``tests/engine/sensorlm/test_sensorlm_model.py`` re-checks these totals)::

    ln1        its input x (B,N,D); mean and rstd (B,N,1) each
    qkv        ln1 output (B,N,D)
    attention  sdpa:    q, k, v as views of the qkv output (3·B·N·D); the output (B,N,D), which is
                        also proj's input (same storage: CPU SDPA returns a (B,N,H,hd) layout);
                        logsumexp (B,H,N)
               math:    bmm copies of q, kᵀ, v (3·B·N·D); the softmax output (B,H,N,N); proj's
                        input, a merged-heads copy (B,N,D)
               chunked: contiguous q, k, v (3·B·N·D); proj's input (B,N,D). No N×N tensor is kept:
                        each chunk's scores and softmax are recomputed in backward, so the transient
                        peak is one chunk's (B,H,attn_chunk,N) scores/probabilities/gradients
    ln2        its input (B,N,D); mean and rstd (B,N,1) each
    fc1        ln2 output (B,N,D)
    GELU       its input, fc1's output (B,N,M·D)
    fc2        GELU output (B,N,M·D)
    dropout    only when model.dropout > 0: two masks (B,N,D)

    elements = (8 + 2M)·B·N·D + 4·B·N + { sdpa: B·H·N,  math: B·H·N²,  chunked: 0 }
    (M = 4: 16·B·N·D, the closed form of research/memory.md.)
    With model.activation_checkpointing each block keeps only its input (B,N,D); its activations are
    recomputed in backward, one block at a time.

The text encoder blocks are the same Block (L tokens, Dt wide, always SDPA with a mask); a
DecoderBlock adds a third LayerNorm and a cross-attention whose (B,H,L-1,P) scores SDPA does not keep.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

#: Attention backends of the sensor encoder.
BACKENDS = ("sdpa", "math", "chunked")
#: What the contrastive and caption heads read (model.text_view).
TEXT_VIEWS = ("clean", "masked")


def _math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q·kᵀ/√hd)·v spelt out: autograd keeps the (…, Nq, Nk) softmax output for backward."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1) @ v


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str, chunk: int) -> torch.Tensor:
    """Unmasked multi-head attention of (B, H, N, hd) tensors with one of BACKENDS.

    The first non-reentrant checkpoint of a process imports ``torch._dynamo`` (measured 2-18 s on a
    loaded 2-core box), so the first step after choosing ``chunked`` (or activation checkpointing)
    is that much slower; later steps are not.
    """
    if backend == "sdpa":
        return F.scaled_dot_product_attention(q, k, v)
    if backend == "math":
        return _math_attention(q, k, v)
    if backend == "chunked":
        # Contiguous once, so the chunks share storage instead of each copying K/V; q too, so the saved
        # tensors are exactly q, k, v (the qkv projection output can then be freed).
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        n = q.shape[2]
        if n <= chunk:
            pieces = [(0, n)]
        else:
            pieces = [(s, min(s + chunk, n)) for s in range(0, n, chunk)]
        if not torch.is_grad_enabled():
            return torch.cat([_math_attention(q[:, :, a:b], k, v) for a, b in pieces], dim=2)
        # One checkpoint per chunk: backward recomputes that chunk's scores, so only one chunk's
        # (B, H, chunk, N) probabilities are ever alive; without the checkpoint the chunks' saved
        # softmax outputs add up to the full N×N and chunking would not lower the peak at all.
        return torch.cat([checkpoint(_math_attention, q[:, :, a:b], k, v, use_reentrant=False)
                          for a, b in pieces], dim=2)
    raise ValueError(f"attn_backend={backend!r}: allowed {', '.join(BACKENDS)}")


def grad_scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """``x`` in the forward pass; its gradient multiplied by ``alpha`` in backward (0: a detach, no copy)."""
    if alpha >= 1.0:
        return x
    if alpha <= 0.0:
        return x.detach()
    return x.detach() + alpha * (x - x.detach())  # one extra (B, P, D) transient, nothing saved


class SelfAttention(nn.Module):
    """Multi-head self-attention; the sensor encoder's follows ``backend``, text ones pass masks to SDPA."""

    def __init__(self, dim: int, heads: int, backend: str = "sdpa", chunk: int = 256) -> None:
        super().__init__()
        self.heads = heads
        self.backend = backend
        self.chunk = chunk
        #: The unmasked attention function, ``f(q, k, v, backend, chunk)`` (SensorLM.set_attention may swap it).
        self.attend = attention
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if mask is not None or causal:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        else:
            o = self.attend(q, k, v, self.backend, self.chunk)
        return self.proj(o.transpose(1, 2).reshape(B, N, D))


class CrossAttention(nn.Module):
    """Multi-head attention of queries (B, Nq, D) into a memory (B, Nk, D), always SDPA."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        B, Nq, D = x.shape
        hd = D // self.heads
        q = self.q(x).view(B, Nq, self.heads, hd).transpose(1, 2)
        k, v = self.kv(memory).view(B, memory.shape[1], 2, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(B, Nq, D))


class MLP(nn.Module):
    """fc1 → GELU → fc2."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(x)); see the module docstring for its memory."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float, backend: str = "sdpa",
                 chunk: int = 256) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, backend, chunk)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, int(dim * mlp_ratio))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), mask))
        return x + self.drop(self.mlp(self.ln2(x)))


class DecoderBlock(nn.Module):
    """Pre-LN caption-decoder block: causal self-attention, cross-attention into sensor memory, MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, heads)
        self.ln3 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, int(dim * mlp_ratio))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.self_attn(self.ln1(x), causal=True))
        x = x + self.drop(self.cross_attn(self.ln2(x), memory))
        return x + self.drop(self.mlp(self.ln3(x)))


class SensorEncoder(nn.Module):
    """ViT over (time × channel) patches with a learned mask token and factorised 2-D positions."""

    def __init__(self, minutes: int, channels: int, patch_time: int, patch_channels: int, dim: int, depth: int,
                 heads: int, mlp_ratio: float, dropout: float, backend: str, chunk: int,
                 activation_checkpointing: bool) -> None:
        super().__init__()
        if minutes % patch_time or channels % patch_channels:
            raise ValueError(f"patches {patch_time}×{patch_channels} must tile the {minutes}×{channels} input")
        self.pt, self.pc = patch_time, patch_channels
        self.nt, self.nc = minutes // patch_time, channels // patch_channels
        self.patch_embed = nn.Linear(patch_time * patch_channels, dim)
        self.mask_token = nn.Parameter(torch.zeros(dim))
        self.pos_time = nn.Parameter(torch.zeros(self.nt, dim))
        self.pos_chan = nn.Parameter(torch.zeros(self.nc, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, dropout, backend, chunk) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.activation_checkpointing = activation_checkpointing

    @property
    def num_patches(self) -> int:
        return self.nt * self.nc

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) → (B, P, pt·pc), patches in time-major order."""
        B = x.shape[0]
        x = x.reshape(B, self.nt, self.pt, self.nc, self.pc).permute(0, 1, 3, 2, 4)
        return x.reshape(B, self.nt * self.nc, self.pt * self.pc)

    def forward(self, x: torch.Tensor, patch_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.patch_embed(self.patchify(x))
        if patch_mask is not None:
            h = torch.where(patch_mask[..., None], self.mask_token.to(h.dtype), h)
        pos = (self.pos_time[:, None, :] + self.pos_chan[None, :, :]).reshape(self.nt * self.nc, -1)
        h = h + pos
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                h = checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return self.norm(h)


class AttentionPool(nn.Module):
    """One learned query attending over the tokens (CoCa's attentional pooler with n_query = 1)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.zeros(1, 1, dim))
        self.attn = CrossAttention(dim, heads)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        q = self.query.expand(tokens.shape[0], -1, -1).to(tokens.dtype)
        return self.norm(self.attn(q, tokens)[:, 0])


class SensorLM(nn.Module):
    """The whole model; ``forward`` returns every head's output for ``losses.py`` to score."""

    def __init__(self, *, minutes: int, channels: int, patch_time: int, patch_channels: int, dim: int, depth: int,
                 heads: int, mlp_ratio: float, text_dim: int, text_depth: int, decoder_depth: int, text_heads: int,
                 max_caption_tokens: int, vocab_size: int, embed_dim: int, dropout: float = 0.0,
                 attn_backend: str = "sdpa", attn_chunk: int = 256, activation_checkpointing: bool = False,
                 contrastive: str = "infonce", contrastive_encoder_grad: float = 1.0,
                 text_view: str = "clean") -> None:
        super().__init__()
        if attn_backend not in BACKENDS:
            raise ValueError(f"attn_backend={attn_backend!r}: allowed {', '.join(BACKENDS)}")
        self.encoder = SensorEncoder(minutes, channels, patch_time, patch_channels, dim, depth, heads, mlp_ratio,
                                     dropout, attn_backend, attn_chunk, activation_checkpointing)
        self.recon_head = nn.Linear(dim, patch_time * patch_channels)
        self.pool = AttentionPool(dim, heads)
        self.sensor_proj = nn.Linear(dim, embed_dim, bias=False)
        self.memory = nn.Linear(dim, text_dim)
        self.tok_embed = nn.Embedding(vocab_size, text_dim)
        self.text_pos = nn.Parameter(torch.zeros(max_caption_tokens, text_dim))
        self.text_blocks = nn.ModuleList(Block(text_dim, text_heads, mlp_ratio, dropout) for _ in range(text_depth))
        self.text_norm = nn.LayerNorm(text_dim)
        self.text_proj = nn.Linear(text_dim, embed_dim, bias=False)
        self.dec_blocks = nn.ModuleList(DecoderBlock(text_dim, text_heads, mlp_ratio, dropout)
                                        for _ in range(decoder_depth))
        self.dec_norm = nn.LayerNorm(text_dim)
        # Contrastive temperature (and SigLIP's bias); both exist for either loss so checkpoints keep one shape.
        self.contrastive_encoder_grad = float(contrastive_encoder_grad)
        if text_view not in TEXT_VIEWS:
            raise ValueError(f"text_view={text_view!r}: allowed {', '.join(TEXT_VIEWS)}")
        self.text_view = text_view
        siglip = contrastive == "siglip"
        # Shape (1,), not a 0-dim scalar: FSDP2 shards every parameter on dim 0 and refuses 0-dim ones.
        self.logit_scale = nn.Parameter(torch.tensor([math.log(10.0) if siglip else math.log(1 / 0.07)]))
        self.logit_bias = nn.Parameter(torch.tensor([-10.0 if siglip else 0.0]))
        self.apply(self._init)
        for p in (self.encoder.mask_token, self.encoder.pos_time, self.encoder.pos_chan, self.pool.query,
                  self.text_pos):
            nn.init.normal_(p, std=0.02)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: D401 - torch's hook
        # Checkpoints written before the logit scale and bias became (1,) hold them as 0-dim tensors.
        for name in ("logit_scale", "logit_bias"):
            value = state_dict.get(prefix + name)
            if value is not None and value.dim() == 0:
                state_dict[prefix + name] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    # -- live settings -----------------------------------------------------------------
    def set_attention(self, backend: str | None = None, chunk: int | None = None,
                      function: Callable | None = None) -> None:
        """Switch the sensor encoder's attention backend and/or chunk size in place (weights untouched).

        ``function`` replaces the attention function itself (``attention``'s signature): a benchmark
        compares another implementation of a backend inside the same model this way.
        """
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"attn_backend={backend!r}: allowed {', '.join(BACKENDS)}")
        if chunk is not None and chunk < 1:
            raise ValueError(f"attn_chunk={chunk}: must be ≥ 1")
        for block in self.encoder.blocks:
            if backend is not None:
                block.attn.backend = backend
            if chunk is not None:
                block.attn.chunk = chunk
            if function is not None:
                block.attn.attend = function

    @property
    def attn_backend(self) -> str:
        """The sensor encoder's current attention backend."""
        return self.encoder.blocks[0].attn.backend

    # -- forward -------------------------------------------------------------------------
    def encode_text(self, tokens: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
        """(B, L) token ids → (B, E) unnormalised text embedding (bidirectional encoder, mean over real tokens)."""
        real = tokens != pad_id
        h = self.tok_embed(tokens) + self.text_pos[: tokens.shape[1]]
        mask = real[:, None, None, :]  # (B, 1, 1, L): every query may look at every real token
        for block in self.text_blocks:
            h = block(h, mask)
        h = self.text_norm(h)
        w = real.to(h.dtype)[..., None]
        return self.text_proj((h * w).sum(1) / w.sum(1).clamp_min(1.0))

    def decode(self, tokens_in: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Teacher-forced caption logits (B, L', V) for input ids (B, L') given sensor memory (B, P, Dt)."""
        h = self.tok_embed(tokens_in) + self.text_pos[: tokens_in.shape[1]]
        for block in self.dec_blocks:
            h = block(h, memory)
        return F.linear(self.dec_norm(h), self.tok_embed.weight)

    def forward(self, x: torch.Tensor, patch_mask: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every head: recon (B,P,pt·pc), sensor_emb and text_emb (B,E), logits (B,L-1,V).

        ``text_view="clean"`` encodes ``x`` twice: masked for the reconstruction head, unmasked for the
        pooler and the caption decoder's memory (the weights are shared; their gradients add up).
        """
        masked = self.encoder(x, patch_mask)
        recon = self.recon_head(masked)
        seen = self.encoder(x, None) if self.text_view == "clean" else masked
        return {
            "recon": recon,
            "sensor_emb": self.sensor_proj(self.pool(grad_scale(seen, self.contrastive_encoder_grad))),
            "text_emb": self.encode_text(tokens),
            "logits": self.decode(tokens[:, :-1], self.memory(seen)),
        }


def build(m, channels: int, minutes: int) -> SensorLM:
    """A SensorLM from the ``[sensorlm.model]`` section ``m`` (``channels``/``minutes`` come from the data)."""
    return SensorLM(minutes=minutes, channels=channels, patch_time=m.patch_time, patch_channels=m.patch_channels,
                    dim=m.dim, depth=m.depth, heads=m.heads, mlp_ratio=m.mlp_ratio, text_dim=m.text_dim,
                    text_depth=m.text_depth, decoder_depth=m.decoder_depth, text_heads=m.text_heads,
                    max_caption_tokens=m.max_caption_tokens, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
                    dropout=m.dropout, attn_backend=m.attn_backend, attn_chunk=m.attn_chunk,
                    activation_checkpointing=m.activation_checkpointing,
                    contrastive=m.contrastive, contrastive_encoder_grad=m.contrastive_encoder_grad,
                    text_view=m.text_view)
