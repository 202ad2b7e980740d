"""The shipped table's picks before the re-tune at the cap, moved onto today's llama3 builds.

    python benchmarks/old_picks.py OLD_TABLE.json BUILD_ROOT OUT.json

Before issue 32 the llama3 builds compiled three candidates and `coda tune` picked among them with
the isolated ruler. Today's builds compile eight candidates, those three among them, so each old
pick names a variant today's build still has: this writes a table keyed by today's builds
(BUILD_ROOT/<spec>-latest) whose picks are the old ones, kernel by kernel, so that
benchmarks/train_step.py can run the same model under both tables (mode ``coda@old``). The LM
head's kernels moved from llama3_last to llama3_last_mlp and llama3_lm_head; ``lm_head_logits``
takes the pick of the old ``lm_head_lse`` (the same GEMM, another epilogue). A kernel with no old
pick is left out (it runs its fallback).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coda_spec.config import config_text

# today's spec -> the old specs whose kernels it took over
SOURCES = {
    "llama3_first": ("llama3_first",),
    "llama3_layer": ("llama3_layer",),
    "llama3_last_mlp": ("llama3_last",),
    "llama3_lm_head": ("llama3_last",),
}
RENAMED = {"lm_head_logits": "lm_head_lse"}


def main(argv: list[str]) -> int:
    old_path, root, out = argv
    old = json.loads(Path(old_path).read_text())
    by_spec, meta = {}, {}
    for build in old["builds"].values():
        by_spec.setdefault(build["spec"], build["kernels"])
        meta.setdefault(build["spec"], {k: v for k, v in build.items() if k != "kernels"})
    builds = {}
    for spec, sources in SOURCES.items():
        latest = Path(root) / f"{spec}-latest"
        if not latest.exists():
            print(f"old_picks: no {latest}; skipped", file=sys.stderr)
            continue
        manifest = json.loads((latest / "manifest.json").read_text())
        variants = {config_text(c) for c in manifest["configs"]}
        every = manifest["steps"] + manifest["backward_steps"]
        kernels = {}
        for step in (s["step"] for s in every if s.get("kind") == "kernel"):
            name = RENAMED.get(step, step)
            for src in sources:
                rows = by_spec.get(src, {}).get(name)
                kept = [
                    {**r, "candidates": {r["config"]: r["ms"]}, "spread": {}}
                    for r in rows or []
                    if r["config"] in variants
                ]
                if kept:
                    kernels[step] = kept
                    break
        first = meta[sources[0]]
        note = (
            f"the picks of {', '.join(sources)} as tuned {first.get('date', '?')} (isolated "
            "ruler, three candidates), moved onto this build by benchmarks/old_picks.py"
        )
        builds[latest.resolve().name] = {**first, "spec": spec, "note": note, "kernels": kernels}
        print(f"{latest.resolve().name}: old picks for {len(kernels)} kernel(s)", file=sys.stderr)
    Path(out).write_text(json.dumps({"format": old["format"], "builds": builds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
