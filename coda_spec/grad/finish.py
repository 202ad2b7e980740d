"""What leaves a backward step: the gradients it stores for the steps after it.

Functions of a :class:`~coda_spec.grad.step.StepBuilder` (``step``), called once its forward
kernel's epilogue is differentiated: the gradients of the tensors that epilogue loads (an
input's finished gradient, or a partial sum passed on), the kernel's own d(acc) for its dgrad
and wgrad, and the A operand a weight gradient reads. They use only the step's methods and its
:class:`~coda_spec.grad.records.DerivationView`.
"""

from __future__ import annotations

from coda_spec.grad.facts import FKernel
from coda_spec.grad.records import LOADS, Item, Term


def finish_inputs_of(step, p: FKernel) -> None:
    """Store what p's epilogue gave the tensors it loads, then p's own d(acc)."""
    later = []
    # a d(acc) that is an incoming gradient as it is (aliased, not stored again) is read by the
    # dgrad after this step: an input's gradient finished first is never added into it in place
    # (held as the GEMM's operands are, which store_tensor never accumulates into)
    g = step.acc_grad or []
    alias = len(g) == 1 and g[0] == Term(g[0].name, "load_tile")
    held = {g[0].name} - step.gemm_operands if alias else set()
    step.gemm_operands |= held
    for tensor, g in step.contrib.items():
        step.d.uses[tensor] -= 1
        if step.d.producer(tensor) is None and step.d.uses[tensor] == 0:
            finish_tensor(step, tensor, g)
        else:
            later.append((tensor, g))
    step.gemm_operands -= held
    _store_acc(step, p)
    for tensor, g in later:
        mine, g = in_memory(step.inplace, g)  # (d(acc) stored into an incoming gradient in place)
        if all(t.load for t in g):  # tensors in memory already: pass them on, unread
            step.d.pending.setdefault(tensor, []).extend(mine + g)
            continue
        # a value of this step: accumulate it into the tensor's gradient already in memory
        # (an incoming one), so the step that finishes it reads one tensor, not two
        g = list(g) + step.d.pending.pop(tensor, [])
        name = step.store_tensor(g, f"d{tensor}")
        step.d.pending[tensor] = mine + [Term(name, "load_tile")]


def _store_acc(step, p: FKernel) -> None:
    if step.acc_grad:
        scaled = step.scaled
        base = p.row_scale.results[0] if p.row_scale is not None else _acc_value(step, p)
        name = step.store_tensor(step.acc_grad + _twin(step, p), f"d{base}")
        step.d.dacc[p.index] = (name, scaled)
        readers = set()
        if step.d.needs(None, p.a):
            readers.add(("dgrad", p.index))
        if p.w in step.d.wrt:
            readers.add(("wgrad", p.index))
        step.d.readers.setdefault(name, set()).update(readers)
        if scaled or p.row_scale is None and step.d.producer(p.a) is None:
            step.d.wgrad_a[p.index] = p.a
            step.d.save.add(p.a)


def _twin(step, p: FKernel) -> list:
    """The d(acc) of a later kernel running p's GEMM (``Derivation.input_dgrad``), waiting to
    be summed with p's own: its one tile term, or none. Only a true d(acc) is summed (p's A a
    chain input, so a deferred row scale is already applied)."""
    key = (p.a, p.w, p.w_t)
    index = step.d.twins.get(key)
    if index is None or index == p.index or not (step.scaled or p.row_scale is None):
        return []
    del step.d.twins[key]
    return [Term(step.d.dacc[index][0], "load_tile")]


def _acc_value(step, p: FKernel) -> str:
    """The forward value whose gradient d(acc) is (x2 for ``x2 = acc + x1``), to name it."""
    for op in p.items:
        if op.prim in LOADS:
            continue
        if op.results and step.g.get((p.index, op.results[0])) == step.acc_grad:
            return op.results[0]
    return f"{p.name}_acc"


def finish_tensor(step, tensor: str, g: list) -> None:
    """The last contribution to an input's gradient: add a derived statistic's norm term
    (``-(x r) zdz r``) and store it as the produced gradient."""
    g = list(g) + step.d.pending.pop(tensor, [])
    for s in step.d.stats.values():
        if s.kernel is None and s.x == tensor and s.r in step.d.zdz_done:
            x = step.load("load_tile", tensor)
            r = step.load("load_col", s.r)
            step.current = tensor
            u = step.emit(None, "mul", [x, r], name=f"u_{tensor}")
            uz = step.emit(
                None, "mul", [u, step.load("load_col", step.d.zdz_done[s.r], save=False)]
            )
            g += step.negate([Term(step.emit(None, "mul", [uz, r], name=f"norm_{tensor}"))])
            step.d.uses[tensor] -= 1
    name = step.d.output_name(tensor)
    out = step.store_tensor(g, name, exact=True)
    if out != name:  # the same sum is already a tensor: write it again under its name
        step.b.items.append(Item([("store", step.mat(g)), ("to", name)]))
    step.d.outputs[name] = step.d.spec.tensor(tensor).dtype


def wgrad_operand(step, j: FKernel) -> None:
    """In j's dgrad epilogue: the A operand j's weight gradient reads, unless saved."""
    if j.w not in step.d.wrt or j.index in step.d.wgrad_a or j.index not in step.d.dacc:
        return
    va = step.fk.stored_value(j.a)
    _, scaled = step.d.dacc[j.index]
    if j.a in step.d.keep:
        step.d.wgrad_a[j.index] = j.a
        step.d.save.add(j.a)
        return
    step.current = va
    n = len(step.b.items)
    value = step.val(va)
    if j.row_scale is not None and not scaled:
        r = step.load("load_col", j.row_scale.get("mul")[1])
        value = step.emit(j.row_scale, "mul", [value, r], name=f"v_{j.a}")
    elif value == j.a:  # read back from memory: wgrad reads the saved tensor itself
        del step.b.items[n:]  # (a load only for this: this step does not read it)
        step.d.wgrad_a[j.index] = j.a
        return
    name = value if value not in step.tensor_names() else step.d.fresh(f"{j.a}_r")
    step.b.items.append(Item([("store", value)] + ([("to", name)] if name != value else [])))
    step.d.wgrad_a[j.index] = name


def in_memory(inplace: dict, g: list) -> tuple:
    """``g`` for a later step: each sum a step accumulated into a tile in place (``inplace``, its
    :attr:`StepBuilder.inplace`: the sum's terms -> the tensor stored) that ``g`` contains is
    that tensor (the tile it was added to is consumed, so only the tensor holds its terms).
    Returns (the tensors the step wrote, passed on unread; the other terms)."""
    mine, g = [], list(g)
    for key, name in inplace.items():
        rest = _less(g, key)
        if rest is not None:
            mine.append(Term(name, "load_tile"))
            g = rest
    return mine, g


def _less(g: list, terms) -> list | None:
    """``g`` less ``terms`` (each one occurrence), or None where ``g`` lacks one of them."""
    rest = list(g)
    for t in terms:
        if t not in rest:
            return None
        rest.remove(t)
    return rest
