# Generated from specs/olmo2_mlp.yaml (spec hash b3e6a7cc9f10b7a0) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'olmo2_mlp' for QuACK's sm90 GEMM."""

from quack.activation import dswiglu, swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import TileStore


# specs/olmo2_mlp.yaml:18: kernel 'gate_up'
@gemm_epilogue(outputs=(TileStore("act", gated=True),), mode="acc_pair")
def coda_gate_up(acc):
    # specs/olmo2_mlp.yaml:21: - {store: acc, to: z1}                  # the pre-activation, saved for dSwiGLU
    # specs/olmo2_mlp.yaml:22: - {swiglu: acc, as: act}                # silu(gate) * up over adjacent column pairs
    acc_g, acc_u = unpack(acc)
    act = swiglu(acc_g, acc_u)
    # specs/olmo2_mlp.yaml:23: - {store: act}
    return {"D": acc, "act": act}


# specs/olmo2_mlp.yaml:24: kernel 'down_proj'
@gemm_epilogue()
def coda_down_proj(acc):
    # specs/olmo2_mlp.yaml:27: - {store: acc, to: d}
    return {"D": acc}


# specs/olmo2_mlp.yaml:48: kernel 'dgrad_down_proj'
@gemm_epilogue(outputs=(TileStore("act_r"),), mode="packed_cd_b16x2")
def coda_dgrad_down_proj(acc, c):
    # specs/olmo2_mlp.yaml:51: - {load_tile: z1}
    z1 = c
    # specs/olmo2_mlp.yaml:52: - {dswiglu: acc, z: z1, as: [dacc, act_r]}  # grad of line 21: {swiglu: acc, as: act}
    z1_g, z1_u = unpack(z1)
    dacc_g, dacc_u, act_r = dswiglu(z1_g, z1_u, acc)
    dacc = pack(dacc_g, dacc_u)
    # specs/olmo2_mlp.yaml:53: - {store: dacc}
    # specs/olmo2_mlp.yaml:54: - {store: act_r}
    return {"D": dacc, "act_r": act_r}


# specs/olmo2_mlp.yaml:55: kernel 'wgrad_down_proj'
@gemm_epilogue()
def coda_wgrad_down_proj(acc):
    # specs/olmo2_mlp.yaml:58: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/olmo2_mlp.yaml:59: kernel 'dgrad_gate_up'
@gemm_epilogue()
def coda_dgrad_gate_up(acc):
    # specs/olmo2_mlp.yaml:62: - {store: acc, to: d_x1}
    return {"D": acc}


# specs/olmo2_mlp.yaml:63: kernel 'wgrad_gate_up'
@gemm_epilogue()
def coda_wgrad_gate_up(acc):
    # specs/olmo2_mlp.yaml:66: - {store: acc, to: d_w_gu}
    return {"D": acc}
