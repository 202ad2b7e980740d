"""``coda_spec.nn`` against transformers on the CPU: the same weights, the same loss and gradients.

A tiny GQA Llama (2 layers, hidden 256, 4 query and 2 KV heads of 64, intermediate 512, vocab
1024, batch 2 x 32) runs in fp64 through the chains' CPU kernels (their reference interpreter)
and through ``transformers.LlamaForCausalLM``. The builds are the CPU tests' (a spec and the
manifest ``coda build`` would write, ``tests.test_runtime_cpu.make_build``) at the bundled dims,
re-sized at load as a user's would be.

transformers computes RMSNorm and RoPE's angles in fp32 even in an fp64 model (LlamaRMSNorm
upcasts to fp32; the rotary embedding forces fp32), and its loss upcasts logits with
``.float()``. The reference here lifts those three to the model's dtype (:func:`hf_fp64`), so a
1e-10 comparison sees the math and not transformers' fp32 islands.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")
from transformers import LlamaConfig as HFConfig  # noqa: E402
from transformers import LlamaForCausalLM as HFLlama  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

from coda_spec import ops  # noqa: E402
from coda_spec.nn import LlamaForCausalLM, apply_to_hf_llama, layout  # noqa: E402
from coda_spec.nn.llama import (  # noqa: E402
    CHAINS,
    LM_HEAD_CHUNK_BYTES,
    RECOMPUTE,
    lm_head_chunk,
    lm_head_chunks,
)
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_runtime_cpu as rt  # noqa: E402

TINY = {
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 64,
}
B, S = 2, 32


def config(tied: bool, **over) -> HFConfig:
    return HFConfig(**{**TINY, **over}, tie_word_embeddings=tied, attn_implementation="sdpa")


def cpu_builds(tmp_path, monkeypatch, names) -> dict:
    """``{chain: build}``: CPU builds of bundled specs at their own dims (``make_build``)."""
    out = {}
    for name in names:
        monkeypatch.setitem(rt.SPECS, name, (rt.ROOT / "specs" / f"{name}.yaml", {}))
        out[name], _ = rt.make_build(tmp_path, name)
    return out


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The three chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return cpu_builds(tmp_path, monkeypatch, CHAINS)


@pytest.fixture
def all_builds(builds, tmp_path, monkeypatch):
    """``builds`` and the recompute chains' CPU builds (``recompute=True``)."""
    return {**builds, **cpu_builds(tmp_path, monkeypatch, RECOMPUTE.values())}


def fp64_norm(self, x):
    """transformers' RMSNorm at the input's dtype (the module docstring)."""
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


def fp64_rotary(self, x, position_ids):
    """transformers' rotary embedding at the input's dtype (the module docstring)."""
    angles = position_ids[:, :, None].to(x.dtype) * self.inv_freq.to(x.dtype)[None, None]
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


@pytest.fixture
def hf_fp64(monkeypatch):
    """transformers' RMSNorm, RoPE and loss at the model's dtype (the module docstring)."""
    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", fp64_norm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", fp64_rotary)


def hf_model(tied: bool, dtype=torch.float64, seed: int = 0, family=None) -> HFLlama:
    """A transformers model at the tiny config, its norms perturbed; ``family``: ``(class,
    config)`` of another family the Llama chains serve (tests/test_nn_mistral.py), else
    transformers' Llama (``tied`` then ignored: the config has it)."""
    torch.manual_seed(seed)
    cls, cfg = family if family is not None else (HFLlama, config(tied))
    model = cls(cfg).to(dtype)
    with torch.no_grad():  # norms away from 1, so their gradients are exercised
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(seed: int = 1, ignored: bool = True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TINY["vocab_size"], (B, S), generator=g)
    labels = ids.clone()
    if ignored:
        labels[0, :5] = -100  # a padded prefix
        labels[1, 17] = -100
    return ids, labels


def hf_loss(model, ids, labels, **kw):
    """transformers' causal-LM loss, without its fp32 upcast of the logits; ``kw``: its other
    arguments (``attention_mask``, ``position_ids``)."""
    logits = model(input_ids=ids, **kw).logits
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def coda_grads_as_hf(model: LlamaForCausalLM) -> dict:
    grads = {n: p.grad for n, p in model.named_parameters()}
    return layout.to_hf_state_dict(grads, model.shape)


@pytest.mark.parametrize("recompute", [False, True], ids=["saved", "recompute"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_from_hf_matches_transformers_in_fp64(all_builds, hf_fp64, tied, recompute):
    """The loss and every gradient equal transformers' to 1e-10; ``recompute=True`` (the MLP's
    z1 recomputed in the backward) through the recompute chains (``RECOMPUTE``), not the plain
    ones."""
    hf = hf_model(tied)
    coda = LlamaForCausalLM.from_hf(hf, builds=all_builds, recompute=recompute)
    assert coda.recompute == recompute
    served = {role: op.chain.name for role, op in coda.chains.items()}
    assert served == {n: RECOMPUTE.get(n, n) if recompute else n for n in CHAINS}
    ids, labels = batch()
    want = hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert rel(got, want) <= 1e-10, (got.item(), want.item())
    ref = {n: p.grad for n, p in hf.named_parameters()}
    grads = coda_grads_as_hf(coda)
    if tied:  # one parameter: transformers lists it once, as the embedding
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    worst = {n: rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst


def test_recompute_chains_save_h1_not_z1(all_builds):
    """The recompute chains' ``backward.save`` (what autograd keeps) has h1 and no z1, and their
    forward returns no z1; the plain chains save z1 (the model picks the chain per flag)."""
    for recompute, saves, lacks in ((False, "z1", "h1"), (True, "h1", "z1")):
        coda = LlamaForCausalLM(config(True), builds=all_builds, recompute=recompute)
        for role in ("llama3_layer", "llama3_last_mlp"):
            op = coda.chains[role]
            assert saves in op.chain.saved and lacks not in op.chain.saved, (role, recompute)
            assert ("z1" in op.returns) != recompute, role  # a saved z1 is returned


def test_recompute_saves_fewer_bytes_per_token(all_builds):
    """What autograd keeps for the backward (``saved_tensors_hooks``): recompute saves, per
    layer and token, 2F - D fewer elements (z1's M x 2F replaced by h1's M x D)."""
    hf = hf_model(tied=True)
    ids, labels = batch()

    def saved_bytes(recompute: bool) -> int:
        coda = LlamaForCausalLM.from_hf(hf, builds=all_builds, recompute=recompute)
        seen: dict = {}

        def pack(t):
            seen[id(t)] = t.numel() * t.element_size()  # by object: a weight counts once
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            coda(ids, labels)
        return sum(seen.values())

    d, f, layers = TINY["hidden_size"], TINY["intermediate_size"], TINY["num_hidden_layers"]
    fewer = layers * B * S * (2 * f - d) * torch.float64.itemsize
    assert saved_bytes(False) - saved_bytes(True) == fewer


def _vocabulary_gemms(manifest) -> list:
    """The kernels of a chain (forward and backward) whose GEMM has the vocabulary V as an
    extent (M, N or K)."""
    steps = (*manifest.steps, *manifest.backward_steps)
    return [
        s.name
        for s in steps
        if s.kind == "kernel" and any(re.search(r"\bV\b", str(e)) for e in (s.m, s.n, s.k))
    ]


def test_a_step_runs_three_vocabulary_gemms_and_no_fp32_logits(all_builds, tmp_path, monkeypatch):
    """A training step runs every chain's forward and backward kernels once: exactly three of
    them are vocabulary-wide (the LM head's logits, dgrad and wgrad GEMMs; llama3_last, which
    the model ran before, has four: its backward recomputes the logits), the LM head has no
    backward section (its gradients come out of its forward), and every M x V tensor a chain
    allocates (the logits, dlogits) is bf16, never fp32."""
    for recompute in (False, True):
        coda = LlamaForCausalLM(config(True), builds=all_builds, recompute=recompute)
        manifests = [op.chain.manifest for op in coda.chains.values()]
        vocab = [name for m in manifests for name in _vocabulary_gemms(m)]
        assert vocab == ["lm_head_logits", "dgrad_lm_norm_f", "wgrad_lm"], (recompute, vocab)
        assert not coda.chains["llama3_lm_head"].has_backward
        m_by_v = {
            (m.name, n): t.dtype
            for m in manifests
            for n, t in m.tensors.items()
            if set(map(str, t.shape)) == {"M", "V"}
        }
        assert m_by_v == {
            ("llama3_lm_head", "logits"): "bf16",
            ("llama3_lm_head", "dlogits"): "bf16",
        }, m_by_v
    (old,) = cpu_builds(tmp_path, monkeypatch, ["llama3_last"]).values()
    old_manifest = ops.op(old, tuned=False).chain.manifest
    assert len(_vocabulary_gemms(old_manifest)) == 4


def test_the_lm_head_chunk_rule():
    """C: the most rows, a multiple of 256, whose C x V bf16 logits fit LM_HEAD_CHUNK_BYTES;
    never more than M; an override as given (at most M)."""
    assert lm_head_chunk(8192, 128256) == 2048  # Llama-3's vocabulary: 4 chunks of 8192 tokens
    assert 2048 * 128256 * 2 <= LM_HEAD_CHUNK_BYTES < 2304 * 128256 * 2
    assert lm_head_chunk(16384, 128256) == 2048
    assert lm_head_chunk(1000, 128256) == 1000  # fewer tokens than a chunk: one call
    assert lm_head_chunk(B * S, TINY["vocab_size"]) == B * S  # the tiny model: one chunk
    assert lm_head_chunk(8192, 4 << 20) == 256  # a huge vocabulary: one tile row, at least
    assert lm_head_chunk(64, 1024, rows=40) == 40
    assert lm_head_chunk(0, 128256) == 0
    # the (start, stop) chunks the model (and benchmarks/role_replay.py) call the head over
    assert lm_head_chunks(8192, 128256) == tuple((i, i + 2048) for i in range(0, 8192, 2048))
    assert lm_head_chunks(100, 1024, rows=40) == ((0, 40), (40, 80), (80, 100))
    assert lm_head_chunks(0, 128256) == ((0, 0),)


def test_a_bad_lm_head_chunk_is_refused(builds):
    for bad in (0, -8, 12, 8.0, True, "64"):
        with pytest.raises(CodaRuntimeError, match="lm_head_chunk_rows=.*positive multiple of 8"):
            LlamaForCausalLM(config(True), builds=builds, lm_head_chunk_rows=bad)


def test_a_chunked_lm_head_equals_one_chunk(builds):
    """Forced chunks of 40 rows (64 tokens: 40 + a ragged 24) give the one-chunk loss and every
    gradient to fp64 rounding; the LM head chain is called once per chunk."""
    hf = hf_model(tied=False)
    ids, labels = batch()
    got = {}
    for rows in (None, 40):
        coda = LlamaForCausalLM.from_hf(hf, builds=builds, lm_head_chunk_rows=rows)
        head, calls = coda.chains["llama3_lm_head"], []

        def counted(head=head, calls=calls, **kw):
            calls.append(kw["x2"].shape[0])
            return head(**kw)

        coda.chains = {**coda.chains, "llama3_lm_head": counted}
        loss = coda(ids, labels)
        loss.backward()
        got[rows] = (loss, coda_grads_as_hf(coda), calls)
    (loss1, grads1, calls1), (loss2, grads2, calls2) = got[None], got[40]
    assert (calls1, calls2) == ([B * S], [40, 24])
    assert rel(loss2, loss1) <= 1e-14, (loss2.item(), loss1.item())
    worst = {n: rel(grads2[n], grads1[n]) for n in grads1}
    assert max(worst.values()) <= 1e-13, worst


def test_the_model_specs_ship_inside_the_package(tmp_path, monkeypatch):
    """Every chain the model runs (plain and recompute) has its spec in ``coda_spec/models/``,
    package data (pyproject), the repository's file itself; outside a checkout the build
    command names those files, which exist."""
    import tomllib

    from coda_spec.nn import llama

    names = {*CHAINS, *RECOMPUTE.values()}
    for name in names:
        packaged = llama.MODEL_SPECS / f"{name}.yaml"
        assert packaged.resolve() == (rt.ROOT / "specs" / f"{name}.yaml").resolve(), name
    data = tomllib.loads((rt.ROOT / "pyproject.toml").read_text())
    assert "models/*.yaml" in data["tool"]["setuptools"]["package-data"]["coda_spec"]
    monkeypatch.chdir(tmp_path)  # no specs/ here
    for recompute in (False, True):
        paths = llama.build_command(recompute).split()[2:]
        assert len(paths) == len(CHAINS) and all(Path(p).is_file() for p in paths), paths
        assert all(Path(p).parent == llama.MODEL_SPECS for p in paths), paths


def test_a_missing_recompute_build_names_its_command(builds):
    """The plain builds only: ``recompute=True`` names the recompute chain and the build."""
    want = (
        "no build of llama3_layer_recompute .* coda build specs/llama3_first.yaml "
        "specs/llama3_layer_recompute.yaml specs/llama3_last_mlp_recompute.yaml "
        "specs/llama3_lm_head.yaml"
    )
    with pytest.raises(CodaRuntimeError, match=want):
        LlamaForCausalLM(config(True), builds=builds, recompute=True)
    LlamaForCausalLM(config(True), builds=builds)  # the plain model needs none of them


@pytest.mark.parametrize("recompute", [False, True], ids=["saved", "recompute"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_the_patch_matches_transformers_and_keeps_its_state_dict(
    all_builds, hf_fp64, tied, recompute
):
    hf = hf_model(tied)
    patched = apply_to_hf_llama(copy.deepcopy(hf), builds=all_builds, recompute=recompute)
    # the chains the patch made ops of (an op's name: the spec's, then the build's address)
    loaded = {n.rsplit("_", 1)[0] for n in ops._OPS} & set(all_builds)
    assert loaded == {RECOMPUTE.get(n, n) if recompute else n for n in CHAINS}
    before = {k: v.clone() for k, v in patched.state_dict().items()}
    ids, labels = batch()
    want = hf_loss(hf, ids, labels)
    want.backward()
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None
    out.loss.backward()
    assert rel(out.loss, want) <= 1e-10
    ref = dict(hf.named_parameters())
    worst = {n: rel(p.grad, ref[n].grad) for n, p in patched.named_parameters()}
    assert max(worst.values()) <= 1e-10, worst
    after = patched.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_the_patch_leaves_calls_it_does_not_serve_to_transformers(builds):
    hf = hf_model(tied=True, dtype=torch.float32)
    ids, _ = batch()
    want = hf(input_ids=ids).logits
    patched = apply_to_hf_llama(hf, builds=builds)
    got = patched(input_ids=ids)  # no labels: transformers' forward, with logits
    assert torch.equal(got.logits, want)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_hf_state_dict_round_trip_is_exact(builds, tied):
    hf = hf_model(tied, dtype=torch.float32)
    coda = LlamaForCausalLM.from_hf(hf, builds=builds)
    back = coda.to_hf_state_dict()
    sd = hf.state_dict()
    assert set(back) == set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd)
    again = HFLlama(config(tied))
    again.load_state_dict(back)  # transformers takes it as is


def test_adamw_training_tracks_transformers_in_fp32(builds):
    """20 AdamW steps in fp32 on the CPU: the losses track transformers' to 1e-5 (measured:
    2.7e-7 at worst, while the loss falls from 7.0 to 2.1; at lr 1e-3 the tiny model memorizes
    the batch within 10 steps and fp32 rounding differences grow past 1e-5)."""
    hf = hf_model(tied=True, dtype=torch.float32)
    coda = LlamaForCausalLM.from_hf(hf, builds=builds)
    opt_h = torch.optim.AdamW(hf.parameters(), lr=3e-4)
    opt_c = torch.optim.AdamW(coda.parameters(), lr=3e-4)
    ids, labels = batch(ignored=False)
    for step in range(20):
        lh = hf_loss(hf, ids, labels)
        lc = coda(ids, labels)
        assert abs(lc.item() - lh.item()) <= 1e-5 * abs(lh.item()), (step, lc.item(), lh.item())
        for opt, loss in ((opt_h, lh), (opt_c, lc)):
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert lh.item() < hf_loss(hf_model(tied=True, dtype=torch.float32), ids, labels).item()


def test_a_missing_build_names_the_command(tmp_path):
    with pytest.raises(CodaRuntimeError, match="no build of llama3_first .* coda build specs"):
        LlamaForCausalLM(config(True), builds=tmp_path)


def test_a_config_the_chains_do_not_compute_is_refused(builds):
    with pytest.raises(CodaRuntimeError, match="rms_norm_eps is 1e-06"):
        LlamaForCausalLM(config(True, rms_norm_eps=1e-6), builds=builds)
    with pytest.raises(CodaRuntimeError, match="SwiGLU"):
        LlamaForCausalLM(config(True, hidden_act="gelu"), builds=builds)
    # before: trained without the dropout transformers applies, silently
    with pytest.raises(CodaRuntimeError, match="attention_dropout is 0.1: coda's attention"):
        LlamaForCausalLM(config(True, attention_dropout=0.1), builds=builds)


def test_the_model_compiles_with_no_graph_break(builds):
    """``torch.compile(fullgraph=True)`` of the model's loss and backward, with the batch's
    length dynamic: 0 graph breaks (``torch._dynamo.explain``), and the loss is eager's, bit
    for bit. The LM head's chunk is forced to 48 rows: two chunks at 64 tokens, one at 32.
    Every coda op the step ran has its inductor fallback registered by coda, so inductor never
    takes its implicit-fallback path (whose log message, in torch 2.11, printed every earlier
    op's IR: compile time exponential in depth; ``ops._inductor_fallbacks``)."""
    from torch._inductor.lowering import lowerings

    coda = LlamaForCausalLM.from_hf(hf_model(tied=True), builds=builds, lm_head_chunk_rows=48)
    ids, labels = batch()
    explained = torch._dynamo.explain(coda)(ids, labels)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(coda, fullgraph=True, dynamic=True)
    for s in (S, S // 2):
        got = compiled(ids[:, :s], labels[:, :s])
        assert torch.equal(got, coda(ids[:, :s], labels[:, :s]))
    got.backward()
    assert coda.layers[0].w_qkv.grad is not None
    names = {role: coda.chains[role].op_name for role in CHAINS}
    ran = {f"{names[r]}{suffix}" for r in CHAINS for suffix in ("", "_backward")}
    lm = names["llama3_lm_head"]
    ran = {*ran, f"{lm}_inplace"} - {lm, f"{lm}_backward"}
    lowered = {str(k).split(".")[1] for k in lowerings if str(k).startswith("coda.")}
    assert ran <= lowered, sorted(ran - lowered)


def padded(ids, labels):
    """Row 0 left-padded by 5 tokens, row 1 right-padded by 3 (pad id 0, labels -100 there)."""
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    mask[1, -3:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, labels.masked_fill(mask == 0, -100), mask


@pytest.mark.parametrize("via", ["model", "patch"])
def test_a_padded_batch_gets_transformers_loss_and_gradients(builds, hf_fp64, via):
    """``attention_mask`` with padding: transformers' loss and gradients in fp64 (before: the
    mask was ignored, every token attended to the pads, loss 7.0378 against 7.0485)."""
    hf = hf_model(tied=True)
    ids, labels, mask = padded(*batch(ignored=False))
    want = hf_loss(hf, ids, labels, attention_mask=mask)
    if via == "model":
        coda = LlamaForCausalLM.from_hf(hf, builds=builds)
        got = coda(ids, labels, attention_mask=mask)
    else:
        coda = apply_to_hf_llama(copy.deepcopy(hf), builds=builds)
        out = coda(input_ids=ids, attention_mask=mask, labels=labels)
        assert out.logits is None  # served by the chains, not transformers' forward
        got = out.loss
    assert rel(got, want) <= 1e-10, (got.item(), want.item())
    want.backward()
    got.backward()
    ref = {n: p.grad for n, p in hf.named_parameters()}
    grads = (
        coda_grads_as_hf(coda)
        if via == "model"
        else dict((n, p.grad) for n, p in coda.named_parameters())
    )
    worst = {n: rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst


def test_packed_sequences_attend_within_their_own(builds, hf_fp64):
    """``position_ids`` that restart with no ``attention_mask`` (packed sequences): transformers
    without a cache (``use_cache=False``, a training call's) masks attention to each sequence;
    so does the model (before: every token attended across the restart)."""
    hf = hf_model(tied=True)
    coda = LlamaForCausalLM.from_hf(hf, builds=builds)
    ids, labels = batch(ignored=False)
    pos = torch.cat([torch.arange(12), torch.arange(S - 12)]).expand(B, S).clone()
    pos[1] = torch.arange(S)  # row 1: one sequence
    want = hf_loss(hf, ids, labels, position_ids=pos, use_cache=False)
    got = coda(ids, labels, position_ids=pos)
    assert rel(got, want) <= 1e-10, (got.item(), want.item())
    plain = hf_loss(hf, ids, labels)
    assert rel(plain, want) > 1e-6  # the packing changes the loss (2e-5): the test can fail


def test_the_model_refuses_a_misspelt_keyword(builds):
    """Through ``forward`` (tests/test_nn_call.py checks each refusal), before any chain runs;
    before, ``lables=`` was dropped and the call failed on ``labels`` missing, or with ``labels``
    given, a misspelt ``postion_ids=`` was ignored."""
    coda = LlamaForCausalLM(config(True), builds=builds)
    ids, labels = batch()
    with pytest.raises(CodaRuntimeError, match="'lables'; did you mean 'labels'"):
        coda(ids, lables=labels)
    with pytest.raises(CodaRuntimeError, match="'postion_ids'; did you mean 'position_ids'"):
        coda(ids, labels, postion_ids=torch.arange(S)[None])


def test_the_lm_head_sums_its_weight_gradient_in_one_buffer():
    """dW_lm over the row chunks lives in one V x D buffer that each chunk's call adds into
    (the chain's dw_acc, the op's inplace flavour): before, each chunk made its own V x D dW_lm,
    added into the sum, and the loop's last result held it through the next chunk's GEMMs, two
    V x D buffers beside the sum at the forward's peak (1 GiB each at D = 4096)."""
    from coda_spec.nn.llama import _LMHead

    seen = []

    def head(**x):
        seen.append(x["dw_acc"])
        m = x["x2"].shape[0]
        return {
            "loss": x["row_w"].sum(),
            "dgamma_f": x["gamma_f"].float(),
            "dw_lm": x["dw_acc"].add_(1.0),
            "dx2": torch.zeros(m, x["x2"].shape[1]),
        }

    x2 = torch.randn(12, 4)
    w_lm = torch.randn(6, 4, requires_grad=True)
    ones = torch.ones(12)
    args = (x2, x2, ones, torch.ones(4), w_lm, torch.zeros(12), ones)
    loss = _LMHead.apply(head, ((0, 4), (4, 8), (8, 12)), *args)
    assert loss.item() == 12.0 and len(seen) == 3
    assert all(t is seen[0] for t in seen) and seen[0].shape == w_lm.shape
    loss.backward()
    assert torch.equal(w_lm.grad, torch.full((6, 4), 3.0))  # three chunks, each added once


@pytest.mark.parametrize("masked", [False, True], ids=["causal", "mask"])
def test_attention_heads_backward_is_one_cat(masked):
    """SDPA's q, k, v are views of qkv and their gradients come back as one ``cat`` into a
    qkv-shaped tensor (``_Heads``), equal to indexing the heads: autograd's slice backward
    zeroed a qkv-sized buffer per slice, copied into it and added the three (3 fills, 4 copies,
    2 adds per layer, counted here before the change)."""
    from collections import Counter
    from types import SimpleNamespace

    from coda_spec.nn.llama import _attention

    b, s, h, kv, hd = 2, 16, 4, 2, 8
    shape = SimpleNamespace(heads=h, kv_heads=kv, head_dim=hd)
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(b * s, (h + 2 * kv) * hd, generator=g, dtype=torch.float64)
    qkv.requires_grad_(True)
    dy = torch.randn(b * s, h * hd, generator=g, dtype=torch.float64)
    mask = torch.ones(s, s, dtype=torch.bool).tril().expand(b, 1, s, s) if masked else None

    def indexed(x):  # the heads by indexing, as before
        heads = x.view(b, s, h + 2 * kv, hd).transpose(1, 2)
        q, k, v = heads[:, :h], heads[:, h : h + kv], heads[:, h + kv :]
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.transpose(1, 2).reshape(b * s, h * hd)

    (want,) = torch.autograd.grad(indexed(qkv), qkv, dy)
    y = _attention(qkv, shape, b, s, mask)
    assert torch.equal(y, indexed(qkv))
    with torch.profiler.profile() as prof:
        (got,) = torch.autograd.grad(y, qkv, dy)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    ops = Counter(e.name for e in prof.events())
    assert ops["aten::cat"] == 1 and ops["aten::slice_backward"] == 0
    if not masked:  # (repeat_interleave's backward sums the repeated heads: adds of its own)
        assert ops["aten::add_"] == 0 and ops["aten::copy_"] == 0


def test_attention_heads_backward_fills_a_gradient_autograd_leaves_out():
    """A head group whose view no loss reads gets zeros in the one qkv-shaped gradient (autograd
    hands _Heads' backward None for it)."""
    from coda_spec.nn.llama import _Heads

    b, s, h, kv, hd = 1, 4, 2, 1, 2
    qkv = torch.randn(b * s, (h + 2 * kv) * hd, dtype=torch.float64, requires_grad=True)
    _, k, _ = _Heads.apply(qkv, (b, s, h, kv, hd))
    k.sum().backward()
    want = torch.zeros(b, s, h + 2 * kv, hd, dtype=torch.float64)
    want[:, :, h : h + kv] = 1.0
    assert torch.equal(qkv.grad, want.view(b * s, -1))
