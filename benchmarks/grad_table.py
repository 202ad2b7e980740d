"""The derived-versus-hand-written table of docs/grad.md, from the specs themselves (no GPU).

    python benchmarks/grad_table.py            # prints the markdown table docs/grad.md embeds

Each row: a chain's backward as `coda grad` derives it (the committed file in specs/grad/, the
policy its test names), beside the hand-written section where the repository has one. Counts
and bytes come from coda_spec.grad.cost (saved: bytes per token row the forward keeps for the
backward; moved: bytes per row the backward's steps read and write, weights and vectors left
out), at each spec's own dims. tests/test_grad.py checks that docs/grad.md holds this output.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coda_spec.check.frontend import check_file  # noqa: E402
from coda_spec.grad.cost import section_cost  # noqa: E402

# derived file in specs/grad/ -> (the forward it came from, the hand-written spec or None)
ROWS = (
    ("llama_block", "specs/llama_block.yaml", "specs/llama_block.yaml"),
    ("rmsnorm_chain", "specs/rmsnorm_chain.yaml", None),
    ("f3_norm_swiglu", "specs/f3_norm_swiglu.yaml", None),
    ("f4_norm_rope", "specs/f4_norm_rope.yaml", None),
    ("f5_norm_lmhead_lse", "specs/f5_norm_lmhead_lse.yaml", None),
    (
        "layer_norm_chain",
        "tests/grad_specs/layer_norm_chain.yaml",
        "benchmarks/grad_hand/layer_norm_two_pass.yaml",
    ),
    (
        "layer_norm_chain_max",
        "tests/grad_specs/layer_norm_chain.yaml --save max",
        "benchmarks/grad_hand/layer_norm_two_pass.yaml",
    ),
    ("gemma_norm_mlp", "tests/grad_specs/gemma_norm_mlp.yaml", None),
    ("geglu_mlp_block", "tests/grad_specs/geglu_mlp_block.yaml", None),
    ("relu2_mlp_norm", "tests/grad_specs/relu2_mlp_norm.yaml", None),
    ("layerscale_residual", "tests/grad_specs/layerscale_residual.yaml", None),
    (
        "relu2_mlp_tutorial",
        "tests/grad_specs/relu2_mlp_tutorial.yaml",
        "examples/tutorial/relu2_mlp.yaml",
    ),
)


def _cells(path) -> str:
    c = section_cost(check_file(ROOT / path))
    return f"{c.kernels} / {c.hosts} / {c.finalizes} | {c.saved:,} | {c.moved:,}"


def table() -> str:
    lines = [
        "| chain (forward) | derived: GEMM kernels / host steps / finalizes | saved B/row | "
        "moved B/row | hand-written: kernels / hosts / finalizes | saved B/row | moved B/row |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fwd, hand in ROWS:
        derived = _cells(f"specs/grad/{name}.yaml")
        other = _cells(hand) if hand else "– | – | –"
        lines.append(f"| {name} (`{fwd}`) | {derived} | {other} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
