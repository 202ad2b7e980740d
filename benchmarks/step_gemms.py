"""Every GEMM kernel of a real Llama training step, and the sustained ruler's prediction of it.

    python3 benchmarks/step_gemms.py --shape 1b-2x4096 --modes coda,hf-compile-nomask,hf \\
        --out gemms.json --markdown gemms.md

Per mode (``benchmarks/train_step.py``'s modes and models, each in its own process):
``--warmup`` steps, ``--steps`` timed steps (the step's ms: their median; SM clock and board
power sampled by ``coda bench``'s sampler), then ``--profile-steps`` steps under torch.profiler
(``record_shapes=True``) with the clock sampled again. Every CUDA kernel of the profiled steps is
classified by ``train_step.family``; each GEMM kernel is listed with:

* **kernel**: coda's as ``chain/step`` (the CuTe-DSL kernel's name holds its GEMM class,
  ``GemmMod_coda_<step>_<16-hex hash>_...``, and the hash is the one in the build's
  ``<symbol>.compiled.json``: :func:`coda_key`, :func:`chain_classes`), with the config it ran
  (``Chain.selected_variants``); cuBLAS's by its kernel name and the aten op that launched it.
* **M, N, K**: coda's from the chain's plan at the step's M (``Chain.gemm_extents``); cuBLAS's
  from the launching aten op's input shapes (:func:`aten_mnk`: ``mm``, ``addmm``, ``bmm``,
  ``baddbmm``; a batch count for the batched ones).
* **calls/step, µs/call, ms/step, TFLOP/s** (2·M·N·K·batch per call over its mean time).

Totals per mode: the step's ms (timed, unprofiled), GEMM ms, attention ms and the rest (step ms
less both: the other kernels and the GPU's idle time), and every kernel family's ms.

**The prediction** (coda modes, ``--predict``): a separate process loads the model's chains at
the step's dims (``coda_spec.nn.llama.chain_ops``, the same tune table), draws their inputs at
the step's M as ``coda bench`` does (``coda_spec.bench.driver.draw``) and times every kernel step
alone (``Chain.steps_fn``) with ``coda bench``'s rulers (``coda_spec.bench.driver.Options``):
``sustained`` (``--rounds`` streams of ``--sustain-s`` s each at the power cap, clock and power
sampled) and, with ``--predict both``, ``isolated`` (20 L2-flushed calls). ``--predict replay``
times them instead by replaying each chain's part of the step as the model runs it, attention
included (``benchmarks/role_replay.py``: the step's power mix, one role at a time); ``all``: the
three rulers. Then, per ruler
(:func:`predict`)::

    predicted = sum over coda's GEMM kernels (ruler ms x calls per step) + non-GEMM
    non-GEMM  = measured step ms - measured GEMM ms (the profiled steps' GEMM kernels)
    ratio     = predicted / measured step ms

so the ratio tests the ruler's GEMM times against the GEMMs' time inside the step (issue 32's
target: within 3% at the 1B shape). A GEMM kernel the ruler has no time for (not a coda chain's)
counts at its measured time and is listed under ``unpredicted``.

Output: the JSON (``--out``, rewritten after every mode: a killed call keeps what ran) and a
markdown report (stdout, and ``--markdown PATH``); progress on stderr. No GPU: exit 1 with a
message (the child says ``no CUDA GPU``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import time
import types
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: train_step
import train_step as T  # noqa: E402
from role_replay import role_fns, time_roles  # noqa: E402

CODA_GEMM = re.compile(r"GemmMod_coda_(\w+?)_([0-9a-f]{16})_")
RULERS = ("sustained", "isolated", "replay")
# sustained; sustained and isolated; replay (benchmarks/role_replay.py); all three; none
PREDICT = ("sustained", "both", "replay", "all", "none")


def say(msg: str) -> None:
    print(f"[step_gemms] {msg}", file=sys.stderr, flush=True)


# -- names and shapes (pure) ---------------------------------------------------------------------
def coda_key(kernel: str) -> tuple[str, str] | None:
    """(step, 16-hex hash) of a coda GEMM kernel's name, None for any other kernel."""
    m = CODA_GEMM.search(kernel)
    return (m.group(1), m.group(2)) if m else None


def chain_classes(chain) -> dict:
    """``{hash: step}`` of a loaded chain's GEMM kernels, from the build's
    ``<symbol>.compiled.json`` (every variant and the accumulating flavour share the hash)."""
    out = {}
    for step in chain.manifest.kernel_steps():
        for v in step.variants:
            path = Path(chain.directory, f"{v.symbol}.compiled.json")
            if not path.exists():
                continue
            key = coda_key(json.loads(path.read_text()).get("gemm_class", "") + "_")
            if key is not None:
                out[key[1]] = step.name
    return out


def aten_mnk(op: str, shapes) -> tuple[int, int, int, int] | None:
    """(M, N, K, batch) of the aten op that launched a GEMM, from its input shapes; None when
    the op or its shapes are not a GEMM's."""
    try:
        if op == "aten::mm":
            (m, k), (_, n) = shapes[0], shapes[1]
            return m, n, k, 1
        if op in ("aten::addmm", "aten::_addmm_activation"):
            (m, k), (_, n) = shapes[1], shapes[2]
            return m, n, k, 1
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return m, n, k, b
        if op == "aten::baddbmm":
            (b, m, k), (_, _, n) = shapes[1], shapes[2]
            return m, n, k, b
    except (IndexError, TypeError, ValueError):
        return None
    return None


def merge_records(attached: list, device: list) -> list:
    """Every kernel launch once: ``attached`` (name, µs, aten op, input shapes) are launches
    torch.profiler tied to the op that made them; ``device`` (name, µs) every kernel the device
    ran. A kernel's device launches beyond its attached ones (coda's, launched outside aten) are
    added with no op, at their mean remaining time."""
    n_att, us_att = Counter(), Counter()
    for name, us, _, _ in attached:
        n_att[name] += 1
        us_att[name] += us
    n_dev, us_dev = Counter(), Counter()
    for name, us in device:
        n_dev[name] += 1
        us_dev[name] += us
    out = [{"name": n, "us": us, "op": op, "shapes": shapes} for n, us, op, shapes in attached]
    for name, count in n_dev.items():
        extra = count - n_att[name]
        if extra > 0:
            each = max(us_dev[name] - us_att[name], 0.0) / extra
            out += [{"name": name, "us": each, "op": "", "shapes": None}] * extra
    return out


def gemm_rows(records: list, steps: int, family, resolve) -> list:
    """One row per GEMM kernel and shape: ``records`` from :func:`merge_records` over
    ``steps`` profiled steps; ``family(name)`` the kernel's family; ``resolve(name)`` a coda
    kernel's ``{"chain", "step", "config", "mnk"}`` or None. Rows by ms per step, largest first."""
    groups: dict = defaultdict(list)
    info: dict = {}
    for r in records:
        if family(r["name"]) != "GEMM":
            continue
        coda = resolve(r["name"])
        if coda is not None:
            key = (f"{coda['chain']}/{coda['step']}", tuple(coda["mnk"]) + (1,))
            info[key] = {"kernel": key[0], "config": coda["config"], "source": "coda"}
        else:
            mnk = aten_mnk(r["op"], r["shapes"])
            key = (r["name"], mnk)
            info[key] = {"kernel": r["name"], "op": r["op"], "source": "cuBLAS/aten"}
        groups[key].append(r["us"])
    rows = []
    for key, us in groups.items():
        mnk = key[1]
        flops = None if mnk is None else 2.0 * mnk[0] * mnk[1] * mnk[2] * mnk[3]
        per_call = statistics.fmean(us)
        rows.append(
            {
                **info[key],
                "M": None if mnk is None else mnk[0],
                "N": None if mnk is None else mnk[1],
                "K": None if mnk is None else mnk[2],
                "batch": None if mnk is None else mnk[3],
                "calls_per_step": len(us) / steps,
                "us_per_call": round(per_call, 2),
                "ms_per_step": round(sum(us) / steps / 1e3, 3),
                "tflops": None if flops is None else round(flops / per_call / 1e6, 1),
            }
        )
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def totals(records: list, steps: int, family, step_ms: float) -> dict:
    """ms per step by kernel family, and the step's GEMM, attention and rest (step ms less
    GEMM and attention: other kernels and idle time)."""
    fam: dict = defaultdict(float)
    for r in records:
        fam[family(r["name"])] += r["us"] / steps / 1e3
    by = T.breakdown(fam)
    rest = step_ms - by["GEMM"] - by["attention"]
    return {
        "step_ms": step_ms,
        "gemm_ms": by["GEMM"],
        "attention_ms": by["attention"],
        "rest_ms": round(rest, 2),
        "families_ms": by,
    }


def predict(rows: list, ruler: dict, step_ms: float, which: str) -> dict:
    """The step predicted from ``which`` ruler's kernel times (``ruler``: ``{"chain/step":
    {which: ms}}``): its GEMM kernels at ruler ms x calls per step (a kernel without a ruler
    time at its measured time, listed in ``unpredicted``) plus the measured non-GEMM time."""
    measured_gemm = sum(r["ms_per_step"] for r in rows)
    predicted_gemm, missing = 0.0, []
    for r in rows:
        ms = (ruler.get(r["kernel"]) or {}).get(which)
        if ms is None:
            predicted_gemm += r["ms_per_step"]
            missing.append(r["kernel"])
        else:
            predicted_gemm += ms * r["calls_per_step"]
    non_gemm = step_ms - measured_gemm
    predicted = predicted_gemm + non_gemm
    return {
        "ruler": which,
        "predicted_gemm_ms": round(predicted_gemm, 2),
        "measured_gemm_ms": round(measured_gemm, 2),
        "non_gemm_ms": round(non_gemm, 2),
        "predicted_ms": round(predicted, 2),
        "measured_ms": round(step_ms, 2),
        "ratio": round(predicted / step_ms, 4),
        "unpredicted": list(dict.fromkeys(missing)),
    }


# -- the report (pure) ---------------------------------------------------------------------------
def _f(x, spec: str = "") -> str:
    return "" if x is None else format(x, spec)


def render(doc: dict) -> str:
    """The markdown report of a JSON document this script writes."""
    out = [f"# GEMM kernels of one step: {doc['shape']} ({doc['kind']})", ""]
    for res in doc["modes"]:
        mode = res["mode"]
        if "error" in res:
            err = res["error"] if isinstance(res["error"], str) else " / ".join(res["error"])
            out += [f"## {mode}: failed", "", f"    {err}", ""]
            continue
        t = res["totals"]
        out += [
            f"## {mode}",
            "",
            f"Step {t['step_ms']:.1f} ms (median of {res['steps']} timed steps, SM "
            f"{_f(res.get('sm_mhz'))} MHz, {_f(res.get('watts'), '.0f')} W); profiled steps: "
            f"SM {_f(res.get('sm_mhz_profiled'))} MHz. GEMM {t['gemm_ms']:.1f} ms, attention "
            f"{t['attention_ms']:.1f} ms, rest {t['rest_ms']:.1f} ms per step.",
            "",
        ]
        ruler = res.get("ruler") or {}
        head = ["kernel", "config / op", "M", "N", "K", "calls/step", "µs/call", "ms/step"]
        head += ["TFLOP/s", "sustained µs", "sustained MHz", "isolated µs", "replay µs"]
        head += ["replay MHz"]
        out += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for r in res["gemms"]:
            k = ruler.get(r["kernel"]) or {}
            name = r["kernel"] if r["source"] == "coda" else r["kernel"][:70]
            batch = f" (x{r['batch']})" if r.get("batch") and r["batch"] > 1 else ""
            cells = [
                name,
                r.get("config") or r.get("op") or "",
                _f(r["M"]),
                _f(r["N"]),
                _f(r["K"]) + batch,
                _f(r["calls_per_step"], "g"),
                _f(r["us_per_call"], ".1f"),
                _f(r["ms_per_step"], ".2f"),
                _f(r["tflops"], ".0f"),
                _f(None if k.get("sustained") is None else k["sustained"] * 1e3, ".1f"),
                _f(k.get("sustained_mhz"), ".0f"),
                _f(None if k.get("isolated") is None else k["isolated"] * 1e3, ".1f"),
                _f(None if k.get("replay") is None else k["replay"] * 1e3, ".1f"),
                _f(k.get("replay_mhz"), ".0f"),
            ]
            out.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
        out.append("")
        for p in res.get("predictions", []):
            miss = f"; unpredicted: {', '.join(p['unpredicted'])}" if p["unpredicted"] else ""
            out.append(
                f"- **{p['ruler']} ruler**: predicted {p['predicted_ms']:.1f} ms "
                f"(GEMMs {p['predicted_gemm_ms']:.1f} + non-GEMM {p['non_gemm_ms']:.1f}) / "
                f"measured {p['measured_ms']:.1f} ms = **{p['ratio']:.3f}** (in-step GEMMs "
                f"{p['measured_gemm_ms']:.1f} ms){miss}"
            )
        if res.get("ruler_error"):
            out.append(f"- ruler failed: {res['ruler_error']}")
        for k, why in res.get("ruler_failed", {}).items():
            out.append(f"- ruler could not time {k}: {why}")
        out.append("")
    return "\n".join(out)


# -- the GPU side (children) ---------------------------------------------------------------------
def _sizes(chain, m: int) -> dict:
    """The sizes ``chain`` is called at in a step of ``m`` tokens: the LM head runs in row chunks
    (``coda_spec.nn.llama.lm_head_chunk``), every other chain over all ``m`` rows."""
    from coda_spec.nn.llama import lm_head_chunk

    static = chain.manifest.static
    if chain.name.startswith("llama3_lm_head"):
        m = lm_head_chunk(m, static["V"])
    return {**static, chain.manifest.dynamic: m}


def coda_resolver(model, m: int):
    """``resolve(kernel name)`` for a coda model's GEMM kernels at M = ``m`` (None otherwise)."""
    by_hash = {}
    for op in getattr(model, "chains", {}).values():
        chain = op.chain
        sizes = _sizes(chain, m)
        picked = chain.selected_variants(sizes)
        steps = {s.name: s for s in chain.manifest.kernel_steps()}
        for h, step in chain_classes(chain).items():
            mnk = chain.gemm_extents(steps[step], sizes)
            by_hash[h] = {"chain": chain.name, "step": step, "config": picked[step], "mnk": mnk}

    def resolve(name: str):
        key = coda_key(name)
        return None if key is None else by_hash.get(key[1])

    return resolve


def profile_child(args) -> dict:
    import torch

    from coda_spec.bench.timing import telemetry

    T.need_gpu("step_gemms")
    cfg, model, _, one_step, _, _, tuned = T.setup(args)
    _, b, s = T.SHAPES[args.shape]
    for _ in range(max(args.warmup, 1)):
        one_step()
    torch.cuda.synchronize()
    sampler = T.open_telemetry()
    try:
        times, mhz, watts, _ = T.timed_steps(one_step, args.steps, sampler)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        sampler.start()
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            for _ in range(args.profile_steps):
                one_step()
            torch.cuda.synchronize()
        mhz_prof, _ = telemetry(sampler.stop(), 0.0)
    finally:
        sampler.close()
    cuda = torch.autograd.DeviceType.CUDA
    attached, device = [], []
    for ev in prof.events():
        if ev.device_type == cuda:
            device.append((ev.name, ev.time_range.elapsed_us()))
        else:
            for k in ev.kernels:
                attached.append((k.name, k.duration, ev.name, ev.input_shapes))
    records = merge_records(attached, device)
    symbols = T.coda_symbols(model)
    fam = lambda name: T.family(name, symbols)  # noqa: E731
    step_ms = round(statistics.median(times), 2)
    return {
        "mode": args.mode,
        "steps": args.steps,
        "profile_steps": args.profile_steps,
        "sm_mhz": None if mhz is None else round(mhz),
        "watts": None if watts is None else round(watts, 1),
        "sm_mhz_profiled": None if mhz_prof is None else round(mhz_prof),
        "telemetry": sampler.source,
        "tuned": None if tuned is None else str(tuned),
        "totals": totals(records, args.profile_steps, fam, step_ms),
        "gemms": gemm_rows(records, args.profile_steps, fam, coda_resolver(model, b * s)),
    }


def ruler_child(args) -> dict:
    """Every kernel step of the mode's chains at the step's dims and M, by the rulers."""

    from coda_spec.bench.driver import Options, device_ids, draw
    from coda_spec.bench.timing import ISOLATED, CudaClock, open_sampler
    from coda_spec.nn.llama import LlamaShape, chain_ops

    T.need_gpu("step_gemms")
    base, table = T.split_mode(args.mode)
    tuned = T.tuned_arg(table, args.tuned, args.tuned_old)
    cfg = T.config(args.shape, args.layers)
    _, b, s = T.SHAPES[args.shape]
    ops = chain_ops(LlamaShape.of(cfg), args.builds, tuned, recompute="recompute" in base)
    opts = Options(rounds=args.rounds, warmup=2, sustain_s=args.sustain_s, kernels=True)
    cands, keep, drawn = {}, [], {}
    for role, op in ops.items():
        chain = op.chain
        sizes = _sizes(chain, b * s)
        _, inputs, grads = draw(chain, chain.checked(), sizes, opts)
        if args.predict in ("replay", "all"):  # the replay takes every role at the step's M
            full = {**sizes, chain.manifest.dynamic: b * s}
            drawn[role] = inputs if full == sizes else draw(chain, chain.checked(), full, opts)[1]
        env = chain.run(dict(inputs), grads=dict(grads) if grads else None)
        keep.append(env)
        for st in chain.manifest.kernel_steps():
            if chain.launches(st, sizes):
                cands[f"{chain.name}/{st.name}"] = chain.steps_fn(env, sizes, [st])
    clock = CudaClock()
    sampler = open_sampler(*device_ids())
    out, failed = {}, {}
    try:
        if args.predict in ("replay", "all"):
            fns = role_fns(ops, LlamaShape.of(cfg), b, s, drawn)
            model = types.SimpleNamespace(chains=ops)
            got = time_roles(fns, coda_resolver(model, b * s), args.sustain_s, 3, sampler, say)
            for k, v in got.items():
                out.setdefault(k, {}).update(v)
        if args.predict != "replay":
            say(f"ruler: {len(cands)} kernels, sustained ({sampler.source or 'no telemetry'})")
            stats, failed, _ = opts.time(cands, clock, sampler, progress=say)
            for k, st in stats.items():
                out.setdefault(k, {}).update(
                    sustained=st.median_ms, sustained_mhz=st.clock_mhz, sustained_w=st.watts
                )
    finally:
        sampler.close()
    if args.predict in ("both", "all"):
        iso = Options(ruler=ISOLATED, rounds=20, warmup=2)
        istats, ifailed, _ = iso.time(cands, clock, None, progress=say)
        for k, st in istats.items():
            out.setdefault(k, {})["isolated"] = st.median_ms
        failed.update({k: f"isolated: {v}" for k, v in ifailed.items()})
    return {"mode": f"ruler:{args.mode}", "kernels": out, "failed": failed}


# -- the parent ----------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1b-2x4096", choices=sorted(T.SHAPES))
    ap.add_argument("--modes", default="coda,hf-compile-nomask,hf")
    ap.add_argument("--kind", default="fwdbwd", choices=["fwdbwd", "adamw"])
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--builds", default="build")
    ap.add_argument("--tuned", default=None, help="the coda modes' tune file/dir, or none")
    ap.add_argument("--tuned-old", default=None, help="the table of modes with the @old suffix")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (the step's ms)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--predict", default="sustained", choices=PREDICT)
    ap.add_argument("--rounds", type=int, default=3, help="sustained ruler rounds")
    ap.add_argument("--sustain-s", type=float, default=0.5)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per process")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--markdown", default=None, help="also write the report here")
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    ap.add_argument("--ruler-child", action="store_true", help=argparse.SUPPRESS)
    return ap


def check(args) -> list[str]:
    """The modes, every argument checked (ValueError: what is wrong)."""
    if args.steps < 1 or args.profile_steps < 1 or args.rounds < 1:
        raise ValueError("--steps, --profile-steps and --rounds must be at least 1")
    if not args.sustain_s > 0:
        raise ValueError(f"--sustain-s {args.sustain_s}: must be a positive number of seconds")
    args.shapes = None
    return list(dict.fromkeys(mode for _, mode in T.plan_runs(args)))


def with_predictions(res: dict, ruler: dict) -> dict:
    """A profiled coda mode with its ruler's kernel times and the predictions."""
    which = [w for w in RULERS if any(w in k for k in ruler.get("kernels", {}).values())]
    step_ms = res["totals"]["step_ms"]
    preds = [predict(res["gemms"], ruler["kernels"], step_ms, w) for w in which]
    out = {**res, "ruler": ruler.get("kernels", {}), "predictions": preds}
    if ruler.get("failed"):  # kept: a kernel the ruler could not time fails the run
        out["ruler_failed"] = ruler["failed"]
    return out


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if args.child:
        args.mode = args.child
        row = ruler_child(args) if args.ruler_child else profile_child(args)
        print(json.dumps(row))
        return 0
    try:
        modes = check(args)
    except ValueError as e:
        ap.error(str(e))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill the child, keep the JSON
    end = None if args.budget_s is None else time.monotonic() + args.budget_s
    doc = {"shape": args.shape, "kind": args.kind, "argv": sys.argv[1:], "modes": []}

    def run(what: str, mode: str, extra: list) -> dict:
        left = None if end is None else end - time.monotonic()
        if left is not None and left < 5:
            say(f"{what} {mode}: not run (--budget-s spent)")
            return {"mode": mode, "error": "budget"}
        limit = args.timeout if left is None else max(1, min(args.timeout, int(left)))
        say(f"{what} {mode} {args.shape} (timeout {limit} s) ...")
        t0 = time.monotonic()
        cmd = [*T.child_argv(sys.argv[1:], mode, args.shape, __file__), *extra]
        row = T.run_child(mode, cmd, limit)
        status = f"failed: {row['error']}" if "error" in row else "done"
        say(f"  {status} ({time.monotonic() - t0:.0f} s)")
        return row

    for mode in modes:
        res = run("profile", mode, [])
        if "error" not in res:
            say(
                f"  {res['totals']['step_ms']} ms/step, GEMM {res['totals']['gemm_ms']} ms, "
                f"{len(res['gemms'])} GEMM kernel shapes"
            )
        doc["modes"].append(res)
        write(args, doc)
        if "error" in res or not mode.startswith("coda") or args.predict == "none":
            continue
        ruler = run("ruler", mode, ["--ruler-child"])
        if "error" in ruler:
            res["ruler_error"] = ruler["error"]
        else:
            doc["modes"][-1] = with_predictions(res, ruler)
            for p in doc["modes"][-1]["predictions"]:
                say(f"  {p['ruler']}: predicted/measured {p['ratio']:.3f}")
        write(args, doc)
    print(render(doc))
    return T.status(failures(doc), say)


def failures(doc: dict) -> list[str]:
    """What a run failed to measure: a mode's profile (``error``), its ruler process
    (``ruler_error``) or a kernel the ruler could not time (``ruler_failed``)."""
    out = T.failures(doc["modes"])
    for res in doc["modes"]:
        if res.get("ruler_error"):
            err = res["ruler_error"]
            out.append(f"{res['mode']} ruler: {err if isinstance(err, str) else ' / '.join(err)}")
        out += [f"{res['mode']} ruler {k}: {why}" for k, why in res.get("ruler_failed", {}).items()]
    return out


def write(args, doc: dict) -> None:
    for path, text in ((args.out, json.dumps(doc, indent=1)), (args.markdown, None)):
        if path:
            tmp = f"{path}.tmp"
            Path(tmp).write_text(text if text is not None else render(doc))
            os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
