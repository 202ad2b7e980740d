"""The Llama-3 specs (``specs/llama3_{first,layer,last}.yaml`` and the ``_recompute`` variants of
the last two) as torch ops on the CPU.

A build is the CPU tests' fake one (``tests.test_runtime_cpu.make_build``) at a tiny GQA shape
(``test_runtime_cpu.LLAMA3``: D 256, F 512, 4 query and 2 KV heads of 64, V 1024); the op's CPU
kernels are the reference interpreter, in fp64 when every floating input is fp64.

* gradcheck of each chain's op in fp64 (M = 8): its backward section is the derivative of its
  forward, through ``coda_spec.op``'s autograd;
* the three chains composed as a two-layer model (first -> layer -> last, with a stand-in for
  attention; with the saved z1 and with the recompute chains) give the loss, the embedding
  gradient and every weight gradient of a plain-torch fp64 Llama written from the same math
  (Meta's interleaved RoPE, SwiGLU on interleaved gate/up rows, mean cross-entropy over the valid
  tokens).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import coda_spec
from coda_spec import ops
from tests import test_runtime_cpu as rt
from tests.test_ops import _trainable

EPS = 1e-5
M = 8
DIFFERENTIABLE = {  # spec -> the outputs a loss reads (the others are statistics)
    "llama3_first": ("qkv",),
    "llama3_layer": ("x2", "qkv"),
    "llama3_last": ("lse", "target_logit"),
    "llama3_layer_recompute": ("x2", "qkv"),
    "llama3_last_recompute": ("lse", "target_logit"),
    "llama3_last_mlp": ("x2",),
    "llama3_last_mlp_recompute": ("x2",),
}


@pytest.fixture
def build(tmp_path, monkeypatch):
    """``build(name)``: (ChainOp, checked spec) of a fresh fake build at the tiny shape."""
    monkeypatch.setattr(ops, "_OPS", {})

    def make(name: str):
        d, checked = rt.make_build(tmp_path, name)
        return coda_spec.op(d, tuned=False), checked

    return make


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradcheck_in_fp64(build, name):
    op, checked = build(name)
    _, low = rt._inputs(checked, M)
    x = _trainable(op, low, torch.float64)
    wrt = [of for _, of in op.grad_outputs]

    def f(*leaves):
        out = op(**{**x, **dict(zip(wrt, leaves, strict=True))})
        return tuple(out[n] for n in DIFFERENTIABLE[name])

    assert torch.autograd.gradcheck(f, tuple(x[n] for n in wrt), fast_mode=True)


# -- the three chains composed: a two-layer Llama ------------------------------------------------


def _weights(dims: dict, gen) -> dict:
    """fp64 weights of a two-layer model (layer 1's input norm and QKV live in llama3_layer)."""
    d, f, hd, v = dims["D"], dims["F"], dims["HD"], dims["V"]
    q, qkv = dims["NH"] * hd, (dims["NH"] + 2 * dims["NKV"]) * hd

    def w(rows, cols):
        return torch.randn(rows, cols, generator=gen, dtype=torch.float64) / math.sqrt(cols)

    def g():
        return 1 + 0.1 * torch.randn(d, generator=gen, dtype=torch.float64)

    out = {"emb": torch.randn(M, d, generator=gen, dtype=torch.float64), "w_lm": w(v, d)}
    for i in (0, 1):
        out |= {f"g_in{i}": g(), f"w_qkv{i}": w(qkv, d), f"w_o{i}": w(d, q)}
        out |= {f"g_post{i}": g(), f"w_gu{i}": w(2 * f, d), f"w_down{i}": w(d, f)}
    return out | {"g_f": g()}


def _rope_freqs(dims: dict) -> torch.Tensor:
    """One frequency per column pair: inv_freq repeated per q and k head, 0 on the v heads."""
    hd = dims["HD"]
    inv = 500000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    rotated = inv.repeat(dims["NH"] + dims["NKV"])
    return torch.cat((rotated, torch.zeros(dims["NKV"] * hd // 2, dtype=torch.float64)))


def _attention_stand_in(qkv, dims: dict):
    """y = q + k * v, the KV heads repeated over their query groups (GQA): every column of qkv
    reaches the loss, nonlinearly in k and v."""
    hd, nh, nkv = dims["HD"], dims["NH"], dims["NKV"]
    q, k, v = qkv.split((nh * hd, nkv * hd, nkv * hd), dim=1)

    def rep(t):
        return t.unflatten(1, (nkv, hd)).repeat_interleave(nh // nkv, dim=1).flatten(1)

    return q + rep(k) * rep(v)


def _plain_llama(w: dict, pos, target, dims: dict):
    """The fp64 loss of the same model in plain torch, from the specs' equivalent_to math."""
    freqs = _rope_freqs(dims)

    def rms(x, g):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS) * g

    def rope(z):
        pairs = torch.view_as_complex(z.unflatten(1, (-1, 2)).contiguous())
        turned = pairs * torch.polar(torch.ones_like(freqs), pos[:, None] * freqs[None, :])
        return torch.view_as_real(turned).flatten(1)

    h = w["emb"]
    for i in (0, 1):
        y = _attention_stand_in(rope(rms(h, w[f"g_in{i}"]) @ w[f"w_qkv{i}"].T), dims)
        h = h + y @ w[f"w_o{i}"].T
        z = rms(h, w[f"g_post{i}"]) @ w[f"w_gu{i}"].T
        h = h + (F.silu(z[:, 0::2]) * z[:, 1::2]) @ w[f"w_down{i}"].T
    logits = rms(h, w["g_f"]) @ w["w_lm"].T
    return F.cross_entropy(logits, target.long(), ignore_index=-100)


def _after_attention(w: dict, i: int) -> dict:
    """Layer i's weights from the out-projection to the down projection, by the specs' names."""
    names = {"w_o": "w_o", "gamma1": "g_post", "w_gu": "w_gu", "w_down": "w_down"}
    return {k: w[f"{v}{i}"] for k, v in names.items()}


def _coda_llama(first, layer, last, w: dict, pos, target, dims: dict):
    """The same loss through the three ops: lse and target_logit make the mean cross-entropy."""
    freqs = _rope_freqs(dims)
    qkv0 = first(x=w["emb"], gamma=w["g_in0"], w_qkv=w["w_qkv0"], pos=pos, freqs=freqs)["qkv"]
    y0 = _attention_stand_in(qkv0, dims)
    nxt = {"gamma2": w["g_in1"], "w_qkv": w["w_qkv1"], "pos": pos, "freqs": freqs}
    mid = layer(x0=w["emb"], y=y0, **_after_attention(w, 0), **nxt)
    y1 = _attention_stand_in(mid["qkv"], dims)
    head = {"gamma_f": w["g_f"], "w_lm": w["w_lm"], "target": target}
    out = last(x0=mid["x2"], y=y1, **_after_attention(w, 1), **head)
    valid = target != -100
    nll = torch.where(valid, out["lse"] - out["target_logit"], 0.0)
    return nll.sum() / valid.sum()


@pytest.mark.parametrize("recompute", [False, True], ids=["saved", "recompute"])
def test_composed_chains_are_a_plain_llama(build, recompute):
    """first -> layer -> last as a two-layer model: the loss and every gradient (embeddings
    included) equal plain torch's in fp64, with an ignored target and positions of two
    sequences; with ``recompute``, through the chains that recompute the MLP's z1."""
    dims = rt.LLAMA3
    gen = torch.Generator().manual_seed(0)
    w = {k: v.requires_grad_(True) for k, v in _weights(dims, gen).items()}
    pos = torch.arange(M, dtype=torch.int32) % (M // 2)  # two sequences of M/2 tokens
    target = torch.randint(0, dims["V"], (M,), generator=gen, dtype=torch.int32)
    target[3] = -100
    want = _plain_llama(w, pos, target, dims)
    want_grads = torch.autograd.grad(want, list(w.values()))
    names = ("llama3_first", "llama3_layer", "llama3_last")
    if recompute:
        names = (names[0], *(f"{n}_recompute" for n in names[1:]))
    ops_ = [build(name)[0] for name in names]
    got = _coda_llama(*ops_, w, pos, target, dims)
    got_grads = torch.autograd.grad(got, list(w.values()))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=0)
    for name, g, ref in zip(w, got_grads, want_grads, strict=True):
        rel = float((g - ref).norm() / ref.norm())
        assert rel <= 1e-10, (name, rel)
