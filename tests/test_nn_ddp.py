"""``coda_spec.nn`` under torch.distributed on the CPU (gloo, 2 processes).

DDP, and FSDP2 (``fully_shard`` per decoder layer plus the root): each rank runs half of the
batch; after the gradient reduction, the gradients equal one process's on the whole batch
(fp64, so the comparison is of the math: the two reductions differ only in the order of a sum).
The builds are the CPU tests' fake builds (``tests.test_nn_llama``), made once by the parent;
the children load them.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard

pytest.importorskip("transformers")
from coda_spec import ops  # noqa: E402
from coda_spec.nn import LlamaForCausalLM  # noqa: E402
from coda_spec.nn.llama import CHAINS  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402

WORLD = 2


def _model(builds: dict) -> LlamaForCausalLM:
    hf = tl.hf_model(tied=True)
    return LlamaForCausalLM.from_hf(hf, builds=builds)


def _worker(rank: int, how: str, builds: dict, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        model = _model(builds)
        if how == "ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
        else:  # FSDP2: each decoder layer, then the root (embedding, final norm)
            for layer in model.layers:
                fully_shard(layer)
            wrapped = fully_shard(model)
        ids, labels = tl.batch(ignored=False)
        half = slice(rank * tl.B // WORLD, (rank + 1) * tl.B // WORLD)
        wrapped(ids[half], labels[half]).backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        if how == "fsdp2":  # each rank holds a shard of each gradient: gather the full ones
            grads = {n: g.full_tensor() for n, g in grads.items()}
        if rank == 0:
            torch.save(grads, out)
        dist.barrier()  # no rank tears gloo down while another still talks to it
    except BaseException:
        dist.destroy_process_group()
        raise
    # Done: leave without tearing gloo down. Its teardown can deadlock: the DDP Reducer, freed
    # with the GIL held, joins gloo's worker thread, which may still be freeing the barrier's
    # work and waits for the GIL (seen once in a full CI run on 2 cores, torch 2.13).
    os._exit(0)


@pytest.fixture
def builds(tmp_path, monkeypatch):
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, CHAINS)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ddp", "fsdp2"])
def test_gradients_equal_one_process_on_the_whole_batch(builds, tmp_path, how):
    out = tmp_path / "grads.pt"
    mp.spawn(_worker, args=(how, builds, str(tmp_path / "store"), str(out)), nprocs=WORLD)
    model = _model(builds)
    ids, labels = tl.batch(ignored=False)
    model(ids, labels).backward()
    got = torch.load(out)
    worst = {n: tl.rel(got[n], p.grad) for n, p in model.named_parameters()}
    assert max(worst.values()) <= 1e-12, worst
