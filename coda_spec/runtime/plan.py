"""The launch plan of a loaded build: what a call needs that no call's tensors change.

Made once per :class:`coda_spec.runtime.Chain`, from the typed manifest
(``coda_spec.artifact.Manifest``) and the tune table, and never written after: each kernel
step's variants and their names, the shape expressions compiled to functions, the NVTX range
names, the forward tensors the backward reads (``saved``), the tune table's rows for this build,
and the answers "what would a call at these sizes launch" (:meth:`Plan.launches`,
:meth:`Plan.describe`) and "which variant runs" (:meth:`Plan.variant`). A re-sized build (verify's
ragged case, ``bench --width``) is a plan over :func:`resized_manifest`. Torch-free: what
touches tensors or the GPU is ``checks`` (validation), ``launch`` (kernels) and ``call``.

The variant rule (docs/tuning.md is the user's page): forced (``Chain.with_variants``), else the
tune table's entry for this build (keyed by the build directory's name ``<name>-<hash>``), this
kernel and these static dims, measured on this GPU, whose config is one of the step's variants:
the smallest ``m_max >= M`` wins, else the largest ``m_max``; else ``variants[0]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from coda_spec import dims as dimmod
from coda_spec.artifact import KernelStep, Manifest, gemm_extents, shape_fn


class CodaRuntimeError(RuntimeError):
    """A call was refused before launch (bad input) or the artifact cannot be used."""


class FallbackRefused(ValueError):
    """A re-sized manifest's kernel cannot run its fallback variant at the new dims."""


@dataclass(frozen=True)
class Tuned:
    """One tune file's rows for this build: {step: ((m_max, variant index), ...)} by m_max."""

    path: str
    gpu: str
    rows: MappingProxyType


def pick(rows: tuple, m: int) -> int:
    """The variant of the entry with the smallest ``m_max >= m``, else of the largest m_max.
    ``rows``: ((m_max, variant index), ...) sorted by m_max."""
    for m_max, index in rows:
        if m_max >= m:
            return index
    return rows[-1][1]


def tuned_rows(table, build: str, names: dict, static: dict) -> tuple[Tuned, ...]:
    """The table's entries for ``build`` at these static dims whose config is one of the
    step's variants (``names``: step -> variant names), per file."""
    out = []
    for path, entry in table.builds(build):
        rows = {}
        for step, entries in entry["kernels"].items():
            have = names.get(step)
            if not have or len(have) < 2:
                continue
            got: dict = {}
            for e in entries:
                if e["dims"] == static and e["config"] in have:
                    got.setdefault(e["m_max"], have.index(e["config"]))
            if got:
                rows[step] = tuple(sorted(got.items()))
        if rows:
            out.append(Tuned(path, entry["gpu"], MappingProxyType(rows)))
    return tuple(out)


def tuned_picks(tuned: tuple[Tuned, ...], gpu: str) -> tuple[dict, str | None]:
    """({step: rows} measured on ``gpu``, a warning when the table has rows but none for it)."""
    picks: dict = {}
    for t in tuned:
        if t.gpu == gpu:
            for step, r in t.rows.items():
                picks.setdefault(step, r)
    if picks or not tuned:
        return picks, None
    files = ", ".join(sorted({t.path for t in tuned}))
    other = ", ".join(sorted({t.gpu for t in tuned}))
    return picks, (
        f"tune file(s) {files} were measured on {other}, not on this {gpu}; not used (every "
        "kernel runs its fallback variant; run coda tune on this GPU)"
    )


def saved_names(manifest: Manifest) -> list[str]:
    """Forward tensors the backward section reads (its ``save``), in first-read order."""
    grads = {t.name for t in manifest.grads_in}
    made: set = set()
    out: list = []
    for s in manifest.backward_steps:
        out += [t for t in s.tensors_read() if t not in made and t not in grads and t not in out]
        made.update(s.tensors_written())
    return out


def needed_steps(steps, wanted) -> tuple:
    """The steps of ``steps`` (a section, in order) that the tensors ``wanted`` depend on: a
    step is kept when it writes a wanted tensor or one a kept later step reads. A backward
    whose caller needs some gradients only (autograd's ``needs_input_grad``: a frozen weight,
    an input that is data) skips the GEMMs of the others."""
    live, kept = set(wanted), []
    for step in reversed(tuple(steps)):
        if live & set(step.tensors_written()):
            kept.append(step)
            live |= set(step.tensors_read())
    return tuple(reversed(kept))


def resized_manifest(manifest: Manifest, dims: dict, refusal) -> Manifest:
    """The manifest at other ``dims``, lowering nothing (every shape is an expression over the
    dims). ``refusal(step, config key) -> reason or None`` says whether a kernel's primitives
    support a variant's config at those dims (``coda_spec.supports.refusal``): a refused
    variant is left out, for its kernel only; a refused fallback raises
    :class:`FallbackRefused`."""

    def fix(step):
        if step.kind != "kernel":
            return step
        first, *rest = step.variants
        why = refusal(step.name, first.config)
        if why is not None:
            raise FallbackRefused(
                f"kernel '{step.name}' cannot run its fallback {first.name} at these dims: {why}"
            )
        kept = (first, *(v for v in rest if refusal(step.name, v.config) is None))
        return replace(step, variants=kept)

    return manifest.with_dims(
        dims, [fix(s) for s in manifest.steps], [fix(s) for s in manifest.backward_steps]
    )


class Plan:
    """A build's launch plan (the module docstring); read-only once made."""

    def __init__(self, manifest: Manifest, build: str, table):
        m = self.manifest = manifest
        self.name = m.name
        self.dynamic = m.dynamic
        self.static = m.static
        self.declared = {t.name: t for t in m.inputs}
        self.required = {n: t for n, t in self.declared.items() if t.required}
        self.grads_in = {t.name: t for t in m.grads_in}
        self.folded = {  # name -> declared shape folded (static ints, the dynamic dim's name)
            t.name: [dimmod.fold(d, dict(m.dims)) for d in t.shape] for t in m.inputs + m.grads_in
        }
        self.dynamic_at = self._dynamic_source()
        self.variants = {s.name: s.variants for s in m.kernel_steps()}
        self.names = {k: [v.name for v in vs] for k, vs in self.variants.items()}
        self.ranges = {
            s.name: f"{self.name}/{s.name} ({m.spec_file}:{s.line})" for s in m.all_steps
        }
        self.saved = saved_names(m)
        self.accumulable = {  # weight gradient -> the backward step whose kernel can add it
            s.d.tensor: s.name
            for s in m.backward_steps
            if s.kind == "kernel" and s.accumulate is not None
        }
        self.table = table
        self.tuned = tuned_rows(table, build, self.names, self.static)
        self._shapes = {n: shape_fn(t.shape) for n, t in m.tensors.items()}
        self._field_shapes = {  # by id: the manifest's fields live as long as the plan
            id(f): shape_fn(f.shape) for vs in self.variants.values() for v in vs for f in v.fields
        }

    def fold(self, expr):
        """A shape entry folded at the build's dims (an int, or the dynamic dim's name)."""
        return dimmod.fold(expr, dict(self.manifest.dims))

    def _dynamic_source(self):
        """(input, axis) that binds the dynamic dim on the unchecked path."""
        for name in self.required:
            for axis, d in enumerate(self.folded[name]):
                if d == self.dynamic:
                    return name, axis
        return None

    def shape(self, tensor: str, sizes: dict) -> tuple:
        return self._shapes[tensor](sizes)

    def field_shape(self, field, sizes: dict) -> tuple:
        fn = self._field_shapes.get(id(field)) or shape_fn(field.shape)
        return fn(sizes)

    def gemm_extents(self, step: KernelStep, sizes: dict) -> tuple[int, int, int]:
        """(M, N, K) of a kernel step's GEMM ``acc = a' @ b'`` at ``sizes``."""
        return gemm_extents(step, lambda t: self.shape(t, sizes))

    def launches(self, step: KernelStep, sizes: dict) -> bool:
        """Whether a kernel step launches its kernel at ``sizes``: not when its GEMM's M or N is
        empty (nothing to compute), nor when only K is empty and the epilogue stores ``acc``
        alone (the output is all zeros). Only an empty dynamic dim can make a GEMM empty, so a
        non-zero one answers at once."""
        if self.dynamic is not None and sizes.get(self.dynamic):
            return True
        m, n, k = self.gemm_extents(step, sizes)
        if m == 0 or n == 0:
            return False
        return k != 0 or not step.acc_only

    def describe(self, sizes: dict, backward: bool = False) -> list[tuple[str, str]]:
        """What a call at ``sizes`` would do, step by step: ``(step, what)`` with what =
        ``launch``, ``no launch`` (an empty GEMM), ``finalize``, ``folded`` (computed by the
        host kernel before it) or ``host``."""
        sizes = {**self.static, **sizes}
        m = self.manifest
        out = []
        for s in m.steps + (m.backward_steps if backward else ()):
            if s.kind == "kernel":
                out.append((s.name, "launch" if self.launches(s, sizes) else "no launch"))
            elif s.kind == "finalize" and s.folded_into:
                out.append((s.name, "folded"))
            else:
                out.append((s.name, s.kind))
        return out

    def variant(self, step: KernelStep, sizes: dict, forced: dict, picks: dict | None):
        """The variant a kernel step runs at ``sizes``: forced, else tuned (``picks``: the tune
        rows usable on this GPU), else ``variants[0]``."""
        index = forced.get(step.name)
        if index is None:
            index = 0
            rows = picks.get(step.name) if picks else None
            if rows:
                index = pick(rows, int(sizes.get(self.dynamic, 0)))
        return step.variants[index]
