"""The schedule: which backward step differentiates which forward kernel, and what it saves.

CODA's rules, applied to every forward kernel ``p`` in reverse order:

- **Where p's epilogue is differentiated (E_p).** In the epilogue of the dgrad GEMM of the one
  later kernel ``j`` whose A operand p stores (``acc = d(acc_j) @ W_j`` is then the gradient of
  that tensor, in registers); with no such kernel, in a host step over p's incoming gradient;
  and when E_p needs p's accumulator itself (a log-sum-exp, a target-logit gather), in a kernel
  that re-runs p's GEMM (CODA's LM-head backward: the logits are never saved).
- **A deferred row scale** ``z = acc * r`` commutes with the GEMMs: E_p stores ``dz`` and the
  dgrad epilogue multiplies by r, or, when the A operand is saved anyway, E_p stores
  ``dz * r``. E_p also reduces ``sum z dz`` per row (for a z it cannot read, through an
  orthogonal rope: ``sum y dy``), finalized to ``zdz = sum / n``; the norm's input then gets
  ``-(x r) zdz r`` where its gradient is finished (the zdz identity of CODA's B1).
- **Weight gradients** are plain GEMMs ``d(acc)^T @ A``. A normalized or activated A operand
  that the policy does not keep is recomputed and stored by the dgrad epilogue that already
  reads its inputs (v = x r gamma, act = silu(g) u).
- **Vector gradients** (dgamma, dbeta) are column reductions in the epilogue that holds the
  product's other operand, finalized by a sum.
- **An operand read by several GEMMs** gets one gradient, their sum: a chain input read as A
  (or as a residual tile) by several kernels, a weight shared by several. The first backward
  GEMM stores a partial, the last adds to it in place (``add_to``). Two kernels running the same
  GEMM (a post-norm in two passes: a kernel reducing ``sumsq`` of acc, then the kernel its
  statistic scales) share one dgrad and one wgrad: the later kernel's d(acc) waits
  (``twins``) and the earlier kernel's backward adds its own d(acc) to it in place.

Gradients are kept as lazy sums of terms (a value of the step, or a tensor in memory) so that a
sum ending in a store becomes ``add_to`` of the one tensor term, as in the hand-written specs.
Everything the schedule cannot place raises :class:`~coda_spec.grad.facts.Unsupported` at the
forward item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from coda_spec.grad.facts import FKernel, Unsupported
from coda_spec.grad.records import BStep, DerivationView, Item, Term, Unavailable
from coda_spec.grad.step import StepBuilder


@dataclass
class State:
    """What the derivation carries between steps (copied before a placement is tried)."""

    pending: dict  # tensor -> list[Term] gradient contributions in memory
    uses: dict  # tensor -> contributions still to come
    rows: dict  # tensor -> list of reduce_col partial names
    zdz: dict  # stat r -> list of reduce_row partial names
    zdz_left: dict  # stat r -> consumers still to differentiate
    zdz_done: dict  # stat r -> finalized zdz name
    dacc: dict  # kernel index -> (tensor of d(acc) or dz, scaled?)
    wgrad_a: dict  # kernel index -> the tensor wgrad reads as A
    readers: dict  # tensor -> kernel indices whose dgrad / wgrad will still read it
    save: set
    names: set
    outputs: dict  # produced gradient -> dtype
    grads: dict  # gradient name -> forward tensor
    tensors: set = field(default_factory=set)  # tensors the backward steps write
    lnparts: dict = field(default_factory=dict)  # LayerNorm host -> {kind: row-sum partial}
    lndone: dict = field(default_factory=dict)  # LayerNorm host -> {kind: finalized mean}
    vectors: dict = field(default_factory=dict)  # (weight, vector) -> the finalized W @ v
    twins: dict = field(default_factory=dict)  # (A, W, W.T?) -> kernel whose dgrad/wgrad wait
    wparts: dict = field(default_factory=dict)  # weight -> its partial gradient in memory


class Derivation:
    def __init__(self, checked, kernels, stats, wrt, incoming, keep, source_lines):
        self.spec, self.analysis = checked.spec, checked.analysis
        self.kernels, self.stats = kernels, {s.r: s for s in stats}
        self.wrt, self.incoming, self.keep = set(wrt), tuple(incoming), set(keep)
        self.lines = source_lines
        self.steps: list = []
        self.deps = self._deps()
        names = {t.name for t in self.analysis.tensors} | {d.name for d in self.spec.dims}
        for k in kernels:
            names |= {n for n, _ in k.kinds}
        self.st = State({}, {}, {}, {}, {}, {}, {}, {}, {}, set(), names, {}, {})
        for out in self.incoming:
            g = self.fresh(f"d_{out}")
            info = self.analysis.tensor(out)
            load = "load_col" if len(info.shape) == 1 else "load_tile"
            self.st.pending[out] = [Term(g, load)]
            self.st.grads[g] = out
        self._count_uses()

    # ---- names, facts -------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.st.names:
            i += 1
            name = f"{base}_{i}"
        self.st.names.add(name)
        return name

    def source_of(self, op) -> str:
        """The forward item's text (without its comment), for the backward's comments."""
        line = self.lines[op.loc.line - 1].split("#", 1)[0].strip()
        return f"line {op.loc.line}: {line.removeprefix('- ')}"

    def producer(self, tensor: str) -> FKernel | None:
        return next((k for k in self.kernels if k.stored_value(tensor) is not None), None)

    def consumers(self, p: FKernel) -> list:
        stored = {t for _, t in p.stores}
        return [j for j in self.kernels if j.index > p.index and j.a in stored]

    def stat_consumers(self, r: str) -> list:
        return [
            k for k in self.kernels if k.row_scale is not None and k.row_scale.get("mul")[1] == r
        ]

    def _deps(self) -> dict:
        """(kernel index | None, value or tensor) -> the wrt inputs it depends on."""
        deps = {(None, t.name): ({t.name} & self.wrt) for t in self.spec.tensors}
        for s in self.stats.values():
            if s.kernel is None:
                deps[(None, s.r)] = deps[(None, s.x)]
        for k in self.kernels:
            deps[(k.index, "acc")] = deps.get((None, k.a), set()) | ({k.w} & self.wrt)
            for op in k.items:
                d = set()
                for key, v in op.args:
                    if key in ("as", "to", "dtype", "by", "eps"):
                        continue
                    for x in v if isinstance(v, list) else [v]:
                        if isinstance(x, str):
                            d |= deps.get((k.index, x), deps.get((None, x), set()))
                for r in op.results:
                    deps[(k.index, r)] = d
                    if op.prim == "reduce_row":
                        deps[(None, r)] = d
                if op.prim == "store":
                    deps[(None, op.get("to") or op.get("store"))] = d
            for s in self.stats.values():
                if s.kernel == k.index:
                    deps[(None, s.r)] = deps[(k.index, s.x)]
        return deps

    def needs(self, kernel: int | None, value: str) -> bool:
        return bool(self.deps.get((kernel, value), set()))

    def _count_uses(self) -> None:
        """How many contributions each tensor's gradient collects (see ``finish``)."""
        uses = self.st.uses
        for k in self.kernels:
            if self.needs(None, k.a):
                uses[k.a] = uses.get(k.a, 0) + 1
            for op in k.items:
                if op.prim in ("load_tile", "load_row") and self.needs(None, op.get(op.prim)):
                    uses[op.get(op.prim)] = uses.get(op.get(op.prim), 0) + 1
        for r, s in self.stats.items():
            self.st.zdz_left[r] = len(self.stat_consumers(r))
            if s.kernel is None and self.needs(None, s.x):
                uses[s.x] = uses.get(s.x, 0) + 1

    def view(self) -> DerivationView:
        """What a step builder may read and write of this derivation (its current state)."""
        st = self.st
        return DerivationView(
            spec=self.spec,
            analysis=self.analysis,
            stats=self.stats,
            wrt=self.wrt,
            keep=self.keep,
            fresh=self.fresh,
            source_of=self.source_of,
            needs=self.needs,
            producer=self.producer,
            twinned=partial(_twinned, self.kernels),
            ln_of=self.ln_of,
            weight_vector=self.weight_vector,
            output_name=self.output_name,
            pending=st.pending,
            uses=st.uses,
            rows=st.rows,
            zdz=st.zdz,
            zdz_left=st.zdz_left,
            zdz_done=st.zdz_done,
            dacc=st.dacc,
            wgrad_a=st.wgrad_a,
            readers=st.readers,
            save=st.save,
            outputs=st.outputs,
            grads=st.grads,
            tensors=st.tensors,
            lnparts=st.lnparts,
            lndone=st.lndone,
            twins=st.twins,
        )

    # ---- the schedule --------------------------------------------------------------------

    def run(self) -> list:
        for p in reversed(self.kernels):
            self.kernel_backward(p)
        _flush(self)
        return _short_names(_fold_copies(self.steps, set(self.st.grads)))

    def live(self, p: FKernel) -> bool:
        """p's epilogue has a gradient to differentiate: an incoming or accumulated gradient
        of what it stores, or a statistic it reduces that a later kernel differentiated."""
        for _, t in p.stores:
            if self.st.pending.get(t) or any(
                j.a == t and j.index in self.st.dacc for j in self.kernels
            ):
                return True
        return any(s.kernel == p.index and self.st.zdz.get(s.r) for s in self.stats.values())

    def kernel_backward(self, p: FKernel) -> None:
        if not self.live(p) or not (self.needs(p.index, "acc") or self._loads_need(p)):
            return
        for op in p.items:
            if op.prim == "prepass":
                raise Unsupported(
                    f"kernel '{p.name}': a prepass statistic ({op.get('prepass')} per "
                    f"{op.get('group') or 'row'}): its backward needs a per-group row dot of the "
                    "incoming gradient before the same epilogue can use it",
                    op.loc,
                    "write this kernel's backward by hand (a host step over the incoming "
                    "gradient can hold whole heads)",
                )
            if op.prim == "softmax_row":
                raise Unsupported(
                    f"kernel '{p.name}': a row softmax: its backward y * (dy - rowsum(dy * y)) "
                    "needs a row dot of the incoming gradient before the same epilogue can use it",
                    op.loc,
                    "write this kernel's backward by hand in a backward: section (a reduce_row "
                    "dot of dy and y, a finalize sum, then y * (dy - dot) in a host step)",
                )
        placements = []
        cons = self.consumers(p)
        if len({(j.a, j.w, j.w_t) for j in cons}) == 1:  # one GEMM run by several kernels
            cons = cons[:1]  # (a post-norm's two passes): the first's dgrad takes the sum
        if len(cons) > 1:
            raise Unsupported(
                f"kernel '{p.name}' stores the A operands of {len(cons)} GEMMs "
                f"({', '.join(j.name for j in cons)}); the derivation places a kernel's "
                "backward in one dgrad epilogue",
                p.kernel.loc,
                "write this kernel's backward by hand",
            )
        if cons:
            placements.append(("dgrad", cons[0]))
        elif p.ln is not None:
            raise Unsupported(
                f"LayerNorm host step '{p.name}': its output '{p.ln.out}' feeds no GEMM; the "
                "derivation takes a LayerNorm's row sums from the GEMM after it",
                p.kernel.loc,
                "write its backward by hand in a backward: section",
            )
        else:
            placements += [("host", None), ("recompute", None)]
        last = None
        for how, j in placements:
            saved = _copy_state(self.st)
            n = len(self.steps)
            try:
                self.place(p, how, j)
                return
            except Unavailable as e:
                self.st, last = saved, e
                del self.steps[n:]
        raise Unsupported(
            f"kernel '{p.name}': its backward needs {last}, which no backward step can read "
            "or recompute",
            p.kernel.loc,
            last.hint or "store it in the forward, or write this kernel's backward by hand",
        )

    def _loads_need(self, p: FKernel) -> bool:
        return any(
            op.prim.startswith("load_") and self.needs(None, op.get(op.prim)) for op in p.items
        )

    def ln_of(self, tensor: str):
        """The LayerNorm unit whose output ``tensor`` is, if any."""
        return next((k.ln for k in self.kernels if k.ln is not None and k.ln.out == tensor), None)

    def weight_vector(self, k: FKernel, vector: str | None) -> str:
        """``W @ v`` for kernel k's weight and a row vector input (None: the ones vector, the
        row sums of W): a host step over W, once."""
        key = (k.w, vector)
        if key in self.st.vectors:
            return self.st.vectors[key]
        if not k.w_t:
            raise Unsupported(
                f"kernel '{k.name}' reads its weight as '{k.w}' (not '{k.w}.T'): the LayerNorm "
                "backward's W @ gamma is a row reduction over a (out, in) weight",
                k.kernel.gemm.loc,
                "write this backward by hand",
            )
        label = vector or "ones"
        part, name = self.fresh(f"{k.w}_{label}_part"), self.fresh(f"{k.w}_{label}")
        step = BStep(
            "host",
            self.fresh(f"{k.w}_times_{label}"),
            [("over", k.w)],
            note=f"{name} = {k.w} @ {label}, for the LayerNorm backward's row sums",
        )
        step.items.append(Item([("load_tile", k.w)]))
        prod = k.w
        if vector is not None:
            prod = self.fresh(f"{k.w}_x_{vector}")
            step.items += [
                Item([("load_row", vector)]),
                Item([("mul", [k.w, vector]), ("as", prod)]),
            ]
        step.items.append(Item([("reduce_row", "sum"), ("of", prod), ("as", part)]))
        self.steps.append(step)
        self.steps.append(BStep("finalize", "", [("finalize", "sum"), ("of", part), ("as", name)]))
        self.st.save |= {k.w} | ({vector} if vector else set())
        self.st.vectors[key] = name
        return name

    def place(self, p: FKernel, how: str, j: FKernel | None) -> None:
        if how == "dgrad":
            step = StepBuilder.dgrad(self.view(), j, p)
        elif how == "host":
            over = next((t.name for ts in self._seed_tiles(p) for t in ts), None)
            if over is None:
                raise Unavailable("an incoming gradient tile to run over")
            step = StepBuilder.host(self.view(), p, over)
        else:
            step = StepBuilder.recompute(self.view(), p)
        step.differentiate(p)
        step.finish_inputs_of(p)
        if how == "dgrad":
            step.wgrad_operand(j)
        if step.done().items:  # a host step with nothing to do (d(acc) is the incoming) is left out
            self.steps.append(step.done())
        self.after_step()
        if how == "dgrad":
            self.wgrad(j)
        if p.a in {t for k in self.kernels for _, t in k.stores}:
            _await_twin(self, p)  # p's dgrad is its A's producer's placement
        elif self.needs(p.index, "acc"):
            self.input_dgrad(p)

    def _seed_tiles(self, p):
        return [
            [t for t in self.st.pending.get(tensor, []) if t.load == "load_tile"]
            for _, tensor in p.stores
        ]

    def input_dgrad(self, p: FKernel) -> None:
        """p's A operand is a chain input: its dgrad (if it needs a gradient) and p's wgrad.

        When an earlier forward kernel runs the same GEMM (the same A and weight: a statistic
        kernel and the kernel it scales, as a post-norm's two passes are), p's d(acc) waits in
        ``twins``: that kernel's backward adds its own d(acc) to it (``finish._store_acc``), so
        one dgrad and one wgrad take the sum (``d(A) = (dacc_1 + dacc_2) W``)."""
        if not _await_twin(self, p):
            self.gemm_grads(p)

    def gemm_grads(self, p: FKernel) -> None:
        """p's dgrad into its chain-input A operand and p's wgrad. When an earlier forward
        kernel reads that A too (:func:`_read_before`), whose backward comes later, the dgrad
        stores a partial (``pending``) that the last contribution finishes with ``add_to``."""
        if self.needs(None, p.a):
            step = StepBuilder.dgrad(self.view(), p, None)
            seed = step.seed_of_a(p)
            if _read_before(self.kernels, p):
                name = step.store_tensor(seed + self.st.pending.pop(p.a, []), f"d{p.a}")
                self.st.pending[p.a] = [Term(name, "load_tile")]
                self.st.uses[p.a] -= 1
            else:
                step.finish_tensor(p.a, seed)
            self.steps.append(step.done())
            self.after_step()
        self.st.wgrad_a.setdefault(p.index, p.a)
        self.wgrad(p)

    def after_step(self) -> None:
        """Finalize what the last step completed: zdz of statistics, LayerNorm row sums,
        vector gradients."""
        for host, parts in self.st.lnparts.items():
            if host in self.st.lndone:
                continue
            unit = next(k.ln for k in self.kernels if k.ln is not None and k.ln.host == host)
            done = {}
            for kind, part in parts.items():
                name = self.fresh(f"{kind}_{unit.out}")
                self.steps.append(
                    BStep(
                        "finalize",
                        "",
                        [("finalize", "mean"), ("of", part), ("n", unit.n), ("as", name)],
                        note=f"LayerNorm '{host}' backward: mean over {unit.n} of {kind}",
                    )
                )
                done[kind] = name
            self.st.lndone[host] = done
        for r, parts in self.st.zdz.items():
            if parts and self.st.zdz_left[r] == 0 and r not in self.st.zdz_done:
                stat = self.stats[r]
                name = self.fresh(f"zdz_{r}")
                if len(parts) > 1:
                    raise Unsupported(
                        f"statistic '{r}' scales {len(parts)} kernels; the derivation folds "
                        "one zdz partial per statistic",
                        self.spec.tensor(r).loc if self.spec.tensor(r) else None,
                    )
                self.steps.append(
                    BStep(
                        "finalize",
                        "",
                        [("finalize", "mean"), ("of", parts[0]), ("n", stat.n), ("as", name)],
                        note=f"zdz = (1/{stat.n}) sum z dz, the row dot {r}'s norm backward needs",
                    )
                )
                self.st.zdz_done[r] = name
        for tensor, parts in list(self.st.rows.items()):
            if self.st.uses.get(tensor, 0) <= 0 and parts:
                del self.st.rows[tensor]
                if len(parts) > 1:
                    raise Unsupported(
                        f"'{tensor}' gets column reductions in {len(parts)} places; the "
                        "derivation folds one per vector",
                        self.spec.tensor(tensor).loc,
                    )
                name = self.output_name(tensor)
                self.steps.append(
                    BStep("finalize", "", [("finalize", "sum"), ("of", parts[0]), ("as", name)])
                )
                self.st.outputs[name] = "fp32"

    def output_name(self, tensor: str) -> str:
        name = self.fresh(f"d_{tensor}")
        self.st.grads[name] = tensor
        return name

    def wgrad(self, j: FKernel) -> None:
        if j.w not in self.wrt or j.index not in self.st.dacc:
            return
        dacc, _ = self.st.dacc[j.index]
        a = self.st.wgrad_a[j.index]
        prev = self.st.wparts.pop(j.w, None)  # an earlier wgrad's partial of the same weight
        if any(q.index < j.index and q.w == j.w for q in self.kernels):
            name = self.fresh(f"d{j.w}_part")  # an earlier forward kernel's wgrad adds to it
            self.st.wparts[j.w] = name
            self.st.tensors.add(name)
        else:
            name = self.output_name(j.w)
            self.st.outputs[name] = self.spec.tensor(j.w).dtype
        gemm = {"a": f"{dacc}.T", "b": a} if j.w_t else {"a": f"{a}.T", "b": dacc}
        step = BStep(
            "kernel",
            self.fresh(f"wgrad_{j.name}"),
            [("gemm", gemm)],
            note=f"d{j.w} = d(acc)^T {a}" if j.w_t else f"d{j.w} = {a}^T d(acc)",
        )
        step.items.append(
            Item([("store", "acc"), ("to", name)] + ([("add_to", prev)] if prev else []))
        )
        self.steps.append(step)
        for t in (dacc, a):
            self.st.readers.get(t, set()).discard(("wgrad", j.index))


def _await_twin(d: Derivation, p: FKernel) -> bool:
    """Whether p's d(acc) waits for (or is) an earlier kernel's running the same GEMM
    (``Derivation.input_dgrad``); p's A a chain input or a forward kernel's output, whose
    producer's backward then runs in the first kernel's dgrad (``Derivation.kernel_backward``)."""
    key = (p.a, p.w, p.w_t)
    twin = d.st.twins.pop(key, None)
    if twin is not None and p.index not in d.st.dacc:  # p gave its GEMM no gradient
        d.st.dacc[p.index] = d.st.dacc[twin]
    if p.index not in d.st.dacc:
        return True
    if any(q.index < p.index and (q.a, q.w, q.w_t) == key for q in d.kernels):
        d.st.twins[key] = p.index
        d.st.readers.pop(d.st.dacc[p.index][0], None)  # (added to in place there)
        return True
    return False


def _twinned(kernels, p: FKernel) -> bool:
    """Another forward kernel runs p's GEMM (a post-norm's statistic and scaled passes)."""
    key = (p.a, p.w, p.w_t)
    return any(q.index != p.index and (q.a, q.w, q.w_t) == key for q in kernels)


def _flush(d: Derivation) -> None:
    """What waited for a kernel that turned out to have no gradient to give: a deferred twin's
    dgrad and wgrad (``Derivation.input_dgrad``), an input's or a weight's partial gradient
    (stored under its name by a copy that ``_fold_copies`` folds into the step that wrote the
    partial)."""
    st = d.st
    for key, index in list(st.twins.items()):
        del st.twins[key]
        d.gemm_grads(next(k for k in d.kernels if k.index == index))
    for tensor in [t for t, g in st.pending.items() if g and _an_input(d, t)]:
        terms = st.pending[tensor]
        over = next((t.name for t in terms if t.load == "load_tile"), terms[0].name)
        note = f"{tensor}'s gradient, summed over the GEMMs that read it"
        step = StepBuilder(
            d.view(), BStep("host", d.fresh(f"{tensor}_grad"), [("over", over)], note=note)
        )
        step.finish_tensor(tensor, [])
        d.steps.append(step.done())
    for w, part in list(st.wparts.items()):
        del st.wparts[w]
        name = d.output_name(w)
        step = BStep("host", d.fresh(f"{w}_grad"), [("over", part)])
        step.items += [Item([("load_tile", part)]), Item([("store", part), ("to", name)])]
        d.steps.append(step)
        st.outputs[name] = d.spec.tensor(w).dtype


def _an_input(d: Derivation, tensor: str) -> bool:
    """A chain input that gets a gradient (not a tensor some forward step writes)."""
    known = tensor in d.wrt and d.spec.tensor(tensor) is not None
    return known and d.producer(tensor) is None


def _read_before(kernels, p: FKernel) -> bool:
    """An earlier forward kernel reads p's A operand too (as its A, or a tile it loads)."""
    return any(
        q.index < p.index and (q.a == p.a or any(op.get("load_tile") == p.a for op in q.items))
        for q in kernels
    )


def _copy_state(st: State) -> State:
    return State(
        {k: list(v) for k, v in st.pending.items()},
        dict(st.uses),
        {k: list(v) for k, v in st.rows.items()},
        {k: list(v) for k, v in st.zdz.items()},
        dict(st.zdz_left),
        dict(st.zdz_done),
        dict(st.dacc),
        dict(st.wgrad_a),
        {k: set(v) for k, v in st.readers.items()},
        set(st.save),
        set(st.names),
        dict(st.outputs),
        dict(st.grads),
        set(st.tensors),
        {k: dict(v) for k, v in st.lnparts.items()},
        {k: dict(v) for k, v in st.lndone.items()},
        dict(st.vectors),
        dict(st.twins),
        dict(st.wparts),
    )


def words(steps):
    """Every name the steps mention (``x.T`` as ``x``)."""
    for s in steps:
        yield s.name
        for _, v in s.head:
            yield from _leaves(v)
        for item in s.items:
            for _, v in item.fields:
                yield from _leaves(v)


def _leaves(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _leaves(x)
    elif isinstance(v, list):
        for x in v:
            yield from _leaves(x)
    elif isinstance(v, str):
        yield v.removesuffix(".T")


def _rename(steps, old: str, new: str) -> None:
    def sub(v):
        if isinstance(v, dict):
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x) for x in v]
        if isinstance(v, str) and v.removesuffix(".T") == old:
            return new + (".T" if v.endswith(".T") else "")
        return v

    for s in steps:
        s.head = [(k, sub(v)) for k, v in s.head]
        for item in s.items:
            item.fields = [(k, sub(v)) for k, v in item.fields]


def _fold_copies(steps, fixed: set) -> list:
    """A host step that only copies tensor A to B (an input's gradient that equals a tensor an
    earlier step wrote) is dropped, and that earlier step writes B directly."""
    out = []
    for s in steps:
        fields = [i.fields for i in s.items]
        if (
            s.kind == "host"
            and len(fields) == 2
            and fields[0][0][0] == "load_tile"
            and fields[1][0] == ("store", fields[0][0][1])
            and len(fields[1]) == 2  # (a store with add_to is a sum, not a copy)
            and fields[0][0][1] not in fixed
        ):
            _rename(out, fields[0][0][1], dict(fields[1])["to"])
            continue
        out.append(s)
    return out


def _short_names(steps) -> list:
    """``dx2_by_h2`` -> ``dx2`` where it is the only gradient of x2 by that base name."""
    used = set(words(steps))
    by = {}
    for w in used:
        if "_by_" in w:
            by.setdefault(w.split("_by_")[0], []).append(w)
    rename = {ws[0]: base for base, ws in by.items() if len(ws) == 1 and base not in used}

    def sub(v):
        if isinstance(v, dict):
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x) for x in v]
        if isinstance(v, str):
            t = v.endswith(".T")
            w = rename.get(v.removesuffix(".T"), v.removesuffix(".T"))
            return w + (".T" if t else "")
        return v

    for s in steps:
        s.head = [(k, sub(v)) for k, v in s.head]
        for item in s.items:
            item.fields = [(k, sub(v)) for k, v in item.fields]
    return steps
