"""Built chains as torch ops: ``coda::<spec name>_<build hash>``, with autograd from the backward
section.

    import coda_spec
    llama = coda_spec.op("build/llama_block-latest")     # a ChainOp (llama.op_name, llama.op)
    out = llama(y=y, w_o=w_o, ...)                        # {"x1": ..., "qkv": ...}, differentiable
    out["x2"].float().sum().backward()                    # runs the backward section's kernels

docs/training.md is the user's guide. The contract, as torch.library intends it:

* **One custom op per build**, ``torch.ops.coda.<name>_<hash>`` (:func:`op_name`: the spec name
  and the build's content address, so two builds of one spec live in one process; a handle's
  ``op_name`` and ``op``). Its schema: the chain's required inputs,
  positionally, as ``Tensor a0, a1, ...``; it returns the declared outputs, then the forward
  tensors the backward section saves that are not outputs). It is functional: every returned
  tensor is fresh. An ``add_to`` output (a kernel that accumulates in place) is computed into a
  copy of the tensor it accumulates into, so the input is never written. The **inplace
  flavour** (``op(..., inplace=True)``, ``coda::<name>_<hash>_inplace``; a forward-only chain only)
  accumulates into it instead, its schema declaring that argument mutated
  (:meth:`ChainOp.with_inplace`).
* ``register_fake`` sizes every returned tensor from the manifest's shape expressions, with the
  dynamic dim (M) read off the input that carries it, symbolic under ``torch.compile``.
* **Autograd** (a chain with a ``backward:`` section): ``setup_context`` saves exactly the spec's
  ``backward.save``; the backward is a second op, ``coda::<name>_<hash>_backward``, which runs the
  backward steps on those saved tensors (the forward never runs again). Outputs that no
  incoming gradient is declared for (statistics such as ``r``) are non-differentiable; inputs
  that no backward output is the gradient of (``pos``, ``target``) get ``None``. Incoming
  gradients are made contiguous (``.sum().backward()`` hands a zero-stride one) and copied
  when a backward kernel accumulates into them (``add_to``).
* **A CPU implementation of both ops**: the reference interpreter (``coda_spec.prove.reference``)
  at the
  declared dtypes (its ``kernel`` precision, the kernels' pipeline: each GEMM's fp32 accumulator
  into fp32 epilogue math, rounding at every stored tensor), or
  in fp64 (fp32) when every floating input is fp64 (``torch.autograd.gradcheck``) or fp32 (a
  model trained in fp32 on the CPU), returning that dtype, stores unrounded. CUDA runs the built
  kernels through ``coda_spec.runtime``.
* **Refusals** are the runtime's: a wrong dtype, shape or device, a missing input or gradient,
  and an input that requires grad in a chain with no backward section, each a
  ``CodaRuntimeError`` before any launch.
* **Eager calls** skip the dispatcher when no autograd is needed and torch.compile is not
  tracing (QuACK's eager bypass): the call is then the chain's own call, checks included.
  An eager call, through the dispatcher or not, keeps its RoPE turns tables for later calls
  (the runtime's ``Call.cache``); a compiled graph's call keeps nothing between calls, as
  CUDA-graph trees require of every allocation in their pool.
* **Unused outputs** cost no gradient: autograd hands ``None`` for an output the loss never
  read (no zero-filled buffer per output); a declared incoming gradient that arrives so is
  made zeros, once.
* **Under torch.compile** the op is opaque: each call picks its variant as a direct call does
  (forced, else the tune table's entry for the call's M, else the fallback) and allocates its
  partial buffers inside the op.
* **fuse_grad_accum** (``op(build, fuse_grad_accum=True)``: a handle of the same op; QuACK's
  option of that name), eager only: a weight gradient with an accumulating kernel
  (``Chain.accumulable``) is added by that kernel into the ``.grad`` of the leaf the caller
  passed, in place, and autograd gets ``None`` for it, when that ``.grad`` exists with the
  gradient's dtype, the input's shape, a dense contiguous 16-byte aligned layout, the leaf has
  no tensor hook, this backward is one that writes ``.grad`` (``.backward()``, not
  ``torch.autograd.grad``) with no graph of its own (``create_graph``), and torch.compile is
  not tracing. Otherwise that gradient is returned as usual (autograd adds it). On the CPU the
  reference's gradient is added into ``.grad`` (``add_``), as autograd would.

**One build serves every size** its kernels support: ``op(build, dims={"D": 256, ...})``
re-sizes the build at load (:func:`resized`: the spec re-analysed at those dims, the manifest's
shape expressions evaluated there, variants a primitive refuses there left out; nothing is
compiled). The op's last argument, ``int[] dims``, is the static dims' sizes in the manifest's
order (:attr:`ChainOp.dims`), so one ``coda::<name>`` serves every size of one build, and
``torch.compile`` specializes on them as on any int argument.

**A light import**: ``import coda_spec.ops`` loads the runtime and no more (no front end,
jsonschema, yaml, reference interpreter or primitive registry); :func:`resized` and the CPU
implementation load what they use when first used (``tests/test_ops.py``).

One op per build per process: :func:`op` on the same build and dims again returns the same
:class:`ChainOp`; another build of the spec (another content address) is another op beside it;
a second directory holding a build of the same address raises (load one of them). Make ops with
:func:`op`.
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import re
import sys
from pathlib import Path

import torch

from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.errors import SpecError
from coda_spec.runtime import Chain, CodaRuntimeError, load
from coda_spec.runtime.plan import FallbackRefused
from coda_spec.runtime.plan import resized_manifest as _plan_resized

# torch.library's registry lasts the process, so these do too: per op name, the ChainOps its
# calls run (one build per spec name, one ChainOp per dims), and the torch ops defined so far.
_OPS: dict = {}
_DEFINED: dict = {}
# The leaves whose .grad a fuse_grad_accum call's backward may add into, {gradient: input}:
# set by ChainOp.__call__ around the op's call, read by _setup_context (the same thread).
_LEAVES: contextvars.ContextVar = contextvars.ContextVar("coda_leaves", default=None)
# True while ChainOp.__call__ runs the op eagerly (not under torch.compile, whose compiled graph,
# and CUDA-graph trees' pool, call the op directly): such a call may keep its RoPE turns tables
# for the next (the runtime's Call.cache), as a direct chain call does; issue 33 counted four
# small copy kernels per qkv_rope call without them.
_EAGER: contextvars.ContextVar = contextvars.ContextVar("coda_eager", default=False)


def op(
    chain_or_build, tuned=None, dims=None, fuse_grad_accum: bool = False, inplace: bool = False
) -> ChainOp:
    """The torch op of a built chain: a :class:`Chain` or a build directory (loaded with
    ``tuned`` as :func:`coda_spec.load` does), at the build's dims or re-sized to ``dims``
    (``{name: size}`` for some static dims; :func:`resized`). ``fuse_grad_accum``: a handle
    whose eager backward adds weight gradients into their leaves' ``.grad`` in place (see
    :meth:`ChainOp.with_grad_accum`). ``inplace``: the op's ``_inplace`` flavour, which
    accumulates into its ``add_to`` inputs (:meth:`ChainOp.with_inplace`)."""
    chain = chain_or_build if isinstance(chain_or_build, Chain) else load(chain_or_build, tuned)
    if dims:
        chain = resized(chain, dims)
    key = _dims_key(chain)
    name = op_name(chain)
    have = _OPS.setdefault(name, {})
    other = next(iter(have.values()), None)
    if other is not None and other.chain.directory != chain.directory:
        raise CodaRuntimeError(
            f"coda::{name} is already the op of {other.chain.directory} in this process; "
            f"{chain.directory} holds a build with the same address: load one of them"
        )
    if key not in have:
        have[key] = ChainOp(chain)
    return have[key].with_grad_accum(fuse_grad_accum).with_inplace(inplace)


def op_name(chain: Chain) -> str:
    """The torch op name of a build: ``<spec name>_<build hash>``, the hash of its directory's
    content address (``build/<spec>-<hash>/``; a directory named otherwise: the first 12 hex
    digits of its manifest's sha256). Two builds of one spec are two ops in one process."""
    directory = Path(chain.directory).resolve()
    spec, _, digest = directory.name.rpartition("-")
    if spec != chain.name or not re.fullmatch(r"[0-9a-f]{12}", digest):
        digest = hashlib.sha256((directory / "manifest.json").read_bytes()).hexdigest()[:12]
    return f"{chain.name}_{digest}"


class ResizeRefused(CodaRuntimeError):
    """A build cannot run at other static dims without a rebuild. ``reason``: why (a shape
    rule, a constant the build compiled in, a fallback config refused there); ``fix``: the
    ``coda build`` that would serve them; ``rules``: the ``SpecError`` of the spec's shape
    rules, when they are the reason (verify reports those as located errors)."""

    def __init__(self, name: str, want: dict, reason: str, fix: str, rules=None):
        super().__init__(f"{name}: cannot re-size to {want}: {reason}; {fix}")
        self.reason, self.fix, self.rules = reason, fix, rules


def resized(chain: Chain, dims: dict, built=None) -> Chain:
    """``chain``'s build at other static dims, compiling nothing: the one home of re-sizing,
    used by :func:`op` (``dims=``), ``coda verify``, ``coda bench --dims`` and ``coda tune``.
    The spec is re-analysed at those dims (its shape rules re-checked), a constant a kernel
    compiled in from the dims that they change is refused (``suits.baked_change``), and the
    manifest is re-sized (:func:`resized_manifest`). ``built``: the build's checked spec
    (None: the chain's). The result's ``checked()`` is the spec at the new dims. A size the
    build cannot serve raises :class:`ResizeRefused` naming the ``coda build`` that would."""
    built = built if built is not None else chain.checked()
    declared = built.spec.dim_sizes()
    static = sorted(k for k, v in declared.items() if v is not None)
    unknown = sorted(set(dims) - set(static))
    if unknown:
        raise CodaRuntimeError(
            f"{built.spec.name}: {unknown} are not static dims of this build (they are "
            f"{', '.join(static) or 'none'}); pass sizes for those only"
        )
    if all(declared[k] == v for k, v in dims.items()):
        return chain
    want = {**{k: declared[k] for k in static}, **dims}
    fix = (
        f"build a copy of the spec ({built.source.file}) whose dims are "
        f"{{{', '.join(f'{k}: {v}' for k, v in want.items())}}} with coda build"
    )
    from coda_spec.check.frontend import with_dims  # re-sizing re-analyses the spec: the front end

    try:
        case = with_dims(built, dims)
    except SpecError as e:  # the spec's shape rules refuse these sizes: say each one
        why = "; ".join(f"{d.path}: {d.message}" for d in e.diagnostics if d.severity == "error")
        raise ResizeRefused(built.spec.name, want, why, fix, rules=e) from e
    try:
        manifest = resized_manifest(chain, case, built)
    except ResizeRefused as e:
        raise ResizeRefused(built.spec.name, want, e.reason, fix) from None
    return chain.with_manifest(manifest, checked=case)


def resized_manifest(chain, case, built=None):
    """The chain's manifest at ``case``'s dims (``case``: the build's spec re-analysed there),
    lowering nothing: refused (:class:`ResizeRefused`, no fix named) when a constant the build
    compiled in changes there (``suits.baked_change``; ``built``: the build's checked spec,
    None: the chain's) or its fallback config is refused there; a variant a primitive refuses
    there is left out (``coda_spec.runtime.plan.resized_manifest``)."""
    from coda_spec.check import suits  # the primitives' sizes: the primitive registry

    name = case.spec.name
    want = case.spec.dim_sizes()
    baked = suits.baked_change(built if built is not None else chain.checked(), case)
    if baked is not None:
        raise ResizeRefused(name, want, baked, "rebuild at these dims")
    try:
        return _plan_resized(chain.manifest, dict(want), suits.refusal(case))
    except FallbackRefused as e:
        raise ResizeRefused(name, want, str(e), "rebuild at these dims") from None


def _dims_key(chain: Chain) -> tuple:
    return tuple(chain.manifest.static.values())


def _define(name: str, schema: str, backward_schema: str | None) -> tuple:
    """The torch ops ``coda::<name>`` (and ``coda::<name>_backward``), defined once per process:
    their implementations run the ChainOp that :func:`op` holds for the name at call time."""
    key = (schema, backward_schema)
    if (have := _defined(name, key)) is not None:
        return have

    def run(method):
        return _runner(name, method)

    def run_bwd(method):  # ``..., int[] dims, int[] needed``: the gradients wanted (0/1 each)
        return lambda *args: getattr(_OPS[name][tuple(args[-2])], method)(
            *args[:-2], needed=tuple(args[-1])
        )

    fwd = torch.library.custom_op(f"coda::{name}", run("_forward"), mutates_args=(), schema=schema)
    fwd.register_kernel("cpu", run("_forward_cpu"))
    fwd.register_fake(run("_fake"))
    bwd = None
    if backward_schema is not None:
        bwd = torch.library.custom_op(
            f"coda::{name}_backward", run_bwd("_backward"), mutates_args=(), schema=backward_schema
        )
        bwd.register_kernel("cpu", run_bwd("_backward_cpu"))
        bwd.register_fake(run_bwd("_backward_fake"))
        fwd.register_autograd(
            lambda ctx, *grads: ctx.coda_op._grad(ctx, *grads),
            setup_context=lambda ctx, inputs, output: _OPS[name][tuple(inputs[-1])]._setup_context(
                ctx, inputs[:-1], output
            ),
        )
    _DEFINED[name] = (key, (fwd, bwd))
    return fwd, bwd


def _define_inplace(name: str, schema: str, mutated: tuple) -> object:
    """``coda::<name>_inplace`` (:meth:`ChainOp.with_inplace`), defined once per process: the
    forward that accumulates into the arguments ``mutated`` names (``a<i>``), declared so."""
    if (have := _defined(f"{name}_inplace", (schema,))) is not None:
        return have
    fwd = torch.library.custom_op(
        f"coda::{name}_inplace",
        _runner(name, "_forward_inplace"),
        mutates_args=mutated,
        schema=schema,
    )
    fwd.register_kernel("cpu", _runner(name, "_forward_inplace_cpu"))
    fwd.register_fake(_runner(name, "_fake_inplace"))
    _DEFINED[f"{name}_inplace"] = ((schema,), fwd)
    return fwd


def _defined(name: str, key: tuple):
    """What :func:`_define` or :func:`_define_inplace` made for ``coda::<name>`` with these
    schemas, or None; another signature under the name raises."""
    have = _DEFINED.get(name)
    if have is not None and have[0] != key:
        raise CodaRuntimeError(
            f"coda::{name} is already defined in this process with another signature "
            f"({have[0][0]}); one spec per name in a process"
        )
    return None if have is None else have[1]


def _runner(name: str, method: str):
    """An op implementation: the last argument is ``int[] dims``, which ChainOp of the name
    runs ``method``."""
    return lambda *args: getattr(_OPS[name][tuple(args[-1])], method)(*args[:-1])


def _schema(n_in: int, n_out: int, *extra: str, mutated: tuple = ()) -> str:
    """``(Tensor a0, ..., int[] dims, *extra) -> (Tensor, ...)``; one output is ``-> Tensor``
    (see :func:`_one`); an argument named in ``mutated`` is ``Tensor(a<i>!) a<i>``."""
    args = [f"Tensor(a{i}!) a{i}" if f"a{i}" in mutated else f"Tensor a{i}" for i in range(n_in)]
    args = ", ".join([*args, "int[] dims", *extra])
    return f"({args}) -> " + ("Tensor" if n_out == 1 else f"({', '.join(['Tensor'] * n_out)})")


def _one(outs: tuple):
    """An op's result as its schema has it: the tensor itself when there is one."""
    return outs[0] if len(outs) == 1 else outs


def _many(got) -> tuple:
    """An op's result as a tuple, one output or several."""
    return (got,) if isinstance(got, torch.Tensor) else tuple(got)


class ChainOp:
    """A chain as ``torch.ops.coda.<name>`` (see the module docstring). Call it with the
    chain's inputs as keyword tensors; it returns the declared outputs by name."""

    def __init__(self, chain: Chain):
        m = chain.manifest
        self.chain, self.name = chain, m.name
        self.op_name = op_name(chain)  # torch.ops.coda.<op_name>
        self.dims = list(_dims_key(chain))  # the op's last argument (the module docstring)
        self.inputs = list(chain.required_inputs)
        self.outputs = [o.name for o in m.outputs]
        self.has_backward = bool(m.backward_steps)
        self.saved = list(chain.saved) if self.has_backward else []
        done = set(self.inputs) | set(self.outputs)
        self.returns = self.outputs + [n for n in self.saved if n not in done]
        self.grads = [(g.name, g.of) for g in m.grads_in]  # incoming: (gradient, output)
        self.grad_outputs = [(o.name, o.of) for o in m.backward_outputs]  # (gradient, input)
        self.differentiable = {of for _, of in self.grads}
        # the forward's add_to outputs: {output: the input it accumulates into}
        self._aliases = {s.d.tensor: s.add_to for s in m.steps if s.kind == "kernel" and s.add_to}
        self._into = set(self._aliases.values())
        self.inplace, self.inplace_op = False, None
        self._into_bwd = {s.add_to for s in m.backward_steps if s.kind == "kernel" and s.add_to}
        self.accumulable = list(chain.accumulable)  # gradients with an accumulating kernel
        self.fuse_grad_accum = False
        n_bwd = len(self.saved) + len(self.grads) if self.has_backward else 0
        self.op, self.backward_op = _define(
            self.op_name,
            _schema(len(self.inputs), len(self.returns)),
            _schema(n_bwd, len(self.grad_outputs), "int[] needed") if self.has_backward else None,
        )

    def __repr__(self) -> str:
        fused = ", fuse_grad_accum" if self.fuse_grad_accum else ""
        name = f"{self.op_name}_inplace" if self.inplace else self.op_name
        return f"<coda op coda::{name} of {self.chain.directory}{fused}>"

    def with_grad_accum(self, on: bool = True) -> ChainOp:
        """This op (the same ``torch.ops.coda.<name>``) with ``fuse_grad_accum`` on or off: on,
        an eager backward adds each gradient of :attr:`accumulable` into the ``.grad`` of the
        leaf tensor passed for its input, in place, with the build's accumulating kernel, and
        hands autograd ``None`` for it (module docstring; docs/training.md). A chain with no
        such gradient is refused."""
        if bool(on) == self.fuse_grad_accum:
            return self
        if on and not self.accumulable:
            raise CodaRuntimeError(
                f"{self.name}: fuse_grad_accum: no gradient of this chain has an accumulating "
                "kernel (the build compiles one for each weight gradient a backward GEMM "
                "stores, when nothing reads it after); leave fuse_grad_accum off"
            )
        other = copy.copy(self)
        other.fuse_grad_accum = bool(on)
        return other

    def with_inplace(self, on: bool = True) -> ChainOp:
        """This op as ``coda::<name>_inplace`` (on) or the functional op (off). The inplace
        flavour accumulates into each forward ``add_to`` input IN PLACE, as the chain itself
        does, instead of into a copy; its schema declares those arguments mutated, so
        torch.compile functionalizes the call (and re-inplaces it where nothing else reads the
        tensor), and the output an input accumulated into is returned as that input. For a
        chain with no backward section whose forward accumulates into an input: the LM head
        sums dW_lm over its row chunks in one V x D buffer (``coda_spec.nn.llama``)."""
        if bool(on) == self.inplace:
            return self
        into = [n for n in self.inputs if n in self._into]
        if on and (self.has_backward or not into):
            why = "has a backward section" if self.has_backward else "accumulates into no input"
            raise CodaRuntimeError(
                f"{self.name}: inplace: the chain {why}; only a forward-only chain whose "
                "steps store add_to into an input has an inplace flavour; leave inplace off"
            )
        other = copy.copy(self)
        other.inplace = bool(on)
        if on:
            mutated = tuple(f"a{self.inputs.index(n)}" for n in into)
            n_out = len(self._inplace_returns())
            other.inplace_op = _define_inplace(
                self.op_name, _schema(len(self.inputs), n_out, mutated=mutated), mutated
            )
        return other

    def _inplace_returns(self) -> list:
        """What the inplace flavour returns: the returns less the add_to outputs."""
        return [n for n in self.returns if n not in self._aliases]

    # -- the call ----------------------------------------------------------------------------
    def __call__(self, **inputs) -> dict:
        self.chain.check_names(inputs)  # the runtime's own refusals and wording
        args = [inputs[n] for n in self.inputs]
        needs_grad = torch.is_grad_enabled() and any(
            a.requires_grad for a in args if isinstance(a, torch.Tensor)
        )
        if needs_grad and not self.has_backward:
            grads = [n for n, a in zip(self.inputs, args, strict=True) if a.requires_grad]
            raise CodaRuntimeError(
                f"{self.name}: input(s) {grads} require grad, but the chain has no backward "
                "section; detach them, or add backward: to the spec"
            )
        if self.inplace:
            return self._call_inplace(args)
        if torch.compiler.is_compiling():
            got = self.op(*args, self.dims)
        elif needs_grad:
            leaves = self._grad_leaves(args)
            token = _LEAVES.set(leaves) if leaves else None
            eager = _EAGER.set(True)
            try:
                got = self.op(*args, self.dims)
            finally:
                _EAGER.reset(eager)
                if token is not None:
                    _LEAVES.reset(token)
        else:  # the eager bypass: no dispatcher, no autograd graph
            cuda = all(a.device.type == "cuda" for a in args if isinstance(a, torch.Tensor))
            got = self._forward(*args, keep=True) if cuda else self._forward_cpu(*args)
        return dict(zip(self.outputs, _many(got), strict=False))

    def _call_inplace(self, args: list) -> dict:
        if torch.compiler.is_compiling():
            got = self.inplace_op(*args, self.dims)
        elif all(a.device.type == "cuda" for a in args if isinstance(a, torch.Tensor)):
            got = self._forward_inplace(*args)
        else:
            got = self._forward_inplace_cpu(*args)
        out = dict(zip(self._inplace_returns(), _many(got), strict=True))
        given = dict(zip(self.inputs, args, strict=True))
        out.update({o: given[into] for o, into in self._aliases.items()})
        return {n: out[n] for n in self.outputs}

    # -- forward -----------------------------------------------------------------------------
    def _forward(self, *args, keep: bool | None = None) -> tuple:
        """``keep``: whether the call may keep its tables (default: an eager call, ``_EAGER``);
        a compiled graph's call keeps no tensor between calls, as CUDA-graph trees require."""
        inputs = dict(zip(self.inputs, args, strict=True))
        for t in self._into:  # accumulate into a copy: the op never writes its inputs
            inputs[t] = inputs[t].clone()
        env = self.chain.run(inputs, cache=_EAGER.get() if keep is None else keep)
        return _one(tuple(env[n] for n in self.returns))

    def _forward_cpu(self, *args) -> tuple:
        inputs = dict(zip(self.inputs, args, strict=True))
        wide = _wide(inputs.values())
        sizes = self.chain.bind(inputs, device=torch.device("cpu"), dtypes=wide is None)
        env = _reference().run(self.chain.checked().analysis, inputs, _precision(wide), sizes)
        return _one(tuple(self._out(env[n], n, wide) for n in self.returns))

    def _forward_inplace(self, *args) -> tuple:
        env = self.chain.run(dict(zip(self.inputs, args, strict=True)), cache=False)
        return _one(tuple(env[n] for n in self._inplace_returns()))

    def _forward_inplace_cpu(self, *args) -> tuple:
        """The reference's values (:meth:`_forward_cpu`), each add_to output copied into the
        input it accumulates into, as the kernel's reduce-add leaves it."""
        given = dict(zip(self.inputs, args, strict=True))
        got = dict(zip(self.returns, _many(self._forward_cpu(*args)), strict=True))
        for o, into in self._aliases.items():
            given[into].copy_(got[o])
        return _one(tuple(got[n] for n in self._inplace_returns()))

    def _fake_inplace(self, *args) -> tuple:
        _inductor_fallbacks(self.op_name)
        inputs = dict(zip(self.inputs, args, strict=True))
        names = self._inplace_returns()
        return self._empties(names, inputs, _wide(inputs.values()), args[0].device)

    def _fake(self, *args) -> tuple:
        _inductor_fallbacks(self.op_name)
        inputs = dict(zip(self.inputs, args, strict=True))
        return self._empties(self.returns, inputs, _wide(inputs.values()), args[0].device)

    # -- autograd ----------------------------------------------------------------------------
    def _setup_context(self, ctx, inputs, output) -> None:
        env = dict(zip(self.inputs, inputs, strict=True))
        output = _many(output)
        env.update(zip(self.returns, output, strict=True))
        ctx.coda_op = self
        ctx.save_for_backward(*(env[n] for n in self.saved))
        # fuse_grad_accum: {gradient: leaf}, else None; plain references, not saved tensors:
        # only their .grad is used in the backward, never their values
        ctx.coda_leaves = _LEAVES.get()
        ctx.mark_non_differentiable(
            *(x for n, x in zip(self.returns, output, strict=True) if n not in self.differentiable)
        )
        # no zeros for the gradients of outputs the loss never used: autograd would fill one
        # per returned tensor (issue 33 counted 1.5 ms of fills per 1B step, for z1, x1, r1
        # and r2); the declared ones that arrive as None are made in _grad, the rest never
        ctx.set_materialize_grads(False)
        # (shape, dtype, device) only: the outputs themselves on ctx would be a cycle
        ctx.coda_like = {of: (env[of].shape, env[of].dtype, env[of].device) for _, of in self.grads}

    def _grad(self, ctx, *grad_outputs):
        by_output = dict(zip(self.returns, grad_outputs, strict=True))
        # zero-stride (expand) or transposed gradients are made dense; a None (a declared
        # output the loss never used: autograd no longer materializes them) is made zeros
        incoming = [
            _zeros(*ctx.coda_like[of]) if by_output[of] is None else by_output[of].contiguous()
            for _, of in self.grads
        ]
        into = self._grad_into(ctx)
        needed = self._needed(ctx, into)
        if into:  # eager (fuse_grad_accum): the kernels add into .grad; no functional op
            args = (*ctx.saved_tensors, *incoming)
            cuda = all(a.device.type == "cuda" for a in args)
            run = self._backward if cuda else self._backward_cpu
            got = _many(run(*args, into=into, needed=needed))
        else:
            got = _many(self.backward_op(*ctx.saved_tensors, *incoming, self.dims, list(needed)))
        of_input = {
            of: None if g in into or not want else x
            for (g, of), x, want in zip(self.grad_outputs, got, needed, strict=True)
        }
        return (*(of_input.get(n) for n in self.inputs), None)  # None: the dims argument

    def _needed(self, ctx, into: dict) -> tuple:
        """1 for each backward output autograd wants (its input ``needs_input_grad``, or its
        kernel adds into a ``.grad``), else 0: the backward runs only the steps the wanted ones
        depend on (a frozen weight's wgrad GEMM, the data input's dgrad GEMM do not run)."""
        wants = dict(zip(self.inputs, ctx.needs_input_grad, strict=False))
        return tuple(int(g in into or wants.get(of, True)) for g, of in self.grad_outputs)

    def _grad_leaves(self, args) -> dict | None:
        """fuse_grad_accum, eager: {gradient: the leaf passed for its input} for the
        gradients with an accumulating kernel whose input is a leaf that requires grad (a
        ``p.to(torch.bfloat16)`` is not one: its gradient goes to the cast, which autograd
        carries to ``p``)."""
        if not self.fuse_grad_accum or torch.compiler.is_compiling():
            return None
        given = dict(zip(self.inputs, args, strict=True))
        leaves = {}
        for g, of in self.grad_outputs:
            x = given.get(of)
            if g in self.accumulable and x is not None and x.is_leaf and x.requires_grad:
                leaves[g] = x
        return leaves

    def _grad_into(self, ctx) -> dict:
        """{gradient: the ``.grad`` its kernel adds into} for this backward: the leaves of
        :meth:`_grad_leaves` whose ``.grad`` can take the kernel's store as autograd would take
        the gradient (the module docstring's conditions, checked now: ``.grad`` appears at the
        first micro-batch's backward)."""
        leaves = getattr(ctx, "coda_leaves", None)
        if not leaves or torch.compiler.is_compiling() or torch.is_grad_enabled():
            return {}
        into = {}
        for g, x in leaves.items():
            got = x.grad
            if (
                got is not None
                and got.dtype == self._dtype(g, None)
                and got.shape == x.shape
                and got.device == x.device
                and got.layout == torch.strided
                and got.is_contiguous()
                and got.data_ptr() % 16 == 0
                and not got.requires_grad
                and not x._backward_hooks  # a hook must see this call's gradient alone
                and _writes_grad(x)
            ):
                into[g] = got
        return into

    def _backward_split(self, args) -> tuple[dict, dict]:
        saved = dict(zip(self.saved, args[: len(self.saved)], strict=True))
        grads = dict(zip((g for g, _ in self.grads), args[len(self.saved) :], strict=True))
        return saved, grads

    def _only(self, needed) -> set | None:
        """The gradients to compute (None: all), from the op's ``needed`` argument."""
        if needed is None or all(needed):
            return None
        return {g for (g, _), want in zip(self.grad_outputs, needed, strict=True) if want}

    def _backward(self, *args, into=None, needed=None) -> tuple:
        """``into``: {gradient: tensor} its accumulating kernel adds into (fuse_grad_accum);
        ``needed``: 0/1 per gradient (an unwanted one is not computed: an uninitialized tensor
        of its shape stands in the op's result, and autograd is handed None for it)."""
        saved, grads = self._backward_split(args)
        for g in self._into_bwd & grads.keys():  # a kernel accumulates into it: a copy
            grads[g] = grads[g].clone()
        only = self._only(needed)
        out = self.chain.backward(saved, accumulate=into, only=only, **grads)
        missing = [g for g, _ in self.grad_outputs if g not in out]
        if missing:
            wide = _wide([*saved.values(), *grads.values()])
            stand_ins = _many(self._empties(missing, saved, wide, args[0].device))
            out.update(zip(missing, stand_ins, strict=True))
        return _one(tuple(out[g] for g, _ in self.grad_outputs))

    def _backward_cpu(self, *args, into=None, needed=None) -> tuple:
        saved, grads = self._backward_split(args)
        wide = _wide([*saved.values(), *grads.values()])
        sizes = self.chain.bind_backward(
            saved, grads, device=torch.device("cpu"), dtypes=wide is None
        )
        analysis = self.chain.checked().analysis
        env = _reference().run_backward(analysis, {**saved, **grads}, _precision(wide), sizes)
        out = {g: self._out(env[g], g, wide) for g, _ in self.grad_outputs}
        for g, t in (into or {}).items():  # as the kernel would: the stored value, added
            out[g] = t.add_(out[g])
        return _one(tuple(out[g] for g, _ in self.grad_outputs))

    def _backward_fake(self, *args, needed=None) -> tuple:
        _inductor_fallbacks(self.op_name)
        saved, grads = self._backward_split(args)
        wide = _wide([*saved.values(), *grads.values()])
        names = [g for g, _ in self.grad_outputs]
        return self._empties(names, saved, wide, args[0].device)

    # -- shapes and dtypes -------------------------------------------------------------------
    def _sizes(self, tensors: dict) -> dict:
        """The build's static dims and the dynamic one, read off a tensor that carries it (a
        ``torch.SymInt`` under tracing)."""
        m = self.chain.manifest
        sizes = dict(m.static)
        dyn = m.dynamic
        for name, x in tensors.items():
            for axis, d in enumerate(m.tensors[name].shape if name in m.tensors else ()):
                if d == dyn:
                    sizes[dyn] = x.shape[axis]
                    return sizes
        return sizes

    def _shape(self, name: str, sizes: dict) -> tuple:
        return self.chain.shape(name, sizes)

    def _dtype(self, name: str, wide):
        """A returned tensor's dtype: the declared one, or the inputs' fp64/fp32 (:func:`_wide`)."""
        return wide if wide is not None else TORCH_DTYPES[self.chain.manifest.tensors[name].dtype]

    def _empties(self, names, sized_by: dict, wide, device) -> tuple:
        """The fake implementations' outputs: ``names`` as empty tensors, sized from the
        manifest's shape expressions with the dynamic dim read off ``sized_by``."""
        sizes = self._sizes(sized_by)
        return _one(
            tuple(
                torch.empty(self._shape(n, sizes), dtype=self._dtype(n, wide), device=device)
                for n in names
            )
        )

    def _out(self, x: torch.Tensor, name: str, wide) -> torch.Tensor:
        """A reference value as the op returns it: its dtype, contiguous, never an input."""
        return x.to(self._dtype(name, wide)).contiguous().clone()


def _inductor_fallbacks(name: str) -> None:
    """Inductor's fallback lowering for ``coda::<name>`` and its ``_backward`` and ``_inplace``
    ops, registered before inductor meets them, when a compile with inductor is under way (its
    lowering module imported; the fake implementations call this, so the registration happens
    while AOTAutograd traces, before inductor lowers the graph).

    Why: an op with no lowering takes inductor's implicit-fallback path, which in torch 2.11
    (the H200's) formats its log message eagerly, whatever the log level (a LazyString since):
    every argument's IR printed in full, so each earlier op's, as a tree: exponential in the
    model's depth. The coda Llama's first compiled step took 9.9 s at 2 layers, 20.4 s at 4 and
    over 100 s at 8 on the H200 (benchmarks/compile_depth.py, docs/training.md). Registered
    here with the layout constraint the implicit path would choose (the op's tag, else
    inductor's default), the path is never taken and nothing else changes."""
    if "torch._inductor.lowering" not in sys.modules:
        return
    from torch._inductor.lowering import lowerings, make_fallback, tag_to_layout_constraint
    from torch._library.utils import get_layout_constraint_tag

    for op_name in (name, f"{name}_backward", f"{name}_inplace"):
        if not hasattr(torch.ops.coda, op_name):
            continue
        target = getattr(torch.ops.coda, op_name).default
        if target not in lowerings:
            tag = get_layout_constraint_tag(target, with_default=True)
            make_fallback(target, layout_constraint=tag_to_layout_constraint(tag))


def _zeros(shape, dtype, device) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


def _writes_grad(leaf: torch.Tensor) -> bool:
    """Whether the running backward adds into ``leaf.grad``: ``.backward()`` does (with
    ``inputs=`` naming the leaf, or none); ``torch.autograd.grad`` never writes ``.grad``.
    Asked of the engine about the leaf's gradient accumulator (what ``register_multi_grad_hook``
    asks)."""
    node = torch.autograd.graph._get_grad_fn_or_grad_acc(leaf)
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except RuntimeError:  # autograd.grad() with this leaf among its inputs: returns, not .grad
        return False


def _reference():
    """The reference interpreter, the ops' CPU implementation: loaded on the first CPU call
    (with the primitive registry), never by ``import coda_spec.ops``."""
    from coda_spec.prove import reference

    return reference


def _wide(tensors):
    """fp64 or fp32 when every floating tensor has that dtype (the CPU kernels then compute in
    it, unrounded), else None (the declared dtypes and their rounding)."""
    floats = {x.dtype for x in tensors if isinstance(x, torch.Tensor) and x.is_floating_point()}
    return floats.pop() if floats in ({torch.float64}, {torch.float32}) else None


def _precision(wide) -> str:
    return {torch.float64: "fp64", torch.float32: "fp32", None: "kernel"}[wide]
