"""Model: the three attention backends agree, chunking lowers the peak, settings switch live, memory docstring holds."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.tasks.sensorlm.model import Block, SensorLM, attention

torch.set_num_threads(1)


def _small(backend: str = "sdpa", **kw) -> SensorLM:
    torch.manual_seed(0)
    args = dict(minutes=120, channels=8, patch_time=10, patch_channels=2, dim=32, depth=2, heads=4, mlp_ratio=4.0,
                text_dim=32, text_depth=1, decoder_depth=1, text_heads=4, max_caption_tokens=12, vocab_size=50,
                embed_dim=16, attn_backend=backend, attn_chunk=7)
    args.update(kw)
    return SensorLM(**args)


def _inputs(batch: int = 3):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 120, 8, generator=g)
    mask = torch.rand(batch, 48, generator=g) < 0.5
    tokens = torch.randint(4, 50, (batch, 12), generator=g)
    tokens[:, 0] = 1
    tokens[:, 9] = 2
    tokens[:, 10:] = 0
    return x, mask, tokens


def _run(model: SensorLM):
    x, mask, tokens = _inputs()
    out = model(x, mask, tokens)
    loss = sum(v.float().pow(2).mean() for v in out.values())
    model.zero_grad()
    loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_backends_agree_on_outputs_and_gradients():
    ref_out, ref_grad = _run(_small("sdpa"))
    for backend in ("math", "chunked"):
        out, grad = _run(_small(backend))
        for k in ref_out:
            torch.testing.assert_close(out[k], ref_out[k], rtol=1e-4, atol=1e-5)
        assert grad.keys() == ref_grad.keys()
        for n in ref_grad:
            torch.testing.assert_close(grad[n], ref_grad[n], rtol=1e-3, atol=1e-5, msg=f"{backend}: {n}")


def test_activation_checkpointing_same_gradients():
    ref_out, ref_grad = _run(_small("math"))
    out, grad = _run(_small("math", activation_checkpointing=True))
    for n in ref_grad:
        torch.testing.assert_close(grad[n], ref_grad[n], rtol=1e-4, atol=1e-6)


def test_set_attention_switches_without_touching_weights():
    model = _small("sdpa")
    before = copy.deepcopy(model.state_dict())
    x, mask, tokens = _inputs()
    with torch.no_grad():
        ref = model(x, mask, tokens)["recon"]
        for backend, chunk in (("math", None), ("chunked", 5), ("chunked", 1000), ("sdpa", None)):
            model.set_attention(backend, chunk)
            assert model.attn_backend == backend
            torch.testing.assert_close(model(x, mask, tokens)["recon"], ref, rtol=1e-4, atol=1e-5)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    with pytest.raises(ValueError):
        model.set_attention("flash")


def test_set_attention_function_runs_in_every_encoder_block_only():
    model = _small("chunked")
    calls = []

    def counted(q, k, v, backend, chunk):
        calls.append((backend, chunk, q.shape[2]))
        return attention(q, k, v, backend, chunk)

    x, mask, tokens = _inputs()
    with torch.no_grad():
        ref = model(x, mask, tokens)["recon"]
        model.set_attention(function=counted)
        out = model(x, mask, tokens)["recon"]
    torch.testing.assert_close(out, ref)
    # two encoder passes (masked, clean) × depth 2; the text and decoder blocks keep SDPA with masks
    assert calls == [("chunked", 7, 48)] * 4
    assert model.attn_backend == "chunked"


def _peak_bytes(backend: str, n: int) -> int:
    """Peak tracked memory of forward+backward of bare attention at sequence length n (real-mode MemTracker)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, requires_grad=True) for _ in range(3))
    tracker = MemTracker()
    tracker.track_external(q, k, v)
    with tracker:
        out = attention(q, k, v, backend, 128)
        out.sum().backward()
    return max(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"], 1)


def test_chunked_attention_has_a_lower_peak_than_math():
    n = 2048  # math keeps a 2×2048×2048 fp32 softmax (32 MiB); chunked never holds more than 128 query rows
    math_peak = _peak_bytes("math", n)
    chunked_peak = _peak_bytes("chunked", n)
    assert math_peak > 2 * 2 * n * n * 4  # at least the kept softmax output
    assert chunked_peak < math_peak / 3, (chunked_peak, math_peak)


def _saved_elements(block: Block, x: torch.Tensor) -> int:
    """Elements autograd saves for backward in one block (storages counted once, parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen.setdefault(st.data_ptr(), st.nbytes() // t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    return sum(seen.values())


@pytest.mark.parametrize("backend", ["sdpa", "math", "chunked"])
def test_saved_tensors_match_the_docstring(backend):
    B, N, D, H, M = 2, 64, 32, 4, 4
    torch.manual_seed(0)
    block = Block(D, H, M, 0.0, backend, 16)
    x = torch.randn(B, N, D, requires_grad=True)
    extra = {"sdpa": B * H * N, "math": B * H * N * N, "chunked": 0}[backend]
    assert _saved_elements(block, x) == (8 + 2 * M) * B * N * D + 4 * B * N + extra


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_contrastive_encoder_grad_scales_what_reaches_the_encoder(alpha):
    model = _small("sdpa", contrastive_encoder_grad=alpha)
    x, mask, tokens = _inputs()
    model(x, mask, tokens)["sensor_emb"].pow(2).sum().backward()
    grad = model.encoder.patch_embed.weight.grad
    assert model.pool.query.grad is not None and model.pool.query.grad.abs().sum() > 0
    if alpha == 0.0:
        assert grad is None
    else:
        ref = _small("sdpa", contrastive_encoder_grad=1.0)
        ref(x, mask, tokens)["sensor_emb"].pow(2).sum().backward()
        torch.testing.assert_close(grad, alpha * ref.encoder.patch_embed.weight.grad, rtol=1e-4, atol=1e-7)


def test_centred_contrastive_loss_is_shift_invariant():
    from engine.tasks.sensorlm.losses import contrastive_loss

    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    scale, bias = torch.tensor(2.0), torch.tensor(0.0)
    a, _ = contrastive_loss(s, t, scale, bias)
    b, _ = contrastive_loss(s + 5.0, t - 3.0, scale, bias)  # a shared direction changes nothing
    torch.testing.assert_close(a, b)
    matched, _ = contrastive_loss(s, s, scale, bias)
    assert matched < a


@pytest.mark.parametrize("view", ["clean", "masked"])
def test_text_view_decides_whether_the_text_heads_see_the_mask(view: str) -> None:
    model = _small(text_view=view).eval()
    x, mask, tokens = _inputs()
    with torch.no_grad():
        a = model(x, mask, tokens)
        b = model(x, ~mask, tokens)  # a different mask, same signals
    assert not torch.allclose(a["recon"], b["recon"])  # reconstruction always reads the masked pass
    same = torch.allclose(a["sensor_emb"], b["sensor_emb"]) and torch.allclose(a["logits"], b["logits"])
    assert same == (view == "clean")


def test_clean_view_trains_the_encoder_from_both_passes() -> None:
    model = _small(text_view="clean")
    x, mask, tokens = _inputs()
    out = model(x, mask, tokens)
    out["recon"].pow(2).mean().backward()
    from_recon = model.encoder.patch_embed.weight.grad.clone()
    model.zero_grad()
    out = model(x, mask, tokens)
    (out["recon"].pow(2).mean() + out["sensor_emb"].pow(2).mean()).backward()
    assert model.encoder.patch_embed.weight.grad is not None
    assert not torch.allclose(model.encoder.patch_embed.weight.grad, from_recon)  # the clean pass added to it


def test_unknown_text_view_is_refused() -> None:
    with pytest.raises(ValueError, match="text_view"):
        _small(text_view="both")
