"""The tutorial's chain in a training loop (docs/tutorial.md, "Train with it").

A student squared-ReLU MLP, run through the built chain ``relu2_mlp`` as a torch op, learns to
match a fixed random teacher MLP of the same shape under mean-squared error, with AdamW on fp32
master weights cast to the kernels' bf16 each step (as mixed-precision training does). With
``--torch`` the same loop also runs the plain PyTorch MLP from the same weights and data, and the
two loss curves and step times are printed side by side; ``--compile`` runs both models under
``torch.compile(mode="reduce-overhead")``, whose CUDA graphs take the host's per-launch cost out
of a step.

On a machine without a GPU the op runs the chain's reference (``--device cpu``), so the loop
works everywhere; ``tests/test_tutorial.py`` runs it that way on a small build.

    python examples/tutorial/train_relu2.py --build build/relu2_mlp-latest --steps 200 --torch
"""

from __future__ import annotations

import argparse
import time

import torch

import coda_spec


def init(d: int, f: int, seed: int) -> dict:
    """Weights with unit-variance pre-activations and outputs of order one."""
    g = torch.Generator().manual_seed(seed)
    return {
        "w_up": torch.randn(f, d, generator=g) * d**-0.5,
        "b_up": torch.randn(f, generator=g) * 0.1,
        "w_down": torch.randn(d, f, generator=g) * (3.0 / f) ** 0.5 / 3.0,
    }


def torch_mlp(x, w_up, b_up, w_down):
    """The chain's math in plain PyTorch (its equivalent_to)."""
    return torch.relu(x @ w_up.T + b_up).square() @ w_down.T


def train(run, params: dict, teacher: dict, args, dev) -> list:
    """``args.steps`` AdamW steps of ``run(x, **bf16 weights) -> y``; the loss and ms of each."""
    opt = torch.optim.AdamW(params.values(), lr=args.lr, weight_decay=0.0)
    data = torch.Generator(device=dev).manual_seed(1)
    out = []
    for _ in range(args.steps):
        x = torch.randn(args.rows, teacher["w_up"].shape[1], device=dev, generator=data)
        x = x.to(torch.bfloat16)
        with torch.no_grad():
            target = torch_mlp(x.float(), **teacher)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        weights = {n: p.to(torch.bfloat16) for n, p in params.items()}
        y = run(x, **weights)
        loss = (y.float() - target).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out.append((loss.item(), (time.perf_counter() - t0) * 1e3))
    return out


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/relu2_mlp-latest", help="the chain's build")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rows", type=int, default=8192, help="tokens per step (the chain's M)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--torch", action="store_true", help="also train the plain PyTorch MLP")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="run each model under torch.compile(mode='reduce-overhead') (CUDA graphs)",
    )
    args = ap.parse_args(argv)
    dev = torch.device(args.device)

    mlp = coda_spec.op(args.build)  # torch.ops.coda.relu2_mlp_<hash>
    d, f = mlp.chain.manifest.dims["D"], mlp.chain.manifest.dims["F"]
    teacher = {n: t.to(dev) for n, t in init(d, f, seed=0).items()}
    start = init(d, f, seed=1)

    def coda_run(x, **w):
        return mlp(x=x, **w)["y"]

    runs = {"coda": coda_run}
    if args.torch:
        runs["torch"] = torch_mlp
    if args.compile:  # the model call (forward and its backward graph), not the optimizer
        graphs = {"mode": "reduce-overhead", "fullgraph": True}
        runs = {n: torch.compile(f, **graphs) for n, f in runs.items()}
    curves = {}
    for name, run in runs.items():
        params = {n: torch.nn.Parameter(t.clone().to(dev)) for n, t in start.items()}
        curves[name] = train(run, params, teacher, args, dev)
    names = list(curves)
    how = "torch.compile(mode='reduce-overhead')" if args.compile else "eager"
    print(f"relu2_mlp: D={d} F={f}, {args.rows} rows per step, {args.steps} steps on {dev}, {how}")
    print("step  " + "  ".join(f"{n + ' loss':>12}" for n in names))
    for i in sorted({0, 1, 2, 5, 10, 20, 50, 100, args.steps - 1} & set(range(args.steps))):
        print(f"{i:4d}  " + "  ".join(f"{curves[n][i][0]:12.6f}" for n in names))
    for n in names:
        ms = sorted(t for _, t in curves[n][min(3, args.steps - 1) :])  # after warm-up
        print(f"{n}: median step {ms[len(ms) // 2]:.2f} ms")
    return [curves[n] for n in names]


if __name__ == "__main__":
    main()
