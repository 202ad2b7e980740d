"""Build configuration: the GEMM tile/cluster/schedule of a kernel, and a build's candidates.

The default (128 x 256 tile, 2 x 1 cluster, cooperative) compiles every bundled spec without
register spills on sm_90a; pingpong needs tile_N <= 208 at tile_M = 128 (QuACK 0.6.5). A config
is one frozen object passed down through lowering, compile and manifest.

A build compiles each kernel at one or more candidate configs (``--config A;B;C`` or ``auto``):
every candidate a kernel's primitives support, and whose SASS does not spill, becomes a variant
of that kernel in the same library; the first candidate is every kernel's fallback, and
``coda tune`` measures which variant to use per shape (docs/tuning.md). The candidate list is
part of the build's content hash. Measured on the H200 (docs/benchmarks.md): no single config
wins; b2 ran 1.25-2.45x its GEMM at D = 2048 across eight configs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from coda_spec import dims as dimmod


@dataclass(frozen=True)
class BuildConfig:
    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 2
    cluster_n: int = 1
    pingpong: bool = False
    sizes: tuple = field(default=(), compare=False)  # ((dim, size), ...) for supports() checks
    width: int = 0  # the kernel's N, set per kernel for supports() checks

    def fold(self, expr) -> int:
        return dimmod.evaluate(expr, dict(self.sizes))

    def key(self) -> dict:
        d = asdict(self)
        d.pop("sizes")
        d.pop("width")
        return d

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
        return out


# ``--config auto``: issue 9's candidate space, the default first (every kernel's fallback):
# cooperative 128x256, 256x128, 128x128 and pingpong 128x192, 128x128, 128x64, each at clusters
# 2x1, 1x2 and 1x1 (18 candidates; a kernel keeps those its primitives support and whose SASS
# does not spill). Compile cost grows with it: about 18x a one-config build. QuACK's own sm90
# autotuner space (quack.gemm_config.get_all_configs) has no 1x1 cluster and adds 192x128
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
AUTO = tuple(
    f"{tile},cluster={cluster},{schedule}"
    for tile, schedule in _TILES
    for cluster in ("2x1", "1x2", "1x1")
)


def config_text(key: dict) -> str:
    """A config (``BuildConfig.key()``, a manifest's ``config``) in ``--config`` syntax."""
    schedule = "pingpong" if key["pingpong"] else "cooperative"
    return (
        f"{key['tile_m']}x{key['tile_n']},cluster={key['cluster_m']}x{key['cluster_n']},{schedule}"
    )


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
        elif "x" in part and part.replace("x", "").isdigit():
            m, n = part.lower().split("x")
            cfg["tile_m"], cfg["tile_n"] = int(m), int(n)
        else:
            raise ValueError(f"unknown config item {part!r}; e.g. 128x256,cluster=2x1,cooperative")
    return BuildConfig(**cfg)


def parse_configs(text: str | None) -> tuple[BuildConfig, ...]:
    """``--config``: one config, ``A;B;C`` (candidates, the first is the fallback) or ``auto``."""
    if text is not None and text.strip() == "auto":
        return tuple(parse_config(t) for t in AUTO)
    parts = [p for p in (text or "").split(";") if p.strip()]
    configs = tuple(parse_config(p) for p in parts) or (BuildConfig(),)
    seen = []
    for c in configs:
        if c in seen:
            raise ValueError(f"config {config_text(c.key())} is listed twice")
        seen.append(c)
    return configs


def config_tag(key: dict) -> str:
    """A config as a symbol suffix: ``128x128_c2x1_pp``."""
    schedule = "pp" if key["pingpong"] else "coop"
    return f"{key['tile_m']}x{key['tile_n']}_c{key['cluster_m']}x{key['cluster_n']}_{schedule}"
