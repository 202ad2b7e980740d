"""The build root's layout: where ``coda build`` puts a build, and how the other commands find it.

Layout of a build root (``coda build -o/--builds ROOT``, default ``build``)::

    ROOT/<name>-<hash>/          a build: <hash> = 12 hex digits, the content address
                                 (coda_spec.build.build_hash); complete once manifest.json is in
    ROOT/<name>-latest           a symlink to the newest complete build of the spec named <name>
    ROOT/.tmp-<name>-<hash>-<pid>/   a build in progress (renamed into place when complete)
    ROOT/<name>-<hash>.failed/   the logs of a failed build

A build records where it came from: ``spec_file`` (the path as ``coda build`` was given it),
``digest`` (the spec's content hash, ``Spec.digest``) and ``configs`` in ``manifest.json``, and
the same in ``lowered.json`` for a build that stopped before the manifest or failed.

* :func:`prune` removes the builds of the same spec file and the same configs as the builds
  kept, and dead ``.tmp-`` directories; builds of another config, or of another file with the
  same ``name:``, stay.
* Two spec files with one ``name:`` share one ``-latest`` link: ``coda build`` refuses them in
  one run, and across runs the link follows the newest build (``coda_spec.check.target.resolve``
  then tells the other file's user that the newest build differs from their spec).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from coda_spec.artifact import MANIFEST

HASH_LEN = 12
LATEST = "-latest"
TMP_PREFIX = ".tmp-"
FAILED = ".failed"
LOWERED = "lowered.json"


def build_name(name: str, digest: str) -> str:
    """``<name>-<hash>``: a build directory's name."""
    return f"{name}-{digest}"


def latest(out: Path, name: str) -> Path:
    """``out/<name>-latest``."""
    return Path(out) / f"{name}{LATEST}"


def tmp_dir(final: Path) -> Path:
    """Where the build of ``final`` happens: ``.tmp-<name>-<hash>-<pid>`` beside it."""
    return final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"


def failed_name(tmp: Path) -> str:
    """``.tmp-<dir>-<pid>`` -> ``<dir>.failed`` (where a failed build's logs are kept)."""
    return tmp.name[len(TMP_PREFIX) :].rsplit("-", 1)[0] + FAILED


def is_build(name: str) -> bool:
    """``<name>-<12 hex>`` or ``<name>-<12 hex>.failed``."""
    base = name[: -len(FAILED)] if name.endswith(FAILED) else name
    _, dash, h = base.rpartition("-")
    return bool(dash) and len(h) == HASH_LEN and all(c in "0123456789abcdef" for c in h)


def point_latest(out: Path, name: str, final: Path) -> None:
    """Point ``out/<name>-latest`` at ``final`` (atomically: a symlink renamed over it)."""
    tmp = Path(out) / f".{name}{LATEST}.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(final.name, tmp)
    os.replace(tmp, latest(out, name))


def publish(tmp: Path, final: Path, replace: bool = False) -> None:
    """Rename a finished ``tmp`` into ``final``. A complete build already there wins (a
    concurrent build of the same content finished first), unless ``replace`` (``coda build
    --force``: the user asked for this build, so the old one is moved aside and removed)."""
    if final.exists():
        if (final / MANIFEST).is_file() and not replace:
            shutil.rmtree(tmp)  # a concurrent build finished first: keep theirs
            return
        old = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.rename(final, old)  # an incomplete (--stop-after) build, or --force: replace it
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if (final / MANIFEST).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise


def record(directory: Path) -> dict | None:
    """What a build says about itself: its manifest, else its lowered.json; None if neither
    reads."""
    for f in (MANIFEST, LOWERED):
        try:
            data = json.loads((Path(directory) / f).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def origin(directory: Path) -> tuple | None:
    """(spec name, spec file as an absolute path, configs): the builds :func:`prune` treats as
    one lineage. None when the build does not say (it is never pruned then)."""
    data = record(directory)
    if data is None or not data.get("spec_file"):
        return None
    configs = data.get("configs") or [data.get("config")]
    name = data.get("name") or data.get("spec")
    return (name, str(Path(data["spec_file"]).resolve()), json.dumps(configs, sort_keys=True))


def prune(out: Path, kept) -> list[Path]:
    """Remove the builds under ``out`` made from the same spec file with the same configs as a
    build in ``kept`` (but not ``kept`` themselves), and ``.tmp-`` directories of dead
    processes. Returns what was removed."""
    out = Path(out)
    removed: list[Path] = []
    if not out.is_dir():
        return removed
    kept = [Path(d) for d in kept if str(d) not in ("", ".")]
    names = {d.resolve().name for d in kept}
    lineages = {origin(d) for d in kept} - {None}
    for d in sorted(out.iterdir()):
        if d.name.startswith(TMP_PREFIX) and d.is_dir():
            pid = d.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
            continue
        if d.is_symlink() or not d.is_dir() or not is_build(d.name) or d.name in names:
            continue
        if origin(d) in lineages:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
