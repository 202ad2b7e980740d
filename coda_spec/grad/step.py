"""One backward step under construction: its items, what it has loaded, the gradients it holds.

A :class:`StepBuilder` differentiates one forward kernel's epilogue in reverse item order
(``differentiate``), reading forward values through ``val`` (a load of a saved tensor, or the
forward item re-emitted over values it can read; never the forward accumulator, except in a
kernel that re-runs that GEMM) and handing each item's gradient to its rule
(``coda_spec.grad.rules``). Gradients are lists of :class:`~coda_spec.grad.derive.Term`;
``mat`` turns one into a value of the step, ``store_tensor`` into a tensor in memory (``add_to``
of its one tensor term when nothing still reads that tensor). Where each step runs is
``coda_spec.grad.derive``'s decision.

A step sees the derivation only through the :class:`~coda_spec.grad.records.DerivationView` it
is built with (``d``): the forward's facts, the derivation's queries and the state containers
it writes. The items no rule covers (LayerNorm, deferred row scales, row reductions, gathers)
are in ``coda_spec.grad.special``, what a step stores for the steps after it in
``coda_spec.grad.finish``; both are functions of the step, as the rules are.
"""

from __future__ import annotations

from coda_spec.grad.facts import FKernel, Unsupported
from coda_spec.grad.finish import finish_inputs_of, finish_tensor, wgrad_operand
from coda_spec.grad.records import LOADS, BStep, DerivationView, Item, Term, Unavailable
from coda_spec.grad.rules import RULES
from coda_spec.grad.special import (
    gather_backward,
    ln_backward,
    ln_partials,
    reduce_backward,
    row_scale_backward,
)

# an item's parameters a recompute copies as written (a range's bounds are dim expressions, not
# values: ``cols: [0, "F/2"]`` names no forward value)
LITERAL_ARGS = ("dtype", "by", "eps", "min", "max", "cap", "slope", "p", "cols")


class StepBuilder:
    def __init__(
        self, d: DerivationView, bstep: BStep, acc_of: int | None = None, j: FKernel | None = None
    ):
        self.d, self.b, self.acc_of, self.j = d, bstep, acc_of, j
        self.scope: dict = {}  # (forward kernel index, value) -> value name in this step
        self.loaded: dict = {}  # (load prim, tensor) -> value name
        self.g: dict = {}  # (forward kernel index, value) -> list[Term]
        self.memo: dict = {}  # tuple of terms -> value (mat) or tensor (store) name
        self.stored: dict = {}
        self.inplace: dict = {}  # sum accumulated into a tile in place (add_to) -> its tensor
        self.contrib: dict = {}  # tensor loaded by the forward kernel -> list[Term]
        self.gemm_operands: set = set()
        self.fk: FKernel | None = None
        self.current, self.noted = "", set()  # the item being differentiated; lines noted
        self.acc_grad = None
        self.scaled = False  # d(acc) already multiplied by the deferred row scale

    # ---- the three placements ------------------------------------------------------------

    @classmethod
    def dgrad(cls, d: DerivationView, j: FKernel, p: FKernel | None):
        dacc, _ = d.dacc[j.index]
        gemm = {"a": dacc, "b": j.w} if j.w_t else {"a": dacc, "b": f"{j.w}.T"}
        what = f"acc = d({j.a}) before {j.name}'s row scale" if j.row_scale else f"acc = d({j.a})"
        if p is not None:
            what += f"; differentiates {p.name}'s epilogue"
        b = BStep("kernel", d.fresh(f"dgrad_{j.name}"), [("gemm", gemm)], note=what)
        s = cls(d, b, j=j)
        s.gemm_operands = {dacc, j.w}
        d.readers.get(dacc, set()).discard(("dgrad", j.index))
        d.save.add(j.w)
        return s

    @classmethod
    def host(cls, d: DerivationView, p: FKernel, over: str):
        b = BStep(
            "host",
            d.fresh(f"{p.name}_bwd"),
            [("over", over)],
            note=f"differentiates {p.name}'s epilogue (no GEMM: its gradient comes in)",
        )
        return cls(d, b)

    @classmethod
    def recompute(cls, d: DerivationView, p: FKernel):
        gemm = {"a": p.a, "b": f"{p.w}.T" if p.w_t else p.w}
        b = BStep(
            "kernel",
            d.fresh(f"{p.name}_bwd"),
            [("gemm", gemm)],
            note=f"re-runs {p.name}'s GEMM: its backward needs the accumulator, never saved",
        )
        s = cls(d, b, acc_of=p.index)
        s.gemm_operands = {p.a, p.w}
        d.save.update((p.a, p.w))
        return s

    def done(self) -> BStep:
        return self.b

    # ---- items ---------------------------------------------------------------------------

    def _note(self, op) -> str:
        if op is None:
            return ""
        if op.loc.line in self.noted:
            return f"grad of line {op.loc.line}"
        self.noted.add(op.loc.line)
        return f"grad of {self.d.source_of(op)}"

    def emit(
        self, op, prim: str, first, name: str | None = None, grad_of=None, note=None, **kw
    ) -> str:
        """Append ``{prim: first, **kw, as: name}``; ``grad_of``: the result is (a part of) that
        forward value's gradient, named ``d<value>``."""
        base = f"d{grad_of}_by_{self.current}" if grad_of else f"{prim}_{self.current or 'acc'}"
        name = self.d.fresh(name or base)
        fields = [(prim, first)] + [(k, v) for k, v in kw.items()] + [("as", name)]
        self.b.items.append(Item(fields, note if note is not None else self._note(op)))
        return name

    def emit_pair(self, op, prim: str, first, z: str):
        dz = self.d.fresh(f"d{op.get(op.prim)}")
        again = self.d.fresh(f"{op.results[0]}_r")
        self.b.items.append(Item([(prim, first), ("z", z), ("as", [dz, again])], self._note(op)))
        return dz, again

    def load(self, prim: str, tensor: str, note: str = "", save: bool = True) -> str:
        key = (prim, tensor)
        if key not in self.loaded:
            self.b.items.append(Item([(prim, tensor)], note))
            self.loaded[key] = tensor
            if save and self.d.analysis.info(tensor) is not None and tensor not in self.d.grads:
                if self.d.analysis.tensor(tensor).origin in ("input", "stored", "finalized"):
                    self.d.save.add(tensor)
        return self.loaded[key]

    def save(self, tensor: str) -> None:
        """The backward reads forward tensor ``tensor``: the forward saves it."""
        self.d.save.add(tensor)

    def grad(self, name: str) -> list:
        return [Term(name)]

    def negate(self, g: list) -> list:
        return [Term(t.name, t.load, -t.sign) for t in g]

    def mat(self, g: list, name: str | None = None) -> str:
        key = tuple(g)
        if key in self.memo:
            return self.memo[key]
        vals = [(self.load(t.load, t.name, save=False) if t.load else t.name, t.sign) for t in g]
        if len(vals) == 1 and vals[0][1] == 1:
            out = vals[0][0]
        else:
            pos = [v for v, s in vals if s > 0]
            neg = [v for v, s in vals if s < 0]
            base = name or f"d{self.current or 'acc'}"
            parts = [(v, "add") for v in pos[1:]] + [(v, "sub") for v in neg]
            acc = pos[0] if pos else None
            for i, (v, prim) in enumerate(parts):
                last = i == len(parts) - 1
                label = base if last else f"{base}_part"
                if acc is None:
                    acc = self.emit(None, "neg", v, name=label)
                else:
                    acc = self.emit(None, prim, [acc, v], name=label)
            out = acc
        self.memo[key] = out
        return out

    def store_tensor(self, g: list, base: str, exact: bool = False) -> str:
        """Write gradient ``g`` as a tensor and return its name: the step value's own name when
        ``g`` is one plain value, else ``base`` made unique (``exact``: ``base`` as given, an
        output's name). The same sum stored twice in a step is written once."""
        key = tuple(g)
        if key in self.stored:
            return self.stored[key]
        if len(g) == 1 and g[0].load == "load_tile" and g[0].sign == 1 and not exact:
            return g[0].name  # already a tensor: nothing to write
        tiles = [
            t
            for t in g
            if t.load == "load_tile"
            and t.sign == 1
            and t.name not in self.gemm_operands
            and not self.d.readers.get(t.name)
            and t.name not in self.d.outputs
        ]
        rest = [t for t in g if t is not (tiles[0] if tiles else None)]
        if tiles and rest and key not in self.memo:  # (a sum already in registers is stored)
            value = self.mat(rest, name=f"{base}_delta")
            name = base if exact else self.d.fresh(base)
            self.b.items.append(Item([("store", value), ("to", name), ("add_to", tiles[0].name)]))
            self.loaded.pop(("load_tile", tiles[0].name), None)
            self.inplace[key] = name
        else:
            value = self.mat(g, name=base if not exact else f"{base}_sum")
            plain = value != "acc" and value not in self.tensor_names() and not exact
            name = value if plain else (base if exact else self.d.fresh(base))
            self.b.items.append(
                Item([("store", value)] + ([("to", name)] if value != name else []))
            )
        self.stored[key] = name
        self.d.tensors.add(name)
        return name

    # ---- forward values --------------------------------------------------------------------

    def wants(self, value) -> bool:
        """A forward value whose gradient reaches a wanted input (never a number)."""
        return isinstance(value, str) and self.d.needs(self.fk.index, value)

    def kind(self, value) -> str:
        return self.fk.kind(value) if isinstance(value, str) else "scalar"

    def tensor_names(self) -> set:
        return {t.name for t in self.d.analysis.tensors} | set(self.d.grads) | self.d.tensors

    def recomputable(self, v: str, seen=()) -> bool:
        if (self.fk.index, v) in self.scope:
            return True
        if v == "acc":
            return self.acc_of == self.fk.index
        op = self.fk.defining(v)
        if op is None or op.prim in ("swiglu", "geglu", "prepass", "reduce_row", "gather_col"):
            return False
        if op.prim in LOADS:
            return True
        for key, x in op.args:
            if key in ("as", "dtype", "by") or key == "cols":
                continue
            for y in x if isinstance(x, list) else [x]:
                if isinstance(y, str) and y not in seen:
                    if not (self.recomputable(y, seen + (v,)) or self.fk.stored_as(y)):
                        return False
        return True

    def _new_tiles(self, v: str, seen=()) -> int:
        """Tiles not yet loaded in this step that recomputing ``v`` would read."""
        if (self.fk.index, v) in self.scope or v == "acc":
            return 0
        op = self.fk.defining(v)
        if op is None:
            return 0
        if op.prim == "load_tile":
            return 0 if ("load_tile", op.get("load_tile")) in self.loaded else 1
        n = 0
        for key, x in op.args:
            if key in ("as", "dtype", "by", "cols"):
                continue
            for y in x if isinstance(x, list) else [x]:
                if isinstance(y, str) and y not in seen:
                    stored = self.fk.stored_as(y)
                    if stored and ("load_tile", stored) in self.loaded:
                        continue
                    n += self._new_tiles(y, seen + (v,))
        return n

    def val(self, v):
        if not isinstance(v, str):
            return v
        key = (self.fk.index, v)
        if key in self.scope:
            return self.scope[key]
        if v == "acc" and self.acc_of != self.fk.index:
            if self.fk.stored_as("acc") is None:
                raise Unavailable(
                    f"the accumulator of kernel '{self.fk.name}'",
                    "store it in the forward ('- {store: acc, to: NAME}', NAME an output "
                    "marked differentiable: false), or write this kernel's backward by hand",
                )
            name = self.load("load_tile", self.fk.stored_as("acc"))
            self.scope[key] = name
            return name
        if v == "acc":
            return "acc"
        op = self.fk.defining(v)
        if op is None:
            raise Unavailable(f"'{v}'")
        stored = self.fk.stored_as(v)
        if op.prim in LOADS:
            if op.prim == "load_tile":
                name = self.load("load_tile", op.get("load_tile"))
            else:
                key2 = (op.prim, op.get(op.prim))
                if key2 not in self.loaded:
                    self.b.items.append(Item(list(op.args)))
                    self.loaded[key2] = op.results[0]
                    self.d.save.add(op.get(op.prim))
                name = self.loaded[key2]
        elif stored and (
            stored in self.d.keep or not self.recomputable(v) or self._new_tiles(v) > 0
        ):  # a recompute that reads more tiles than the saved value is not worth it
            name = self.load("load_tile", stored)
        elif self.recomputable(v):
            args = []
            for k, x in op.args:
                if k == "as" or k in LITERAL_ARGS:
                    args.append((k, x))
                elif isinstance(x, list):
                    args.append((k, [self.val(y) for y in x]))
                else:
                    args.append((k, self.val(x)))
            name = v if v not in self.tensor_names() else self.d.fresh(f"{v}_r")
            args = [(k, x) for k, x in args if k != "as"] + [("as", name)]
            self.b.items.append(Item(args, f"recompute {self.d.source_of(op)}"))
        else:
            raise Unavailable(f"'{v}' (line {op.loc.line})")
        self.scope[key] = name
        return name

    def tile(self, v: str) -> str:
        """A saved tile (a pair op's ``z`` is read as packed pairs from memory)."""
        stored = self.fk.stored_as(v)
        if stored is None:
            raise Unavailable(f"'{v}' saved", f"store '{v}' in the forward (a pair op reads it)")
        name = self.load("load_tile", stored)
        self.scope[(self.fk.index, v)] = name
        return name

    def recomputed(self, v: str, name: str) -> None:
        self.scope[(self.fk.index, v)] = name

    def no_grad(self, v, op, what: str) -> None:
        if isinstance(v, str) and self.d.needs(self.fk.index, v):
            raise Unsupported(
                f"a gradient of {what} ('{v}')",
                op.loc,
                "mark its input 'differentiable: false', or leave it out of --wrt",
            )

    # ---- gradient bookkeeping ------------------------------------------------------------

    def contribute(self, v, g: list) -> None:
        if not isinstance(v, str) or not self.d.needs(self.fk.index, v):
            return
        self.g.setdefault((self.fk.index, v), []).extend(g)

    def contribute_row(self, v: str, partial: str) -> None:
        op = self.fk.defining(v)
        if op is not None and op.prim == "load_row":
            if op.get("repeat") or op.get("cols"):
                raise Unsupported(
                    "the gradient of a repeated or ranged row vector",
                    op.loc,
                    "write this kernel's backward by hand",
                )
            self._row_partial(op.get("load_row"), partial)
        elif op is not None and op.prim == "add":
            for x in op.get("add"):
                if isinstance(x, str) and self.d.needs(self.fk.index, x):
                    self.contribute_row(x, partial)
        elif self.d.needs(self.fk.index, v):
            raise Unsupported(
                f"the gradient of row vector '{v}' through '{op.prim}'",
                op.loc,
                "write this kernel's backward by hand",
            )

    def _row_partial(self, tensor: str, partial: str) -> None:
        if self.d.needs(None, tensor):
            self.d.rows.setdefault(tensor, []).append(partial)
            self.d.uses[tensor] = self.d.uses.get(tensor, 1) - 1

    def contribute_tensor(self, tensor: str, g: list, op) -> None:
        if not self.d.needs(None, tensor):
            return
        if op.prim == "load_tile":
            self.contrib.setdefault(tensor, []).extend(g)
        elif op.prim == "load_row":
            self.contribute_row(op.results[0], self.emit(op, "reduce_col", "sum", of=self.mat(g)))
        else:
            raise Unsupported(
                f"the gradient of '{tensor}' ({op.prim}: a per-row or scalar input)",
                op.loc,
                "mark it 'differentiable: false', or write this backward by hand",
            )

    # ---- a forward kernel's epilogue, in reverse -------------------------------------------

    def differentiate(self, p: FKernel) -> None:
        self.fk = p
        for v, tensor in p.stores:
            terms = list(self.d.pending.pop(tensor, []))
            if self.j is not None and tensor == self.j.a:
                terms += self.seed_of_a(self.j)
            if terms:
                self.g.setdefault((p.index, v), []).extend(terms)
        if p.ln is not None:
            ln_backward(self, p)
            return
        for op in reversed(p.items):
            self.current = op.results[0] if op.results else ""
            if op.prim == "store":
                continue
            if op is p.row_scale:
                row_scale_backward(self, p, op)
                continue
            if op.prim == "reduce_row":
                reduce_backward(self, p, op)
                continue
            if op.prim == "gather_col":
                gather_backward(self, p, op)
                continue
            g = self.g.get((p.index, op.results[0])) if op.results else None
            if not g:
                continue
            rule = RULES.get(op.prim)
            if rule is None:
                raise Unsupported(
                    f"'{op.prim}': it has no derivative rule",
                    op.loc,
                    "write this kernel's backward by hand in a backward: section",
                )
            rule(self, op, g)
        if p.row_scale is None and self.d.needs(p.index, "acc"):
            self.acc_grad = self.g.get((p.index, "acc"))
        if self.d.ln_of(p.a) is not None and self.acc_grad:
            ln_partials(self, p)

    def seed_of_a(self, j: FKernel) -> list:
        _, scaled = self.d.dacc[j.index]
        if j.row_scale is not None and not scaled:
            r = j.row_scale.get("mul")[1]
            name = self.emit(j.row_scale, "mul", ["acc", self.load("load_col", r)], name=f"d{j.a}")
            return [Term(name)]
        return [Term("acc")]

    # ---- what leaves the step --------------------------------------------------------------

    def finish_inputs_of(self, p: FKernel) -> None:
        finish_inputs_of(self, p)

    def finish_tensor(self, tensor: str, g: list) -> None:
        finish_tensor(self, tensor, g)

    def wgrad_operand(self, j: FKernel) -> None:
        wgrad_operand(self, j)
