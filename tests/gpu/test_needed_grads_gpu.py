"""On the GPU, a backward that skips unwanted gradients (``needs_input_grad``) gives the wanted
ones bit for bit as the full backward does (marker ``gpu``). Build first, on any machine:
``coda build examples/tutorial/relu2_mlp.yaml``."""

from __future__ import annotations

import pytest

from tests.conftest import need_build

pytestmark = pytest.mark.gpu


def test_skipping_the_data_gradient_leaves_the_weight_gradients_unchanged():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    op = coda_spec.op(str(need_build("relu2_mlp", "examples/tutorial/relu2_mlp.yaml")))
    d, f = op.chain.manifest.dims["D"], op.chain.manifest.dims["F"]
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).bfloat16()

    x, dy = rand(4096, d), rand(4096, d)
    w = {"w_up": rand(f, d, scale=d**-0.5), "b_up": rand(f), "w_down": rand(d, f, scale=f**-0.5)}
    grads = []
    for x_grad in (True, False):
        leaves = {n: t.clone().requires_grad_() for n, t in w.items()}
        xi = x.clone().requires_grad_(x_grad)
        op(x=xi, **leaves)["y"].backward(dy)
        grads.append(({n: t.grad for n, t in leaves.items()}, xi.grad))
    (full, dx), (pruned, none) = grads
    assert dx is not None and none is None
    for n in w:
        assert torch.equal(full[n], pruned[n]), n
