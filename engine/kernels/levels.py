"""The instruction-set levels of every ISA-specific path, and the one switch that forces one: SPECDEC_ISA=avx512,
avx2 or portable runs the Q4×Q8 kernel's matrix paths and float loops (q4q8.py), torch's ATen kernels, oneDNN and
oneMKL (torch's float matrix products, its attention's among them) at that level, so that one machine runs the
code a smaller CPU would; unset, each path takes the CPU's best.

Torch-free: engine/__init__.py applies the switch to torch's own before torch loads.
"""
from __future__ import annotations

import os
from typing import NamedTuple

SWITCH = "SPECDEC_ISA"


class Level(NamedTuple):
    isa: int  # the kernel's `isa` argument (q4q8.c)
    aten: str  # ATEN_CPU_CAPABILITY
    onednn: str  # ONEDNN_MAX_CPU_ISA: below AMX for every level, so oneDNN leaves the tiles alone
    mkl: str  # MKL_ENABLE_INSTRUCTIONS
    flags: frozenset[str]  # what the level's code executes, as /proc/cpuinfo names it (q4q8_best_isa checks these)


LEVELS = {  # best first
    "avx512": Level(2, "avx512", "AVX512_CORE_VNNI", "AVX512", frozenset({"avx512f", "avx512bw", "avx512_vnni"})),
    "avx2": Level(1, "avx2", "AVX2", "AVX2", frozenset({"avx2", "fma", "f16c"})),
    "portable": Level(0, "default", "SSE41", "SSE4_2", frozenset()),
}


def cpu_flags() -> frozenset[str] | None:
    """The CPU's flags as Linux lists them, or None where /proc/cpuinfo cannot be read."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def forced() -> str | None:
    """The level SPECDEC_ISA names, or None where it is unset. A name that is no level, or a level this CPU cannot
    execute (where /proc/cpuinfo tells), raises ValueError in one line: running it would end in SIGILL."""
    name = os.environ.get(SWITCH)
    if not name:
        return None
    if name not in LEVELS:
        raise ValueError(f"{SWITCH}={name} is no level; the levels are {', '.join(LEVELS)}")
    flags = cpu_flags()
    if flags is not None and not LEVELS[name].flags <= flags:
        missing = " ".join(sorted(LEVELS[name].flags - flags))
        raise ValueError(f"{SWITCH}={name}: this CPU cannot execute that level (it lacks {missing})")
    return name


def force_torch() -> None:
    """torch's ATen kernels, oneDNN and oneMKL at SPECDEC_ISA's level. torch reads ATEN_CPU_CAPABILITY, oneDNN
    ONEDNN_MAX_CPU_ISA and oneMKL MKL_ENABLE_INSTRUCTIONS once, when torch loads or first multiplies, and torch
    takes the capability on trust (one the CPU lacks crashes on its first instruction): so this must run before
    torch is imported, and `forced` refuses such a level first. A value the environment sets already is kept.
    A refused level leaves torch at the CPU's best: the kernel asks `forced` again where a command first needs it
    (q4q8.isa), and the command says why in one line there, where an import could only print a traceback."""
    try:
        name = forced()
    except ValueError:
        return
    if name is not None:
        os.environ.setdefault("ATEN_CPU_CAPABILITY", LEVELS[name].aten)
        os.environ.setdefault("ONEDNN_MAX_CPU_ISA", LEVELS[name].onednn)
        os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", LEVELS[name].mkl)
