"""The tune file format, read side: what the runtime reads to pick a kernel's variant.

``coda tune`` (``coda_spec.tune``) measures and writes these files; the runtime
(``coda_spec.runtime``) only reads them, through :func:`load_table`. The format, the search path
and the runtime's rule are documented in ``coda_spec.tune`` and docs/tuning.md. This module is
split from ``tune`` so that the runtime, a lower layer, imports nothing that times or drives
the bench (an import contract in CI checks the direction): json, os and pathlib only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from coda_spec.config import config_text, parse_config

FORMAT = 1
ENV = "CODA_TUNED"  # a tune file, or a directory of *.json
DEFAULT_DIR = "tuned"  # ./tuned/*.json when $CODA_TUNED is not set
# The table shipped in the package (issue 21): coda tune's picks for the bundled specs' builds at
# the benchmarked shapes, searched after the user's own files
BUNDLED_DIR = Path(__file__).parent.parent / "tuned"
INLINE = "<tune table>"  # the "path" of a table passed as a dict
RULERS = ("sustained", "isolated")  # an entry's "ruler" (coda_spec.bench.timing's names)


def check_margin(margin) -> float:
    """``margin`` as a float, or ValueError: a fraction of the fallback's median, 0 <= m < 1."""
    ok = isinstance(margin, (int, float)) and not isinstance(margin, bool) and 0 <= margin < 1
    if not ok:
        raise ValueError(
            f"--margin {margin!r}: must be a fraction at least 0 and below 1 (0.03: a variant "
            "must be 3% faster than the fallback to replace it)"
        )
    return float(margin)


@dataclass(frozen=True)
class TuneTable:
    """Tune files as read: ``sources`` is ((path, validated data), ...) in search order."""

    sources: tuple = ()

    def builds(self, key: str) -> list[tuple[str, dict]]:
        """(path, build entry) of every source with an entry for build ``key``."""
        return [(p, d["builds"][key]) for p, d in self.sources if key in d["builds"]]

    def untuned_sources(self, key: str, spec: str) -> list[str]:
        """The files to name when build ``key`` of spec ``spec`` has no entry: the user's own
        (every source but the package's table), or the package's table when it holds another
        build of the same spec (a build it was tuned for, at another hash); else none."""
        mine = [p for p, _ in self.sources if Path(p).parent != BUNDLED_DIR]
        if mine:
            return mine
        return [
            p
            for p, d in self.sources
            if any(k.rsplit("-", 1)[0] == spec and k != key for k in d["builds"])
        ]


def _bad(path, why: str) -> ValueError:
    return ValueError(f"{path}: not a coda tune file (format {FORMAT}): {why}")


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _entry(path, where: str, row) -> dict:
    if not isinstance(row, dict):
        raise _bad(path, f"{where} is not an object")
    dims = row.get("dims")
    if not isinstance(dims, dict) or not all(
        isinstance(k, str) and _int(v) for k, v in dims.items()
    ):
        raise _bad(path, f"{where}.dims must map dim names to integers")
    if not _int(row.get("m_max")) or row["m_max"] < 0:
        raise _bad(path, f"{where}.m_max must be a non-negative integer")
    if not isinstance(row.get("config"), str):
        raise _bad(path, f"{where}.config must be a config text (128x256,cluster=2x1,...)")
    try:
        config = config_text(parse_config(row["config"]).key())
    except ValueError as e:
        raise _bad(path, f"{where}.config {row['config']!r}: {e}") from e
    ms = row.get("ms")
    if ms is not None and not isinstance(ms, (int, float)):
        raise _bad(path, f"{where}.ms must be a number")
    cands = row.get("candidates", {})
    if not isinstance(cands, dict) or not all(v is None or _num(v) for v in cands.values()):
        raise _bad(path, f"{where}.candidates must map config texts to milliseconds")
    out = dict(row, dims=dict(dims), config=config, candidates=dict(cands))
    # optional since the margin rule (pick_winner); older files have none of them
    if "margin" in row:
        try:
            out["margin"] = check_margin(row["margin"])
        except ValueError as e:
            raise _bad(path, f"{where}.margin must be a number, 0 <= margin < 1") from e
    if "rounds" in row and not (_int(row["rounds"]) and row["rounds"] >= 1):
        raise _bad(path, f"{where}.rounds must be a positive integer")
    if "spread" in row:
        spread = row["spread"]
        if not isinstance(spread, dict) or not all(
            v is None or (isinstance(v, (list, tuple)) and len(v) == 2 and all(map(_num, v)))
            for v in spread.values()
        ):
            raise _bad(path, f"{where}.spread must map config texts to [p20, p80] milliseconds")
        out["spread"] = {k: None if v is None else list(v) for k, v in spread.items()}
    # optional since the sustained ruler (coda_spec.tune): how it was timed, and its telemetry
    if "ruler" in row and row["ruler"] not in RULERS:
        raise _bad(path, f"{where}.ruler must be one of {', '.join(RULERS)}")
    for key in ("clock_mhz", "watts", "joules"):
        got = row.get(key, {})
        if not isinstance(got, dict) or not all(v is None or _num(v) for v in got.values()):
            raise _bad(path, f"{where}.{key} must map config texts to numbers (or null)")
    return out


def validate(data, path=INLINE) -> dict:
    """A tune file's data, checked; config texts normalized. ValueError naming ``path``."""
    if not isinstance(data, dict):
        raise _bad(path, "the top level is not an object")
    if data.get("format") != FORMAT:
        raise _bad(path, f"format is {data.get('format')!r}, expected {FORMAT}")
    builds = data.get("builds")
    if not isinstance(builds, dict):
        raise _bad(path, "'builds' must be an object keyed by build directory name")
    out = {}
    for key, b in builds.items():
        where = f"builds[{key!r}]"
        if not isinstance(b, dict):
            raise _bad(path, f"{where} is not an object")
        if not isinstance(b.get("gpu"), str) or not b["gpu"]:
            raise _bad(path, f"{where}.gpu must name the GPU it was measured on")
        kernels = b.get("kernels")
        if not isinstance(kernels, dict):
            raise _bad(path, f"{where}.kernels must map kernel steps to lists of entries")
        fixed = {}
        for step, rows in kernels.items():
            if not isinstance(rows, list):
                raise _bad(path, f"{where}.kernels[{step!r}] is not a list")
            fixed[step] = [
                _entry(path, f"{where}.kernels[{step!r}][{i}]", r) for i, r in enumerate(rows)
            ]
        out[key] = dict(b, kernels=fixed)
    return dict(data, builds=out)


def read_file(path) -> dict:
    """One tune file, validated (ValueError naming the path when it is malformed)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise _bad(path, f"invalid JSON: {e}") from e
    except UnicodeDecodeError as e:
        raise _bad(path, f"not UTF-8 text: {e}") from e
    return validate(data, path)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.json"))
    if path.is_file():
        return [path]
    raise FileNotFoundError(f"{path}: no such tune file or directory")


def default_paths() -> list[Path]:
    """``$CODA_TUNED`` (a file or a directory of *.json), else ``./tuned/*.json`` if any; then
    the package's own table (``BUNDLED_DIR``), so a user's picks come first."""
    env = os.environ.get(ENV)
    if env:
        mine = _files(Path(env))
    else:
        here = Path(DEFAULT_DIR)
        mine = sorted(here.glob("*.json")) if here.is_dir() else []
    return mine + sorted(BUNDLED_DIR.glob("*.json"))


def load_table(tuned=None) -> TuneTable:
    """``tuned``: None (the default search path), a file or directory path, a tune file's data
    (a dict), a :class:`TuneTable`, or False (no table)."""
    if isinstance(tuned, TuneTable):
        return tuned
    if tuned is False:
        return TuneTable()
    if isinstance(tuned, dict):
        return TuneTable(((INLINE, validate(tuned, INLINE)),))
    paths = default_paths() if tuned is None else _files(Path(tuned))
    return TuneTable(tuple((str(p), read_file(p)) for p in paths))
