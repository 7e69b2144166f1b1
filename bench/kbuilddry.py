#!/usr/bin/env python3
"""What a configured Linux tree compiles, counted from kbuild's dry run (docs/sources/tmem.md 6.2, 6.5).

    make O=$O ARCH=x86_64 CROSS_COMPILE= KCFLAGS=-fno-pie prepare scripts
    make O=$O ARCH=x86_64 CROSS_COMPILE= KCFLAGS=-fno-pie -n -k V=1 all > dry.txt
    python3 bench/kbuilddry.py dry.txt $O $TREE

Prints, as JSON: kernel C units built in and as module code (`-DMODULE`), their `.c` bytes (total,
mean, median), the modules (`KBUILD_MODNAME`s of module units), the directories that link a
`built-in.o` with `ld -r`, and whether the units compile with `-g` (CONFIG_DEBUG_INFO).
Host programs and `scripts/` are left out; generated sources absent in a dry run are counted as
missing.
"""

import json
import os
import re
import statistics
import sys

COMPILE = re.compile(r" -c -o (\S+\.o) (\S+\.c)(?:'|;|\s|$)")
MODNAME = re.compile(r"KBUILD_MODNAME=KBUILD_STR\(([^)]*)\)")
BUILTIN = re.compile(r" -o (\S*built-in\.o) ")


def main(dry: str, out_dir: str, tree: str) -> None:
    units: dict[str, dict] = {}
    dirs = set()
    for line in open(dry, errors="replace"):
        m = COMPILE.search(line)
        if m:
            cmd = line[: m.end()]
            src = m.group(2)
            kernel = "-D__KERNEL__" in cmd and "-nostdinc" in cmd
            if kernel and not os.path.relpath(src, tree).startswith("scripts/"):
                name = MODNAME.search(cmd)
                units[m.group(1)] = {
                    "src": src,
                    "module": "-DMODULE" in cmd,
                    "modname": name.group(1) if name else None,
                    "debug": re.search(r" -g(\s|$)", cmd) is not None,
                }
        for b in BUILTIN.findall(line):
            dirs.add(os.path.dirname(b) or ".")

    def size(path: str):
        for p in (path, os.path.join(out_dir, path), os.path.join(tree, path)):
            if os.path.isfile(p):
                return os.path.getsize(p)
        return None

    def stats(sel: list) -> dict:
        sizes = [s for s in (size(u["src"]) for u in sel) if s is not None]
        return {
            "units": len(sel),
            "missing_sources": len(sel) - len(sizes),
            "bytes": sum(sizes),
            "mean": statistics.mean(sizes) if sizes else 0,
            "median": statistics.median(sizes) if sizes else 0,
        }

    every = list(units.values())
    print(json.dumps({
        "builtin": stats([u for u in every if not u["module"]]),
        "module": stats([u for u in every if u["module"]]),
        "modules": len({u["modname"] for u in every if u["module"]}),
        "builtin_o_dirs": len(dirs),
        "units_with_debug_info": sum(u["debug"] for u in every),
    }, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: kbuilddry.py DRY_RUN_LOG BUILD_DIR TREE")
    main(*sys.argv[1:])
