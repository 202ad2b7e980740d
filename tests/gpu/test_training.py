"""A chain inside a training loop, on a real GPU (marker ``gpu``): CUDA-graph capture and
replay (also of a column table first made inside the capture), bitwise determinism, profiler
ranges named after spec steps, and the saved-tensor backward. Builds come from ``coda build
specs/<name>.yaml`` (``build/<name>-latest``; the test spec ``lmhead_ce_bwd`` from
``tests/specs_extra/``); a missing build fails loudly with that command.
"""

from __future__ import annotations

import pytest

from tests.conftest import need_build

CHAINS = ["rmsnorm_chain", "b3_rope_bwd", "b4_ce_fwd_bwd", "llama_block", "lmhead_ce_bwd"]
EXTRA = {"lmhead_ce_bwd": "tests/specs_extra/lmhead_ce_bwd.yaml"}  # test specs: where they are
pytestmark = pytest.mark.gpu


def _chain(name: str, m: int = 1000, seed: int = 0):
    import torch

    from coda_spec import load
    from coda_spec.bench.driver import Options, draw

    chain = load(need_build(name, EXTRA.get(name)), tuned=False)
    checked = chain.checked()
    sizes = {d.name: (d.size or m) for d in checked.spec.dims}
    _, inputs, grads = draw(chain, checked, sizes, Options(seed=seed))
    torch.cuda.synchronize()
    return chain, inputs, grads


def _results(chain, env) -> dict:
    names = [o.name for o in chain.manifest.outputs + chain.manifest.backward_outputs]
    return {n: env[n].clone() for n in names}


def _fresh(tensors):
    return {k: v.clone() for k, v in tensors.items()} if tensors is not None else None


@pytest.mark.parametrize("name", CHAINS)
def test_bitwise_deterministic(name):
    """Two runs on equal inputs give bitwise-equal outputs (no atomics: partials are per tile
    and folded in a fixed order)."""
    import torch

    chain, inputs, grads = _chain(name)
    first = _results(chain, chain.run(_fresh(inputs), grads=_fresh(grads)))
    for _ in range(3):
        again = _results(chain, chain.run(_fresh(inputs), grads=_fresh(grads)))
        differ = [n for n in first if not torch.equal(first[n], again[n])]
        assert differ == [], f"{name}: outputs differ run to run: {differ}"


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("name", CHAINS)
def test_cuda_graph_capture_and_replay(name, check):
    """A call captured in a CUDA graph replays to the eager call's outputs, bitwise, also after
    new values are copied into the captured inputs."""
    import torch

    chain, inputs, grads = _chain(name)
    static_in, static_g = _fresh(inputs), _fresh(grads)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (library load, tables)
        chain.run(_fresh(inputs), grads=_fresh(grads), check=check)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        env = chain.run(static_in, grads=static_g, check=check)
    for seed in (0, 7):
        _, new_in, new_g = _chain(name, seed=seed)
        for k, v in new_in.items():
            static_in[k].copy_(v)
        for k, v in (new_g or {}).items():
            static_g[k].copy_(v)  # add_to outputs accumulate into these: refresh each replay
        graph.replay()
        torch.cuda.synchronize()
        want = _results(chain, chain.run(_fresh(new_in), grads=_fresh(new_g)))
        got = _results(chain, env)
        differ = [n for n in want if not torch.equal(want[n], got[n])]
        assert differ == [], f"{name} (seed {seed}): replay differs from eager in {differ}"


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
def test_a_column_table_first_made_inside_a_capture(check):
    """The column table's first use inside a capture (library loaded before, tables not): the
    call makes it as a temporary of the graph, which fills it at every replay, and keeps none;
    replays equal eager bitwise, and an eager call afterwards keeps its own table."""
    import torch

    chain, inputs, _ = _chain("lmhead_ce_bwd")
    static_in = _fresh(inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the library and the SM count, outside the capture
        chain.run(_fresh(inputs), check=check)
    torch.cuda.current_stream().wait_stream(side)
    launcher = chain._launcher
    launcher._columns.clear()  # as if no eager call had made the table yet
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        env = chain.run(static_in, check=check)
    assert launcher._columns == {}, "a table made during a capture was kept"
    for seed in (0, 7):
        _, new_in, _ = _chain("lmhead_ce_bwd", seed=seed)
        for k, v in new_in.items():
            static_in[k].copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        want = _results(chain, chain.run(_fresh(new_in)))
        got = _results(chain, env)
        differ = [n for n in want if not torch.equal(want[n], got[n])]
        assert differ == [], f"seed {seed}: replay differs from eager in {differ}"
    assert len(launcher._columns) == 1  # the eager calls above keep one table per (N, device)


@pytest.mark.parametrize("name", ["rmsnorm_chain", "llama_block"])
def test_profiler_names_spec_steps(name):
    """torch.profiler shows one range per step, named ``<chain>/<step> (<spec file>:<line>)``."""
    import torch

    chain, inputs, grads = _chain(name)
    chain.run(_fresh(inputs), grads=_fresh(grads))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        chain.run(_fresh(inputs), grads=_fresh(grads))
    names = {e.name for e in prof.events()}
    for s in chain.manifest.all_steps:
        want = f"{chain.name}/{s.name} ({chain.manifest.spec_file}:{s.line})"
        assert want in names, (want, sorted(n for n in names if "/" in n)[:20])


def test_backward_from_saved_tensors_equals_the_full_run():
    """``Chain.backward`` on the forward's saved tensors alone gives the full run's gradients
    bitwise, and does not run the forward again."""
    import torch

    chain, inputs, grads = _chain("llama_block")
    full = _results(chain, chain.run(_fresh(inputs), grads=_fresh(grads)))
    env = chain.run(_fresh(inputs))
    saved = {n: env[n] for n in chain.saved}
    out = chain.backward(saved, **_fresh(grads))
    for o in chain.manifest.backward_outputs:
        assert torch.equal(out[o.name], full[o.name]), o.name
