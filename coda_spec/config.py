"""Build configuration: the GEMM tile/cluster/schedule of a kernel, and a build's candidates.

The default (``DEFAULT``: 128 x 256 tile, 2 x 1 cluster, cooperative, two C subtiles
prefetched) is the untuned pick, chosen from the tune data at the power cap: over the llama3
model chains' 57 kernel x shape points, timed on the H200 the way a training step runs them (a
sustained stream at 700 W), it was within 5% of the fastest candidate in 48 and 2.4% off it in
geometric mean, where the earlier pick (pingpong 128 x 128, 2 x 1) was within 5% in 29. That
earlier pick had won on kernels timed alone after an L2 flush, at clocks no training step gets
(docs/tuning.md, "The untuned pick", has both tables). ``BuildConfig()``'s own field defaults
are the cooperative 128 x 256 tile without the epilogue knob, so that a manifest's config key
stays as short as it was. Pingpong needs tile_N <= 208 at tile_M = 128 (QuACK 0.6.5). A config
is one frozen object passed down through lowering, compile and manifest.

A build compiles each kernel at one or more candidate configs (``--config A;B;C`` or ``auto``):
every candidate a kernel's primitives support, and whose SASS does not spill, becomes a variant
of that kernel in the same library; the first candidate is every kernel's fallback, and
``coda tune`` measures which variant to use per shape (docs/tuning.md). The candidate list is
part of the build's content hash. Measured on the H200 (docs/benchmarks.md): no single config
wins; b2 ran 1.25-2.45x its GEMM at D = 2048 across eight configs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from coda_spec import dims as dimmod


@dataclass(frozen=True)
class KernelSizes:
    """The problem sizes a primitive's ``supports(config, sizes, op)`` judges a config at: the
    spec's static dims and the kernel's GEMM N (0 when it is dynamic). They are the problem's,
    not the config's: one config is judged at the build's sizes and again at each of verify's
    re-sized cases, so they travel beside the config, never on it."""

    dims: tuple = ()  # ((dim, size), ...) of the static dims
    width: int = 0  # the kernel's N
    fp8: bool = False  # the GEMM's operands are fp8 (``gemm_refusal``'s register rule)

    @classmethod
    def of(cls, spec, info) -> KernelSizes:
        """The sizes of kernel ``info`` (its StepInfo) of ``spec`` (an ``ir.Spec``)."""
        dims = tuple((d.name, d.size) for d in spec.dims if d.size is not None)
        fp8 = any(dt.startswith("fp8") for dt in info.operands)
        return cls(dims, info.width if isinstance(info.width, int) else 0, fp8)

    def fold(self, expr) -> int:
        return dimmod.evaluate(expr, dict(self.dims))


@dataclass(frozen=True)
class BuildConfig:
    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 2
    cluster_n: int = 1
    pingpong: bool = False
    # Epilogue knobs (0 = QuACK's choice). ``epi_n`` is the width of the epilogue subtile the
    # output tile is stored and its C/tile operands loaded in (its height is fixed by the
    # schedule: 128 rows when a cooperative tile's two warpgroups split M, else 64, QuACK's
    # ``GemmSm90._compute_tile_shape_or_override``); ``c_stages`` is how many subtiles of C the
    # epilogue prefetches before QuACK tops it up from smem left below one more mainloop stage.
    # Both trade epilogue smem for mainloop (A/B) stages: b2's default config gets only 2 A/B
    # stages next to 5 C stages (docs/benchmarks.md).
    epi_n: int = 0
    c_stages: int = 0

    def key(self) -> dict:
        d = asdict(self)
        for knob in EPILOGUE_KNOBS:  # QuACK's choice is left out: older builds keep their hash
            if not d[knob]:
                d.pop(knob)
        return d

    def acc_per_thread(self) -> int:
        """fp32 accumulator elements each MMA thread holds: the tile over the 128 threads of
        each warpgroup that shares it (pingpong: one; cooperative: QuACK 0.6.5's atom layout,
        ``GemmSm90.__init__``: tile_M / 64 warpgroups, 2 from tile_M = 256 on, 3 at 192 x
        <= 128, 2 at 192 x wider and at 320)."""
        if self.pingpong:
            groups = 1
        elif self.tile_m == 192:
            groups = 3 if self.tile_n <= 128 else 2
        elif self.tile_m == 320:
            groups = 2
        else:
            groups = max(self.tile_m // 64, 1) if self.tile_m < 256 else 2
        return self.tile_m * self.tile_n // (128 * groups)

    def problems(self) -> list[str]:
        """Tile rules of QuACK's sm90 GEMM that are independent of the epilogue."""
        out = []
        if self.pingpong:
            limits = {64: 256, 128: 208, 192: 128}
            if self.tile_m not in limits:
                out.append(f"pingpong needs tile_M in {sorted(limits)}")
            elif self.tile_n > limits[self.tile_m] or self.tile_n % 16:
                out.append(
                    f"pingpong at tile_M={self.tile_m} needs tile_N <= "
                    f"{limits[self.tile_m]}, a multiple of 16"
                )
        else:
            if self.tile_m not in (64, 128, 192, 256, 320):
                out.append("cooperative needs tile_M in {64, 128, 192, 256, 320}")
            if not (self.tile_n % 16 == 0 and self.tile_n <= 256) and not (
                self.tile_n % 32 == 0 and self.tile_n <= 512
            ):
                out.append("tile_N must be a multiple of 16 up to 256 (or of 32 up to 512)")
        if self.cluster_m * self.cluster_n not in (1, 2, 4):
            out.append("cluster size must be 1, 2 or 4")
        if self.epi_n and (self.epi_n not in (16, 32, 64) or self.tile_n % self.epi_n):
            out.append(
                f"epi={self.epi_n}: the epilogue width must be 16, 32 or 64 and divide "
                f"tile_N={self.tile_n}"
            )
        if not 0 <= self.c_stages <= 8:
            out.append(f"cstages={self.c_stages} must be 1 to 8")
        return out


EPILOGUE_KNOBS = ("epi_n", "c_stages")

# The untuned pick: every kernel's config when neither --config nor the spec's configs: name one
# (the module docstring says why this one).
DEFAULT = BuildConfig(c_stages=2)


# ``--config auto``: issue 9's candidate space, the default (cooperative 128x256, 2x1,
# cstages=2) first (every kernel's fallback): cooperative 128x256, 256x128, 128x128 and pingpong
# 128x192, 128x128, 128x64, each at clusters 2x1, 1x2 and 1x1, plus four epilogue-stage
# variants at cluster 2x1 (22 candidates; a kernel keeps those its primitives support and whose
# SASS does not spill). Compile cost grows with it: about 22x a one-config build. QuACK's own
# sm90 autotuner space (quack.gemm_config.get_all_configs) has no 1x1 cluster and adds 192x128
# pingpong and 128x160/224, 256x160/192 tiles; measured here (docs/benchmarks.md), a 1x1
# cluster was the second-best b2 config at D = 2048, so it stays in.
_TILES = (
    ("128x256", "cooperative"),
    ("256x128", "cooperative"),
    ("128x128", "cooperative"),
    ("128x192", "pingpong"),
    ("128x128", "pingpong"),
    ("128x64", "pingpong"),
)
_DEFAULT_TEXT = "128x256,cluster=2x1,cooperative,cstages=2"  # DEFAULT, in --config syntax
AUTO = (
    _DEFAULT_TEXT,
    *(
        f"{tile},cluster={cluster},{schedule}"
        for tile, schedule in _TILES
        for cluster in ("2x1", "1x2", "1x1")
    ),
    # Measured on b2 (docs/benchmarks.md): a narrower epilogue subtile or a shallower C prefetch
    # buys the mainloop a third A/B stage (cooperative 128x256: 3.84 -> 2.57 ms at D = 4096), and
    # 128x192 pingpong, which spills at QuACK's epilogue subtile, fits at epi=16. (The fourth,
    # cstages=2, is the default, first.)
    "128x256,cluster=2x1,cooperative,epi=16",
    "128x128,cluster=2x1,pingpong,epi=16",
    "128x192,cluster=2x1,pingpong,epi=16",
)


def config_text(key: dict) -> str:
    """A config (``BuildConfig.key()``, a manifest's ``config``) in ``--config`` syntax."""
    head = "{m}x{n},cluster={cm}x{cn},{sched}"
    return _spell(key, head, ("cooperative", "pingpong"), ",epi={}", ",cstages={}")


def _spell(key: dict, head: str, schedules: tuple, epi: str, cstages: str) -> str:
    """``config_text`` / ``config_tag``: the head, then each epilogue knob that is set."""
    text = head.format(
        m=key["tile_m"],
        n=key["tile_n"],
        cm=key["cluster_m"],
        cn=key["cluster_n"],
        sched=schedules[bool(key["pingpong"])],
    )
    if key.get("epi_n"):
        text += epi.format(key["epi_n"])
    if key.get("c_stages"):
        text += cstages.format(key["c_stages"])
    return text


def parse_config(text: str | None) -> BuildConfig:
    """``--config 128x192,cluster=1x1,pingpong`` (any subset, comma separated)."""
    cfg = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if part in ("pingpong", "cooperative"):
            cfg["pingpong"] = part == "pingpong"
        elif part.startswith("cluster="):
            m, n = part.split("=", 1)[1].lower().split("x")
            cfg["cluster_m"], cfg["cluster_n"] = int(m), int(n)
        elif part.startswith("epi="):
            cfg["epi_n"] = int(part.split("=", 1)[1])
        elif part.startswith("cstages="):
            cfg["c_stages"] = int(part.split("=", 1)[1])
        elif "x" in part and part.replace("x", "").isdigit():
            m, n = part.lower().split("x")
            cfg["tile_m"], cfg["tile_n"] = int(m), int(n)
        else:
            raise ValueError(
                f"unknown config item {part!r}; e.g. 128x256,cluster=2x1,cooperative "
                "(optional: epi=16, cstages=2)"
            )
    return BuildConfig(**cfg)


def parse_configs(text: str | None) -> tuple[BuildConfig, ...]:
    """``--config``: one config, ``A;B;C`` (candidates, the first is the fallback) or ``auto``."""
    if text is not None and text.strip() == "auto":
        return tuple(parse_config(t) for t in AUTO)
    parts = [p for p in (text or "").split(";") if p.strip()]
    configs = tuple(parse_config(p) for p in parts) or (DEFAULT,)
    seen = []
    for c in configs:
        if c in seen:
            raise ValueError(f"config {config_text(c.key())} is listed twice")
        seen.append(c)
    return configs


def config_tag(key: dict) -> str:
    """A config as a symbol suffix: ``128x128_c2x1_pp``, ``128x256_c2x1_coop_e16_cs2``."""
    return _spell(key, "{m}x{n}_c{cm}x{cn}_{sched}", ("coop", "pp"), "_e{}", "_cs{}")
