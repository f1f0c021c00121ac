"""A nanoGPT-shaped model and loop (karpathy/nanoGPT's model.py and train.py, cut to what moves memory).

Token and position embeddings, pre-LN causal self-attention blocks (SDPA, is_causal) with a GELU MLP, a final
LayerNorm and a head tied to the token embedding; AdamW over decay / no-decay groups. The loop keeps what
train.py keeps: ``logits, loss = model(X, Y)`` (the logits alive until the next forward returns), the next batch
loaded between the forward and the backward, a clipped gradient, ``zero_grad(set_to_none=True)`` after the step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, n: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2, self.heads = nn.LayerNorm(n), nn.LayerNorm(n), heads
        self.c_attn, self.c_proj = nn.Linear(n, 3 * n), nn.Linear(n, n)
        self.c_fc, self.mlp_proj = nn.Linear(n, 4 * n), nn.Linear(4 * n, n)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, n: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n), nn.Embedding(block, n)
        self.h = nn.ModuleList(Block(n, heads) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(n), nn.Linear(n, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def optimizer(self) -> torch.optim.Optimizer:
        params = list(self.parameters())
        return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                 lr=1e-3, betas=(0.9, 0.95))


def batches(vocab: int, block: int, batch: int, seed: int = 0):
    """train.py's get_batch over a random token stream: (X, Y) of int64, Y shifted by one."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, vocab, size=50_000).astype(np.uint16)

    def get_batch():
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
        return x, y

    return get_batch
