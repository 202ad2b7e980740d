# Generated from specs/gemma3_mlp.yaml (spec hash 6ff42bb340d44651) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'gemma3_mlp' for QuACK's sm90 GEMM."""

from quack.activation import dgeglu, geglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import TileStore


# specs/gemma3_mlp.yaml:19: kernel 'gate_up_geglu'
@gemm_epilogue(outputs=(TileStore("act", gated=True),), mode="acc_pair")
def coda_gate_up_geglu(acc):
    # specs/gemma3_mlp.yaml:22: - {store: acc, to: z}                   # saved pre-activation (for dGeGLU)
    # specs/gemma3_mlp.yaml:23: - {geglu: acc, as: act}                 # gelu_tanh(gate) * up on adjacent pairs, F wide
    acc_g, acc_u = unpack(acc)
    act = geglu(acc_g, acc_u)
    # specs/gemma3_mlp.yaml:24: - {store: act}
    return {"D": acc, "act": act}


# specs/gemma3_mlp.yaml:25: kernel 'down_proj'
@gemm_epilogue()
def coda_down_proj(acc):
    # specs/gemma3_mlp.yaml:28: - {store: acc, to: d}
    return {"D": acc}


# specs/gemma3_mlp.yaml:51: kernel 'dgrad_down_proj'
@gemm_epilogue(outputs=(TileStore("act_r"),), mode="packed_cd_b16x2")
def coda_dgrad_down_proj(acc, c):
    # specs/gemma3_mlp.yaml:54: - {load_tile: z}
    z = c
    # specs/gemma3_mlp.yaml:55: - {dgeglu: acc, z: z, as: [dacc, act_r]}  # grad of line 23: {geglu: acc, as: act}
    z_g, z_u = unpack(z)
    dacc_g, dacc_u, act_r = dgeglu(z_g, z_u, acc)
    dacc = pack(dacc_g, dacc_u)
    # specs/gemma3_mlp.yaml:56: - {store: dacc}
    # specs/gemma3_mlp.yaml:57: - {store: act_r}
    return {"D": dacc, "act_r": act_r}


# specs/gemma3_mlp.yaml:58: kernel 'wgrad_down_proj'
@gemm_epilogue()
def coda_wgrad_down_proj(acc):
    # specs/gemma3_mlp.yaml:61: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/gemma3_mlp.yaml:62: kernel 'dgrad_gate_up_geglu'
@gemm_epilogue()
def coda_dgrad_gate_up_geglu(acc):
    # specs/gemma3_mlp.yaml:65: - {store: acc, to: d_hn}
    return {"D": acc}


# specs/gemma3_mlp.yaml:66: kernel 'wgrad_gate_up_geglu'
@gemm_epilogue()
def coda_wgrad_gate_up_geglu(acc):
    # specs/gemma3_mlp.yaml:69: - {store: acc, to: d_w_gu}
    return {"D": acc}
