"""Runtime misuse on a real GPU (marker ``gpu``): every bad call is refused before any launch,
with a clear error and no illegal memory access (the CUDA context stays usable)."""

from __future__ import annotations

import pytest

from tests.conftest import need_build

pytestmark = pytest.mark.gpu


def _inputs(m=256):

    from coda_spec import load
    from coda_spec.prove.inputs import make_inputs

    chain = load(need_build("rmsnorm_chain"))
    sizes = {d.name: (d.size or m) for d in chain.checked().spec.dims}
    low, _ = make_inputs(chain.checked().spec, sizes, seed=0)
    return chain, {k: v.cuda() for k, v in low.items()}


def _bad(inputs, name, how):
    import torch

    x = dict(inputs)
    t = x[name]
    if how == "dtype":
        x[name] = t.float()
    elif how == "shape":
        x[name] = t[:, :-8].contiguous() if t.dim() == 2 else t[:-8].contiguous()
    elif how == "stride":
        x[name] = t.T.contiguous().T
    elif how == "alignment":
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        x[name] = flat[1:].view(t.shape)
    elif how == "device":
        x[name] = t.cpu()
    elif how == "missing":
        x.pop(name)
    elif how == "unknown":
        x["bogus"] = t
    return x


@pytest.mark.parametrize(
    "how,fragment",
    [
        ("dtype", "expected bf16"),
        ("shape", "dim 1 is 4088"),
        ("stride", "not contiguous"),
        ("alignment", "16-byte aligned"),
        ("device", "kernels run on"),
        ("missing", "missing input"),
        ("unknown", "unknown input"),
    ],
)
def test_bad_call_is_refused_before_launch(how, fragment):
    import torch

    from coda_spec.runtime import CodaRuntimeError

    chain, inputs = _inputs()
    with pytest.raises(CodaRuntimeError, match=fragment):
        chain(**_bad(inputs, "x", how))
    torch.cuda.synchronize()  # no illegal memory access: the context is still healthy
    out = chain(**inputs)
    assert torch.isfinite(out["out"].float()).all()
