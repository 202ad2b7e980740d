"""Shared math for pair primitives: a tile's adjacent columns (2i, 2i+1) form one pair.

Layout convention (used by every pair primitive and documented in docs/spec-language.md): for
gated MLPs the even column is the gate g and the odd column the up projection u, so the weight
``w_gu`` interleaves gate and up rows (from separate ``gate`` and ``up`` weights:
``torch.stack([gate, up], 1).reshape(2 * F, D)``).
For RoPE the pair (a, b) = (x[2i], x[2i+1]) rotates by theta = pos * freq[i]:
(a, b) -> (a*cos - b*sin, a*sin + b*cos). With ``pairs: half, head_dim: hd`` (Hugging Face's
rotate-half layout) pair j of head h is (x[h*hd + j], x[h*hd + j + hd/2]) with freq[h*hd/2 + j].

Where rotate-half lowers: host steps (:func:`half_host`: a chunk of whole heads reshaped to
[heads, 2, hd/2], so both halves of a head are in registers; head_dim a power of two, Triton's
shapes, else ``no_half_host`` refuses it at ``head_dim``) and GEMM epilogues (:func:`half_lower`):
QuACK 0.6.5's epilogue fn is called on one element (plain) or one adjacent column pair (acc_pair)
at a time, so column i + hd/2 is never in reach of the fn; coda's ``HalfPartner`` op
(``coda_spec/lower/quack_ops/half_partner.py``) hands it ``rotate_half(x)`` as a value operand.
The kernel's prepass fn re-computes x from the raw accumulator (so x must be prepass-computable:
loads and elementwise items, no statistic: ``prepass_of``), the op stashes each epilogue subtile
of x in registers, and the main pass reads the subtile hd/2 columns away, in the same thread's
same registers, which needs whole heads in a CTA tile (tile_N % hd == 0) and epilogue subtiles
inside half a head (epi_N | hd/2): :func:`half_supports` refuses other configs. The rotation is
then elementwise, ``x cos t + rotate_half(x) sin t``, with t from two W-wide row tables (the hi
and lo fp32 halves of each column's frequency over 2 pi: the runtime's ``halves=hd`` and
``turns_hi``/``turns_lo`` transforms), per lane through QuACK's float-float turns-domain sincos.
"""

from __future__ import annotations

import math
from dataclasses import replace

from coda_spec import dims as dimmod
from coda_spec.artifact import Field
from coda_spec.errors import ItemError
from coda_spec.primitives._elementwise import HOST_GELU, HOST_SILU, HOST_TANH
from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    DIM_REF,
    PAIR,
    VALUE_REF,
    Primitive,
    VType,
    double,
    half,
    item_schema,
    need_even,
    need_tile,
)
from coda_spec.primitives.lower_api import NO_PACKED_PREPASS, Val


def split(x):
    return x[:, 0::2], x[:, 1::2]


def join(rt, a, b):
    return rt.torch.stack([a, b], dim=-1).reshape(a.shape[0], 2 * a.shape[1])


def gelu(rt, x):
    return rt.torch.nn.functional.gelu(x, approximate="tanh")


def dgelu(rt, x):
    """d/dx of the tanh-approximated GELU."""
    k = 0.7978845608028654  # sqrt(2 / pi)
    inner = k * (x + 0.044715 * x**3)
    t = rt.torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)


def silu(rt, x):
    return x * rt.torch.sigmoid(x)


def dsilu(rt, x):
    s = rt.torch.sigmoid(x)
    return s + x * s * (1 - s)


ACTS = {"silu": (silu, dsilu), "gelu": (gelu, dgelu)}


def gated_infer(name):
    def infer(tc, op, ins, tensors):
        z = need_tile(ins[name], name, name)
        return (VType("tile", half(need_even(z, name, name))),)

    return infer


def gated_reference(act):
    def reference(rt, op, ins, tensors):
        g, u = split(ins[op.prim])
        return (ACTS[act][0](rt, g) * u,)

    return reference


def dgated_infer(name):
    def infer(tc, op, ins, tensors):
        dy = need_tile(ins[name], name, name)
        z = need_tile(ins["z"], name, "z")
        if z.width != double(dy.width):
            raise ItemError(
                f"{name}: z must be {double(dy.width)} wide (twice the incoming gradient's "
                f"{dy.width}); got {z.width}",
                "z",
                "z is the saved interleaved (gate, up) pre-activation",
            )
        return (VType("tile", z.width), VType("tile", dy.width))

    return infer


def dgated_reference(act):
    def reference(rt, op, ins, tensors):
        dy = ins[op.prim]
        g, u = split(ins["z"])
        f, df = ACTS[act]
        a = f(rt, g)
        return (join(rt, dy * u * df(rt, g), dy * a), a * u)

    return reference


def rope_infer(name):
    def infer(tc, op, ins, tensors):
        x = need_tile(ins[name], name, name)
        w = need_even(x, name, name)
        half_pairs(tc, op, name, w)
        if ins["pos"].kind != "col":
            raise ItemError(
                f"{name}: pos must be a per-row value (load_col), got {ins['pos'].show()}", "pos"
            )
        f = ins["freqs"]
        if f.kind != "row" or f.width != half(w):
            raise ItemError(
                f"{name}: freqs must be a per-column value of width {half(w)} "
                f"(one frequency per pair), got {f.show()}",
                "freqs",
            )
        return (VType("tile", w),)

    return infer


def half_pairs(tc, op, name: str, width) -> int | None:
    """The head size of a rotate-half ``rope`` (``pairs: half``), checked; None for adjacent
    pairs. Raises ItemError (at ``head_dim`` or ``pairs``)."""
    if op.get("pairs", "adjacent") != "half":
        if op.get("head_dim") is not None:
            raise ItemError(
                f"{name}: head_dim is only read with pairs: half", "head_dim", "drop head_dim"
            )
        return None
    if op.get("head_dim") is None:
        raise ItemError(
            f"{name}: pairs: half rotates columns i and i + head_dim/2 of each head; it needs "
            "the head size",
            "pairs",
            "add head_dim: <dim>",
        )
    hd = tc.fold(op.get("head_dim"), "head_dim")
    if not isinstance(hd, int) or hd % 2:
        raise ItemError(f"{name}: head_dim must be a static even size, not {hd}", "head_dim")
    if isinstance(width, int) and width % hd:
        raise ItemError(
            f"{name}: head_dim {hd} does not divide the rotated tile's width {width}",
            "head_dim",
        )
    return int(hd)


def rotate(rt, x, pos, freqs, sign: float, head_dim: int | None = None):
    """RoPE of ``x`` [M, W] by theta = pos * freq, freqs [1, W/2] one per pair: adjacent pairs
    (2i, 2i + 1) use freq i; with ``head_dim`` (rotate-half, Hugging Face's layout) pair j of
    head h is (h * hd + j, h * hd + j + hd/2) and uses freq h * hd/2 + j, so ``freqs`` is
    inv_freq repeated per head in both layouts."""
    theta = pos * freqs * sign
    c, s = rt.torch.cos(theta), rt.torch.sin(theta)
    if head_dim is None:
        a, b = split(x)
        return join(rt, a * c - b * s, a * s + b * c)
    m, w = x.shape[0], x.shape[-1]
    xh = x.reshape(m, w // head_dim, head_dim)
    a, b = xh[..., : head_dim // 2], xh[..., head_dim // 2 :]
    shape = (c.shape[0], w // head_dim, head_dim // 2)
    c, s = c.expand(m, -1).reshape(shape), s.expand(m, -1).reshape(shape)
    return rt.torch.cat([a * c - b * s, a * s + b * c], dim=-1).reshape(m, w)


HALF_HOST_FIX = (
    "use pairs: adjacent and permute the q/k projection rows once at load, as "
    "coda_spec/nn/layout.py does for transformers' weights (rope_order)"
)


def no_half_host(hd) -> str | None:
    """Why a host kernel cannot rotate heads of ``hd`` columns in halves, or None: it reshapes
    a chunk into [heads, 2, hd/2] register tensors, and Triton's tensor shapes are powers of
    two."""
    if isinstance(hd, int) and hd & (hd - 1):
        return (
            f"pairs: half with head_dim {hd} does not lower in a host step: the kernel holds a "
            f"chunk as [heads, 2, head_dim/2] register tensors and Triton's shapes are powers of "
            f"two ({hd} is not)"
        )
    return None


def rope_refusal(op, where, sizes):
    if op.get("pairs", "adjacent") != "half":
        return None
    if where == "packed_pair":
        message, hint = NO_PACKED_PREPASS
        return ItemError(
            f"pairs: half reads x at column i + head_dim/2 through the "
            f"accumulator prepass; {message}",
            "pairs",
            hint,
        )
    if where != "host":
        return None  # the config's part: half_supports
    try:
        hd = op.get("head_dim")
        hd = dimmod.fold(hd, dict(sizes)) if hd is not None else None
    except dimmod.DimError:
        return None  # reported by the typing walk (half_pairs)
    why = no_half_host(hd)
    return None if why is None else ItemError(why, "head_dim", HALF_HOST_FIX)


def half_supports(config, sizes, op) -> str | None:
    """Why ``config`` cannot rotate halves of heads in the epilogue (:func:`half_lower`), or
    None: a CTA tile holds whole heads (tile_N a multiple of head_dim) and each epilogue
    subtile lies in one half of a head (its width, ``epi_n`` or QuACK's gcd(32, tile_N) for a
    16-bit or fp32 output, divides head_dim / 2), so the partner of every element is in the
    same thread's registers (``HalfPartner``)."""
    if op.get("pairs", "adjacent") != "half":
        return None
    try:
        hd = sizes.fold(op.get("head_dim"))
    except dimmod.DimError:
        return None  # the typing walk's (half_pairs)
    if config.tile_n % hd:
        return (
            f"pairs: half needs whole heads in each CTA tile: tile_N = {config.tile_n} is not a "
            f"multiple of head_dim = {hd}"
        )
    epi = config.epi_n or math.gcd(32, config.tile_n)
    if (hd // 2) % epi:
        return (
            f"pairs: half needs each epilogue subtile inside half a head: its {epi} columns do "
            f"not divide head_dim / 2 = {hd // 2}"
        )
    return None


def half_lower(lc, op, sign: float):
    """Rotate-half RoPE in a GEMM epilogue (the module docstring): x cos t + sign *
    rotate_half(x) sin t per lane of the pair, rotate_half(x) from a ``HalfPartner`` operand
    that the prepass fills with x (re-computed there), t per column from the hi/lo turns
    tables of the W/2 frequencies laid out per head as (f, f) halves."""
    hd = lc.fold(op.get("head_dim"))
    name = op.get(op.prim)
    x, pos, freqs = lc.v(name), lc.v(op.get("pos")), lc.v(op.get("freqs"))
    if x.form != "p":
        raise lc.error("pairs: half needs the rotated tile as adjacent-column pairs (acc_pair)")
    if freqs.form != "deferred":
        raise lc.error("freqs must be a load_row of a W/2 frequency vector")
    if lc.mode == "packed_cd_b16x2":
        raise lc.error(*NO_PACKED_PREPASS)
    if not isinstance(hd, int) or lc.tile[1] % hd:
        raise lc.error(f"pairs: half needs tile_N {lc.tile[1]} to be a multiple of head_dim {hd}")
    base = lc.ident(op.results[0])
    rot = lc.fresh(f"{base}_half")
    lc.prepass_input(op, rot, lc.prepass_value(name).expr)
    glob = f"_hp_{lc.step_name}_{rot}"
    lc.global_line(
        f"# {rot}: rotate_half({name}), heads of {hd} columns\n{glob} = {lc.op('HalfPartner', rot)}"
    )
    lc.operand(rot, glob, Field(rot, op.results[0], "group_stat", (int(hd),), "int32"))
    short = lc.info(freqs.tensor).shape[0] * 2 != lc.width
    steps = ("repeat+" if short else "") + f"halves={hd}+turns_"
    tables = []
    for part in ("hi", "lo"):
        t = lc.fresh(f"{lc.ident(freqs.tensor)}_{part}")
        f = Field(t, freqs.tensor, "row", (1, lc.width), "fp32", steps + part)
        lc.operand(t, lc.op("RowVecLoad", t), f)
        tables.append(lc.lanes(Val(t, "p")))
    sin, cos = [], []
    for k, (hi, lo) in enumerate(zip(*tables, strict=True)):
        f = lc.fresh(f"{base}_f{k}")
        sin.append(lc.fresh(f"{base}_sin{k}"))
        cos.append(lc.fresh(f"{base}_cos{k}"))
        lc.line(f"{f} = {lc.call('pack', hi, lo)}")  # lane k's float-float frequency
        angle = lc.call("angle_turns", pos.expr, f)
        lc.line(f"{sin[k]}, {cos[k]} = {lc.call('sincos_turns', '*' + angle)}")
    c, s = lc.fresh(f"{base}_cos"), lc.fresh(f"{base}_sin")
    lc.line(f"{c} = {lc.call('pack', *cos)}")
    lc.line(f"{s} = {lc.call('pack', *sin)}")
    turn = "+" if sign > 0 else "-"  # Pair arithmetic is lane-wise
    lc.let(op.results[0], f"{x.expr} * {c} {turn} {rot} * {s}", "p")


def rope_bakes(op, where):
    """A rotate-half host kernel compiles head_dim into its chunk shapes ([heads, 2, hd/2])."""
    hd = op.get("head_dim") if op.get("pairs") == "half" else None
    return (hd,) if isinstance(hd, str) else ()


def gated_supports(config, sizes, op):
    """QuACK's sm90 acc_pair epilogue writes the half-width output with a tile_N / 2 store."""
    if config.tile_n % 32:
        return f"a half-width (gated) output needs tile_N divisible by 32, not {config.tile_n}"
    return None


def rope_lower(sign: float):
    """Lowering of rope (sign +1) and rope_bwd (-1): QuACK's float-float turns-domain sincos."""

    def lower(lc, op):
        if op.get("pairs") == "half":
            half_lower(lc, op, sign)
            return
        x, pos, freqs = lc.v(op.get(op.prim)), lc.v(op.get("pos")), lc.v(op.get("freqs"))
        if freqs.form != "deferred":
            raise lc.error("freqs must be a load_row of a W/2 frequency vector")
        load = lc.op("RowVecLoad", lc.ident(freqs.tensor))
        # typed W/2 wide: a shorter tensor is a per-head table, read repeated (load_row repeat)
        short = lc.info(freqs.tensor).shape[0] * 2 != lc.width
        transform = "repeat+turns_table" if short else "turns_table"
        table = lc.param(freqs.tensor, "row", load, (1, lc.width), "fp32", transform)
        a, b = lc.lanes(x)
        base = lc.ident(op.results[0])
        s, c = lc.fresh(f"{base}_sin"), lc.fresh(f"{base}_cos")
        angle = lc.call("angle_turns", pos.expr, table)
        lc.line(f"{s}, {c} = {lc.call('sincos_turns', '*' + angle)}")
        if sign > 0:
            lc.let_pair(op.results[0], f"{a} * {c} - {b} * {s}", f"{a} * {s} + {b} * {c}")
        else:
            lc.let_pair(op.results[0], f"{a} * {c} + {b} * {s}", f"{b} * {c} - {a} * {s}")

    return lower


def rope_host(sign: float):
    """Host lowering of rope (sign +1) and rope_bwd (-1). The rotated tile has lanes (even, odd)
    per pair; ``freqs`` one lane per pair. theta = pos * freq as in :func:`rotate`; rotating by
    -theta uses cos(-t) = cos(t), sin(-t) = -sin(t). ``tl.cos``/``tl.sin`` compile to libdevice's
    accurate cosf/sinf (full range reduction: theta reaches thousands of radians). Rotate-half
    pairs (``pairs: half``): :func:`half_host`."""

    def host(hc, op):
        x = hc.value(op.get(op.prim))
        pos, freqs = hc.value(op.get("pos")), hc.value(op.get("freqs"))
        n = len(x.lanes)
        if n % 2:
            raise hc.error("needs the rotated tile as (even, odd) lanes")
        f = hc.spread(freqs, n // 2)
        base = hc.ident(op.results[0])
        if op.get("pairs") == "half":
            half_host(hc, op, x, pos.expr, f, sign)
            return
        out = []
        for k in range(n // 2):
            a, b = x.lanes[2 * k], x.lanes[2 * k + 1]
            theta = hc.fresh(f"{base}_theta")
            c, s = hc.fresh(f"{base}_cos"), hc.fresh(f"{base}_sin")
            hc.line(f"{theta} = {pos.expr} * {f[k]}")
            hc.line(f"{c} = tl.cos({theta})")
            hc.line(f"{s} = tl.sin({theta})")
            if sign > 0:
                out += [f"{a} * {c} - {b} * {s}", f"{a} * {s} + {b} * {c}"]
            else:
                out += [f"{a} * {c} + {b} * {s}", f"{b} * {c} - {a} * {s}"]
        hc.let(op.results[0], out)

    return host


def half_host(hc, op, x, pos: str, f: tuple, sign: float) -> None:
    """Rotate-half RoPE in a host kernel, per chunk rather than per lane.

    The slot layout stays the one every host step shares (``lower/host_kernel.py``: the tile's
    L lanes hold adjacent columns, the W/2 frequencies L/2 lanes), so no other item's text
    changes. Columns i and i + hd/2 of a head are in different slots, but both in registers
    when the chunk holds whole heads: a chunk is L * BLOCK contiguous columns starting at a
    multiple of L * BLOCK, so with hd a power of two dividing L * BLOCK (checked here; powers
    of two by ``no_half_host``) every head lies in one chunk, and the row's width, a multiple
    of hd, leaves the masked last chunk whole heads too. The chunk (``hc.join`` of the lanes)
    is reshaped to [heads, 2, hd/2] (halves of each head) and permuted to [heads, hd/2, 2], so
    ``tl.split`` gives the pair's two halves a, b [heads, hd/2]; the chunk's frequencies,
    L/2 * BLOCK contiguous pairs (pair j of head h is W/2 column h * hd/2 + j, :func:`rotate`),
    reshape to the same [heads, hd/2]. The rotated halves are joined, permuted back and
    reshaped to the flat chunk, which ``let_block`` splits into lanes again (a register
    shuffle, no memory traffic)."""
    hd = int(hc.constant(op.get("head_dim")))
    n = len(x.lanes)
    name = op.get(op.prim)
    if (n * hc.block) % hd:
        raise hc.error(
            f"pairs: half needs each chunk to hold whole heads: a chunk of BLOCK = {hc.block} "
            f"slots holds {n * hc.block} columns of '{name}', not a multiple of head_dim {hd}",
            hint=f"build with a block of at least {max(1, hd // n)} slots",
        )
    base = hc.ident(op.results[0])
    heads, h2 = f"{n} * BLOCK // {hd}", hd // 2
    xs, a, b = hc.fresh(f"{base}_heads"), hc.fresh(f"{base}_a"), hc.fresh(f"{base}_b")
    theta = hc.fresh(f"{base}_theta")
    c, s = hc.fresh(f"{base}_cos"), hc.fresh(f"{base}_sin")
    flat = hc.fresh(f"{base}_chunk")
    hc.line(f"{xs} = tl.permute(tl.reshape({hc.join(x.lanes)}, [{heads}, 2, {h2}]), (0, 2, 1))")
    hc.line(f"{a}, {b} = tl.split({xs})")
    hc.line(f"{theta} = {pos} * tl.reshape({hc.join(f)}, [{heads}, {h2}])")
    hc.line(f"{c} = tl.cos({theta})")
    hc.line(f"{s} = tl.sin({theta})")
    if sign > 0:
        first, second = f"{a} * {c} - {b} * {s}", f"{a} * {s} + {b} * {c}"
    else:
        first, second = f"{a} * {c} + {b} * {s}", f"{b} * {c} - {a} * {s}"
    joined = f"tl.join({first}, {second})"
    hc.line(f"{flat} = tl.reshape(tl.permute({joined}, (0, 2, 1)), [{n} * BLOCK])")
    hc.let_block(op.results[0], flat)


def gate_lanes(hc, z) -> list:
    """The (gate, up) lane pairs of an interleaved gate/up tile (host kernels)."""
    if len(z.lanes) % 2:
        raise hc.error("needs the gate/up tile as (even, odd) lanes")
    return [(z.lanes[2 * k], z.lanes[2 * k + 1]) for k in range(len(z.lanes) // 2)]


def host_act(hc, act: str, g: str, base: str, grad: bool) -> tuple[str, str | None]:
    """Emit act(g) (and act'(g) when ``grad``) as named temporaries, by the formulas of
    :func:`silu`/:func:`dsilu` and :func:`gelu`/:func:`dgelu`; returns their names."""

    a = hc.fresh(f"{base}_act")
    if not grad:
        hc.line(f"{a} = {(HOST_SILU if act == 'silu' else HOST_GELU).format(x=g)}")
        return a, None
    da = hc.fresh(f"{base}_dact")
    if act == "silu":
        s = hc.fresh(f"{base}_sig")
        hc.line(f"{s} = tl.sigmoid({g})")
        hc.line(f"{a} = {g} * {s}")
        hc.line(f"{da} = {s} + {g} * {s} * (1.0 - {s})")
        return a, da
    k = 0.7978845608028654  # sqrt(2 / pi)
    t = hc.fresh(f"{base}_tanh")
    inner = f"{k!r} * ({g} + 0.044715 * {g} * {g} * {g})"
    hc.line(f"{t} = {HOST_TANH.format(x=f'({inner})')}")
    hc.line(f"{a} = 0.5 * {g} * (1.0 + {t})")
    hc.line(
        f"{da} = 0.5 * (1.0 + {t}) + 0.5 * {g} * (1.0 - {t} * {t}) * {k!r} "
        f"* (1.0 + 3 * 0.044715 * {g} * {g})"
    )
    return a, da


def gated_host(act: str):
    """Host lowering of swiglu / geglu: act(g) * u per (gate, up) lane pair; half as many lanes."""

    def host(hc, op):
        z = hc.value(op.get(op.prim))
        base = hc.ident(op.results[0])
        out = []
        for g, u in gate_lanes(hc, z):
            a, _ = host_act(hc, act, g, base, grad=False)
            out.append(f"{a} * {u}")
        hc.let(op.results[0], out)

    return host


def dgated_host(act: str):
    """Host lowering of dswiglu / dgeglu (:func:`dgated_reference`): per (gate, up) lane pair
    of z and lane of dy, dz = (dy * u * act'(g), dy * act(g)) interleaved, out = act(g) * u."""

    def host(hc, op):
        dy, z = hc.value(op.get(op.prim)), hc.value(op.get("z"))
        pairs = gate_lanes(hc, z)
        d = hc.spread(dy, len(pairs))
        dz_name, out_name = op.results
        base = hc.ident(out_name)
        dz, out = [], []
        for (g, u), dk in zip(pairs, d, strict=True):
            a, da = host_act(hc, act, g, base, grad=True)
            dz += [f"{dk} * {u} * {da}", f"{dk} * {a}"]
            out.append(f"{a} * {u}")
        hc.let(dz_name, dz)
        hc.let(out_name, out)

    return host


def rope_primitive(name: str, sign: float, summary: str, example: str, sibling: str):
    """The rope / rope_bwd primitive (they differ only in the rotation's sign)."""

    props = {
        "pos": VALUE_REF,
        "freqs": VALUE_REF,
        "pairs": {
            "enum": ["adjacent", "half"],
            "description": "adjacent: pairs (2i, 2i+1), Llama/Meta's layout (the default); "
            "half: (i, i + head_dim/2) within each head, Hugging Face's rotate_half",
        },
        "head_dim": {**DIM_REF, "description": "the head size (with pairs: half)"},
    }

    def reference(rt, op, ins, tensors):
        hd = rt.fold(op.get("head_dim")) if op.get("pairs") == "half" else None
        return (rotate(rt, ins[name], ins["pos"], ins["freqs"], sign, hd),)

    def mutants(op):
        if op.get("pairs") != "half":
            return (op.with_prim(sibling),)
        adjacent = tuple(a for a in op.args if a[0] not in ("pairs", "head_dim"))
        return (op.with_prim(sibling), replace(op, args=adjacent))

    return ranged(
        Primitive(
            name=name,
            family=PAIR,
            summary=summary,
            example=example,
            schema=item_schema(name, VALUE_REF, props, required=("pos", "freqs")),
            operands=(name, "pos", "freqs"),
            infer=rope_infer(name),
            reference=reference,
            mutants=mutants,
            lower=rope_lower(sign),
            host=rope_host(sign),
            item_refusal=rope_refusal,
            bakes=rope_bakes,
            supports=half_supports,
            prepass_of=lambda op: (op.get(name),) if op.get("pairs") == "half" else (),
            lowers_note="pairs: half needs whole heads in a CTA tile",
        )
    )


# quack.activation's gated backward: (x, y, dout) -> (dx, dy, out), fp32 lanes in and out.
DGATED = {"silu": "dswiglu", "gelu": "dgeglu"}


def dgated_lower(act: str):
    """Lowering of dswiglu / dgeglu in packed-pair mode (z is the 16-bit C operand), as QuACK's
    own ``dswiglu_dpreact_mod``: ``g, u = unpack(z)``, ``dg, du, out = dswiglu(g, u, dy)``,
    ``dz = pack(dg, du)``; dz's lanes stay named for a later reader (a row dot of z and dz)."""

    def lower(lc, op):
        dy = lc.vs(op.get(op.prim))
        if dy.form == "p":
            raise lc.error("the incoming gradient must be one value per (g, u) pair")
        g, u = lc.lanes(lc.v(op.get("z")), names=("g", "u"))
        dz, out = op.results
        dg, du = lc.fresh(f"{lc.ident(dz)}_g"), lc.fresh(f"{lc.ident(dz)}_u")
        h = lc.ident(out)
        lc.line(f"{dg}, {du}, {h} = {lc.call(DGATED[act], g, u, dy.expr)}")
        lc.bind(out, h, "s")
        lc.let_pair(dz, dg, du)

    return lower


def dgated_primitive(name: str, act: str, summary: str, example: str, sibling: str):
    """The dswiglu / dgeglu primitive (they differ only in the activation)."""

    return Primitive(
        name=name,
        family=PAIR,
        summary=summary,
        example=example,
        schema=item_schema(name, VALUE_REF, {"z": VALUE_REF}, required=("z",), result="list"),
        operands=(name, "z"),
        results="many",
        infer=dgated_infer(name),
        reference=dgated_reference(act),
        mutants=lambda op: (op.with_prim(sibling),),
        lower=dgated_lower(act),
        host=dgated_host(act),
    )
