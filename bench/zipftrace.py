"""Writes the miss-path benchmark's trace: Zipf(1.0) references over a million pages, as
libCacheSim's oracleGeneral records (`python3 bench/zipftrace.py OUT [REFERENCES] [PAGES]`).

Ranks are drawn by inverting the Zipf CDF (weights 1/k) with numpy's PCG64 under seed 1, then
mapped through a fixed random permutation so popular pages are scattered over the page space, as
in a real heap. Replayed with 1,000 frames, about 60 % of references miss (the issue's point)."""

import os
import sys

import numpy as np

def main() -> None:
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
    pages = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    rng = np.random.default_rng(1)
    cdf = np.cumsum(1.0 / np.arange(1, pages + 1))
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), pages - 1)
    ids = rng.permutation(pages)[ranks].astype(np.uint64) + 1
    rec = np.zeros(n, dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec["t"] = np.arange(n, dtype=np.uint32)
    rec["id"] = ids
    rec["size"] = 4096
    rec["next"] = -1
    tmp = out + ".tmp"
    rec.tofile(tmp)

    os.replace(tmp, out)

if __name__ == "__main__":
    main()
