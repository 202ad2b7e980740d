"""The public :class:`Chain`: a loaded build, called with torch CUDA tensors.

    chain = coda_spec.load("build/rmsnorm_chain-latest")
    out = chain(y=y, w_o=w_o, x=x, gamma=gamma, w_up=w_up)   # {"x1": ..., "r": ..., "out": ...}

A chain is its plan (``plan.Plan``: read-only, made at load), its checker (``checks.Checker``:
the signature cache) and its launcher (``launch.Launcher``: library, cubins, SM counts, RoPE
tables, filled at first use); each call's state is a ``call.Call``. What a call does, what it
refuses and how variants are picked: the package docstring (``coda_spec.runtime``) and
docs/runtime.md.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from coda_spec.artifact import Manifest, read_manifest
from coda_spec.artifact.tune_table import load_table
from coda_spec.runtime import checks
from coda_spec.runtime.call import Call, run_steps
from coda_spec.runtime.launch import Launcher
from coda_spec.runtime.plan import CodaRuntimeError, Plan, needed_steps, tuned_picks


class Chain:
    """A loaded build. Call it with the chain's inputs as keyword tensors.

    ``tuned``: where the variant picks come from: a tune file or a directory of them, a tune
    file's data, a ``coda_spec.artifact.tune_table.TuneTable``, None (the default search path:
    ``$CODA_TUNED``, else ``./tuned/*.json``) or False (none: every kernel runs
    ``variants[0]``)."""

    def __init__(self, directory, manifest: Manifest | None = None, tuned=None, _shared=None):
        self.directory = Path(directory).resolve()
        if manifest is None and self.directory.is_file():
            what = "a spec" if self.directory.suffix in (".yaml", ".yml") else "a file"
            raise CodaRuntimeError(
                f"{directory} is {what}, not a build directory; load what coda build makes: "
                f"coda build {directory}, then build/<name>-latest"
            )
        self.manifest = manifest if manifest is not None else read_manifest(self.directory)
        self.name = self.manifest.name
        table = load_table(tuned) if _shared is None else tuned
        self._plan = Plan(self.manifest, self.directory.name, table)
        self._check = checks.Checker(self._plan)
        if _shared is None:
            self._launcher = Launcher(self.directory, self.manifest)
            self._spec = [None]  # the build's checked spec, once read (shared with copies)
            self._warn_untuned(table)
        else:
            self._launcher, self._spec = _shared
        self._forced: dict = {}  # step -> variant index (with_variants)
        self._picks: dict | None = None  # {step: rows} once the GPU is checked (first launch)
        for s in self.manifest.all_steps:
            if s.kind != "kernel" and s.launch is None and not getattr(s, "folded_into", None):
                raise CodaRuntimeError(
                    f"{self.name}: {s.kind} step '{s.name}' has no compiled kernel in "
                    f"{self.directory}; rebuild the spec with this coda"
                )

    def _warn_untuned(self, table) -> None:
        """Tune files were found but none has an entry for this build (a rebuild changes the
        build's hash): say so once, at load, instead of running fallbacks without a word. The
        package's own table counts only for the specs it was tuned for
        (``TuneTable.untuned_sources``)."""
        many = [k for k, names in self._plan.names.items() if len(names) > 1]
        if not many or table.builds(self.directory.name):
            return
        files = ", ".join(map(str, table.untuned_sources(self.directory.name, self.name)))
        if not files:  # only the package's table, which does not know this spec
            return
        warnings.warn(
            f"{self.name}: no tune entry for build {self.directory.name} in {files}; kernels "
            f"{', '.join(many)} run their fallback variant. Run coda tune on this build "
            "(docs/tuning.md)",
            stacklevel=3,
        )

    def __repr__(self) -> str:
        m = self.manifest
        kinds = [s.kind for s in m.all_steps]
        steps = ", ".join(
            f"{kinds.count(k)} {k}" for k in ("kernel", "host", "finalize") if k in kinds
        )
        dims = ", ".join(f"{k}={'dynamic' if v is None else v}" for k, v in m.dims.items())
        return (
            f"<coda Chain {self.name} at {self.directory} ({steps}; dims {dims}; inputs "
            f"{', '.join(self._plan.required)}; outputs {', '.join(o.name for o in m.outputs)}"
            f"{'; with backward' if m.backward_steps else ''})>"
        )

    def _copy(self, manifest: Manifest) -> Chain:
        return Chain(self.directory, manifest, self._plan.table, (self._launcher, self._spec))

    def with_manifest(self, manifest: Manifest, checked=None) -> Chain:
        """The same library under another manifest (verify's re-sized shapes), with the same
        tune table; forced variants carry over where the new manifest has them (by name).
        ``checked``: the spec checked at the new manifest's dims (:meth:`checked` then returns
        it), when they differ from the build's."""
        other = self._copy(manifest)
        if checked is not None:
            other._spec = [checked]
        names = self._plan.names
        for step, i in self._forced.items():
            name = names[step][i]
            if name in other._plan.names.get(step, ()):
                other._forced[step] = other._plan.names[step].index(name)
        return other

    # -- variants ----------------------------------------------------------------------------
    def variant_names(self, step: str) -> list[str]:
        """A kernel step's variants by name (config text), the fallback first."""
        names = self._plan.names
        if step not in names:
            raise ValueError(
                f"{self.name}: no kernel step '{step}' (kernel steps: {', '.join(names)})"
            )
        return list(names[step])

    def with_variants(self, choice: dict) -> Chain:
        """A chain that always runs the given variants: ``{step: index or name}`` (a name is a
        config text, see :meth:`variant_names`); other kernels keep this chain's rule."""
        forced = dict(self._forced)
        for step, v in choice.items():
            names = self.variant_names(step)
            if isinstance(v, str):
                if v not in names:
                    raise ValueError(
                        f"{self.name}: kernel '{step}' has no variant {v!r} (it has "
                        f"{', '.join(names)})"
                    )
                forced[step] = names.index(v)
            elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(names):
                forced[step] = v
            else:
                raise ValueError(
                    f"{self.name}: kernel '{step}' has {len(names)} variant(s); {v!r} is not "
                    "one of their indices or names"
                )
        other = self._copy(self.manifest)
        other._forced = forced
        return other

    def selected_variants(self, sizes: dict) -> dict:
        """The variant name each kernel step runs at ``sizes`` (forced, tuned, else the
        fallback), without running anything. Checks the tune table's GPU like a call does."""
        return {s.name: self._variant(s, sizes, None).name for s in self.manifest.kernel_steps()}

    def _variant(self, step, sizes: dict, device):
        picks = None
        if self._plan.tuned and step.name not in self._forced and len(step.variants) > 1:
            if self._picks is None:  # decided once, at the first launch
                dev = device if device is not None else checks.current_device()
                self._picks, warning = tuned_picks(self._plan.tuned, checks.device_name(dev))
                if warning:
                    warnings.warn(f"{self.name}: {warning}", stacklevel=5)
            picks = self._picks
        return self._plan.variant(step, sizes, self._forced, picks)

    @property
    def required_inputs(self) -> list[str]:
        """Inputs a call must pass: those some step reads."""
        return list(self._plan.required)

    @property
    def accumulable(self) -> list[str]:
        """The gradients :meth:`backward` can add into an existing tensor in place
        (``accumulate=``): weight gradients whose kernel the build compiled an accumulating
        flavour of (``KernelStep.accumulate``)."""
        return list(self._plan.accumulable)

    @property
    def saved(self) -> list[str]:
        """The forward tensors :meth:`backward` needs (the spec's ``backward.save`` as read)."""
        return list(self._plan.saved)

    # -- planning ----------------------------------------------------------------------------
    def bind(self, inputs: dict, device=None, dtypes: bool = True) -> dict:
        """Validate inputs; return the dim sizes they imply. ``device``: where they must be
        (default: the current CUDA device); ``dtypes=False``: any dtype (fp64 math)."""
        return self._check.inputs(inputs, None, device, dtypes)[2]

    def shape(self, tensor: str, sizes: dict) -> tuple:
        """A chain tensor's shape at ``sizes`` (every dim its expression names; a traced
        ``torch.SymInt`` stays symbolic)."""
        return self._plan.shape(tensor, sizes)

    def check_names(self, inputs: dict) -> None:
        """Refuse an unknown keyword or a missing required input (what a call checks first)."""
        self._check.names(inputs)

    def bind_backward(self, saved: dict, grads: dict, device=None, dtypes: bool = True) -> dict:
        """Validate what :meth:`backward` takes (``saved``: at least :attr:`saved`); return the
        dim sizes. ``device`` and ``dtypes`` as for :meth:`bind`."""
        return self._check.saved(self._saved_of(saved), grads, device, dtypes)[2]

    def _saved_of(self, saved: dict) -> dict:
        """The tensors of :attr:`saved` out of ``saved``, or the refusal naming what is
        missing."""
        if not self.manifest.backward_steps:
            raise CodaRuntimeError(f"{self.name}: the chain has no backward section")
        missing = [n for n in self._plan.saved if n not in saved]
        if missing:
            raise CodaRuntimeError(
                f"{self.name}: backward needs the saved forward tensors {self._plan.saved}; "
                f"missing {missing}"
            )
        return {n: saved[n] for n in self._plan.saved}

    def gemm_extents(self, step, sizes: dict) -> tuple[int, int, int]:
        """(M, N, K) of a kernel step's GEMM at ``sizes``."""
        return self._plan.gemm_extents(step, sizes)

    def launches(self, step, sizes: dict) -> bool:
        """Whether a kernel step launches its kernel at ``sizes`` (``Plan.launches``)."""
        return self._plan.launches(step, sizes)

    def plan(self, sizes: dict, backward: bool = False) -> list[tuple[str, str]]:
        """What a call at ``sizes`` would do, step by step, without doing it
        (``Plan.describe``)."""
        return self._plan.describe(sizes, backward)

    # -- execution ---------------------------------------------------------------------------
    def __call__(self, check: bool = True, **inputs) -> dict:
        env = self.run(inputs, check=check)
        return {o.name: env[o.name] for o in self.manifest.outputs}

    def run(
        self,
        inputs: dict,
        poison: bool = False,
        grads: dict | None = None,
        check: bool = True,
        cache: bool = True,
    ) -> dict:
        """Run every forward step -- and, with ``grads`` (the incoming gradients named in the
        spec's ``backward.grads``), every backward step -- and return every chain tensor
        (required inputs, outputs, intermediates, partial buffers). ``poison`` fills every
        buffer a kernel writes with NaN first, so a verifier can prove each element and partial
        slot was written. Inputs and gradients are all validated before the first step runs;
        ``check=False`` skips that. ``cache=False``: keep nothing for later calls (the torch
        op's calls: ``coda_spec.ops``)."""
        if check:
            device, env, sizes = self._check.inputs(inputs, grads)
        else:
            given = {n: inputs[n] for n in self._plan.required}
            device, env, sizes = self._check.unchecked({**given, **(grads or {})})
        m = self.manifest
        steps = m.steps + (m.backward_steps if grads is not None else ())
        self._steps(steps, Call(device, sizes, env, poison, cache))
        return env

    def backward(
        self,
        saved: dict,
        check: bool = True,
        accumulate: dict | None = None,
        only: set | None = None,
        **grads,
    ) -> dict:
        """Gradients, from the tensors a forward :meth:`run` produced: ``saved`` holds (at
        least) :attr:`saved` -- the env :meth:`run` returned will do -- and ``grads`` the
        incoming gradients. Runs the backward steps only. Returns the backward outputs.
        ``add_to`` gradients accumulate IN PLACE into the incoming gradient they name.
        ``accumulate``: ``{gradient: tensor}`` for gradients of :attr:`accumulable`: each is
        added IN PLACE into its tensor (a ``.grad``) by its step's accumulating kernel, and
        returned as that tensor; they are validated before any launch (with ``check=False``,
        only their names). ``only``: the backward outputs wanted; the steps no wanted output
        depends on do not run (``runtime.plan.needed_steps``) and the others are not returned."""
        tensors = self._saved_of(saved)
        if check:
            device, env, sizes = self._check.saved(tensors, grads)
        else:
            device, env, sizes = self._check.unchecked({**tensors, **grads})
        into = self._check.targets(accumulate or {}, device, sizes, full=check)
        steps = self.manifest.backward_steps
        if only is not None:
            steps = needed_steps(steps, only)
        self._steps(steps, Call(device, sizes, env, into=into))
        names = [o.name for o in self.manifest.backward_outputs]
        return {n: env[n] for n in names if only is None or n in only}

    def steps_fn(self, env: dict, sizes: dict, steps):
        """A callable that runs ``steps`` (manifest steps: one kernel, or the backward section)
        on a shallow copy of ``env`` -- the tensors of a finished :meth:`run` -- and returns
        that copy. Each call allocates its outputs afresh, as a real call does; an ``add_to``
        output accumulates into ``env``'s tensor again. Inputs are not re-validated: for
        timing one kernel or one section alone (``coda bench``), not for users."""
        device = checks.current_device()

        def call() -> dict:
            work = Call(device, sizes, dict(env))  # a run's tensors: already detached
            self._steps(steps, work)
            return work.env

        return call

    def _steps(self, steps, call: Call) -> None:
        run_steps(steps, call, self._plan.ranges, self._step)

    def _step(self, step, call: Call) -> None:
        if step.kind == "kernel":
            if self._plan.launches(step, call.sizes):
                self._kernel(step, call)
            else:
                v = self._variant(step, call.sizes, call.device)
                self._launcher.no_launch(self._plan, step, v, call)
        elif step.kind == "finalize":
            self._finalize(step, call)
        else:
            self._host(step, call)

    # One method per step kind: the seams the CPU tests replace with torch emulations.
    def _kernel(self, step, call: Call) -> None:
        if step.d is not None and step.d.tensor in call.into:  # D += result, into call.into's
            v = step.accumulate
        else:
            v = self._variant(step, call.sizes, call.device)
        self._launcher.kernel(self._plan, step, v, call)

    def _host(self, step, call: Call) -> None:
        self._launcher.compiled(self._plan, step, call)

    def _finalize(self, step, call: Call) -> None:
        if not step.folded_into:  # else the host kernel before it computed it
            self._launcher.compiled(self._plan, step, call)

    def checked(self):
        """The build's own spec, checked (verify, bench and tune read it; a call never does:
        this imports the front end)."""
        if self._spec[0] is None:
            from coda_spec.check.frontend import check_source  # the front end: never on a call
            from coda_spec.check.source import parse_text

            text = (self.directory / "spec.yaml").read_text()
            self._spec[0] = check_source(parse_text(self.manifest.spec_file, text))
        return self._spec[0]


def load(directory, tuned=None) -> Chain:
    """Load a build directory (``build/<name>-<hash>`` or ``build/<name>-latest``). ``tuned``:
    the tune table to pick variants from (a file or directory path, a loaded table, False for
    none); None: ``$CODA_TUNED``, else ``./tuned/*.json`` (docs/tuning.md)."""
    return Chain(directory, tuned=tuned)
