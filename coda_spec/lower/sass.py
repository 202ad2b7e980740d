"""Cut the sm_90a cubins out of an exported object and disassemble them with triton's nvdisasm.

Used by ``coda build`` to drop config variants whose SASS spills registers to local memory
(``STL``/``LDL``), and by the build tests. nvdisasm comes with triton (QuACK needs it at build
time); without it the spill check is skipped and says so.

The exported object embeds the cubin raw (cuobjdump sees nothing in the .o): every ELF image
after the host object's own header with e_machine EM_CUDA is a cubin. Its size is the larger of
the section-header and program-header table ends.
"""

from __future__ import annotations

import collections
import os
import re
import struct
import subprocess
from pathlib import Path

EM_CUDA = 190


def nvdisasm_path() -> Path | None:
    try:
        import triton
    except ImportError:
        return None
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    return p if p.is_file() else None


def cubins(obj: Path) -> list[bytes]:
    buf = obj.read_bytes()
    out = []
    for m in list(re.finditer(b"\x7fELF", buf))[1:]:
        o = m.start()
        if buf[o + 4] != 2 or struct.unpack_from("<H", buf, o + 0x12)[0] != EM_CUDA:
            continue
        e_phoff, e_shoff = struct.unpack_from("<QQ", buf, o + 0x20)
        _, phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHHH", buf, o + 0x34)
        size = max(e_shoff + shentsize * shnum, e_phoff + phentsize * phnum)
        out.append(buf[o : o + size])
    return out


def arch_of(cubin: bytes, workdir: Path) -> str:
    """The target as cuobjdump names it, e.g. 'sm_90a' (the 'a' = arch-specific features)."""
    path = workdir / f"arch-{os.getpid()}-{id(cubin)}.cubin"
    path.write_bytes(cubin)
    try:
        res = subprocess.run(
            [str(nvdisasm_path().with_name("cuobjdump")), "-elf", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        path.unlink()
    m = re.search(r"\bsm=(\w+)", res.stdout)
    return f"sm_{m.group(1)}" if m else "unknown"


def opcodes(cubin: bytes, workdir: Path) -> collections.Counter:
    path = workdir / f"cubin-{os.getpid()}-{id(cubin)}.cubin"
    path.write_bytes(cubin)
    try:
        res = subprocess.run(
            [str(nvdisasm_path()), "-c", str(path)], capture_output=True, text=True, check=True
        )
    finally:
        path.unlink()
    ops = collections.Counter()
    pat = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
    for line in res.stdout.splitlines():
        m = pat.search(line)
        if m:
            ops[m.group(1)] += 1
    return ops


def spills(obj: Path, workdir: Path) -> int | None:
    """Local-memory instructions (STL + LDL) in every cubin of an exported object; None when
    nvdisasm is not available."""
    if nvdisasm_path() is None:
        return None
    total = 0
    for cubin in cubins(obj):
        ops = opcodes(cubin, workdir)
        total += ops.get("STL", 0) + ops.get("LDL", 0)
    return total
