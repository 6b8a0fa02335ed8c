#!/usr/bin/env python3
"""Finds inline functions that an ISA-specific object could lend to every caller.

A few sources are compiled with -mavx2 or -mavx512* (src/kernels/CMakeLists.txt). An inline
function or template instance they use is emitted as a weak (COMDAT) copy in their object, and
the linker keeps one copy of each for the whole program. If the kept copy is the AVX-512 one,
every caller gets it, and on a CPU without AVX-512 the first call faults (SIGILL). That happened
on 2026-12-02: a header's error check, built into the AVX2 and the AVX-512 kernels, faulted on
an AVX2-only CPU under ASan, which did not inline it.

For every weak function that an object built for a wider ISA defines and an object built for a
narrower one also defines, this disassembles the wider object's copy and fails if the copy uses
that ISA's encoding: EVEX (AVX-512) in AVX-512 objects, VEX (AVX / AVX2) in AVX2 objects.

Usage: check-isa-inlines.py BUILD_DIR (a configured and built folder with compile_commands.json)
"""
import json
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict

LEVELS = {"base": 0, "avx2": 1, "avx512": 2}
# The first opcode byte of an instruction that needs the level: EVEX is 0x62 in 64-bit mode
# (BOUND is invalid there); VEX is 0xc4 / 0xc5.
ENCODING_PREFIXES = {"avx2": {"c4", "c5"}, "avx512": {"62"}}
INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\s+((?:[0-9a-f]{2} )+)")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
LEGACY_PREFIXES = {"26", "2e", "36", "3e", "64", "65", "66", "67", "f0", "f2", "f3"}


def level_of(arguments):
    if any(a.startswith("-mavx512") for a in arguments):
        return "avx512"
    if "-mavx2" in arguments:
        return "avx2"
    return "base"


def objects(build_dir):
    """(object path, ISA level) for every compiled source of the build."""
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    out = []
    for e in entries:
        args = e.get("arguments") or shlex.split(e["command"])
        output = e.get("output") or args[args.index("-o") + 1]
        path = os.path.join(e["directory"], output)
        if os.path.exists(path):
            out.append((path, level_of(args)))
    return out


def weak_functions(path):
    text = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True,
                          check=True).stdout
    fields = (line.split() for line in text.splitlines())
    return {f[2] for f in fields if len(f) == 3 and f[1] == "W"}


def functions_using(path, prefixes, wanted):
    """Names in `wanted` whose code in the object has an instruction starting with `prefixes`."""
    text = subprocess.run(["objdump", "-d", "-w", path], capture_output=True, text=True,
                          check=True).stdout
    found, current = set(), None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = m.group(1) if m.group(1) in wanted else None
            continue
        m = INSTRUCTION.match(line) if current else None
        if m:
            opcode = next((b for b in m.group(1).split() if b not in LEGACY_PREFIXES), "")
            if opcode in prefixes:
                found.add(current)
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    objs = objects(sys.argv[1])
    if not any(level != "base" for _, level in objs):
        sys.exit(f"{sys.argv[1]}: no object built with -mavx2 / -mavx512 (is it built?)")
    weak = {path: weak_functions(path) for path, _ in objs}
    lowest = defaultdict(lambda: LEVELS["avx512"])  # weak function -> narrowest level defining it
    for path, level in objs:
        for name in weak[path]:
            lowest[name] = min(lowest[name], LEVELS[level])
    problems = []
    for path, level in objs:
        if level == "base":
            continue
        shared = {name for name in weak[path] if lowest[name] < LEVELS[level]}
        for name in sorted(functions_using(path, ENCODING_PREFIXES[level], shared)):
            demangled = subprocess.run(["c++filt", name], capture_output=True,
                                       text=True).stdout.strip()
            problems.append(f"{os.path.basename(path)} ({level}): {demangled}")
    for p in problems:
        print(p)
    print(f"{len(problems)} weak function(s) with {'/'.join(ENCODING_PREFIXES)} code that a "
          f"narrower object also defines ({len(objs)} objects)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
