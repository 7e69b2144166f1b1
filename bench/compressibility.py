#!/usr/bin/env python3
"""How well a workload's memory compresses, page by page, with real compressors.

A host compression cache (VMware ESX memory compression; Xen tmem, Linux zram/zswap) keeps a page
compressed only if it shrinks enough: ESX keeps it only at <= 2 KiB, half a page. What matters is
therefore the *distribution* of compressed page sizes of real workload pages, not a single ratio.
This script measures it:

  snapshot   start a program (or attach to a PID), let it reach a steady state, stop it (SIGSTOP),
             read every resident private anonymous page of its process tree through
             /proc/PID/maps, /proc/PID/pagemap (present bit, PFN) and /proc/PID/mem, and compress
             each 4 KiB page independently with LZO1X-1, zlib level 1 and LZ4; or, with --file,
             read regular files in 4 KiB pages (the page-cache contents of files a workload wrote).
             Writes one workload's histograms as TOML (stdout or -o); with --pages, also the
             pages themselves (all, or a uniform sample with --sample) and their sizes, as a
             page set: the engine's contents (crates/memvisor/src/content/data/pages/).
  merge      combine snapshot outputs into the data file the engine embeds
             (crates/memvisor/src/content/data/compressibility.toml).
  workload   the two workloads this script carries itself: `seed003` writes and compiles seed
             003's stress program (section 4.3.1 of its paper), `pyheap` builds a Python heap of
             mixed objects and then sleeps.

Histogram: bins named by their inclusive upper edge in bytes. Edge 0 holds zero pages (every byte
zero: hosts keep those as a flag, not compressed), 256 holds pages compressing to 1..256 bytes,
512 to 257..512, ..., 3840 to 3585..3840, 4095 to 3841..4095, and 4096 the pages that do not
compress (compressed size >= 4096). "Fits half a page" is therefore the sum of the bins with edge
<= 2048. Run with the project's venv: `.venv/bin/python bench/compressibility.py --help`.
Needs root (pagemap PFNs, /proc/PID/mem of other processes, memory cgroups) and the PyPI
packages python-lzo (needs liblzo2-dev to build) and lz4. bench/compressibility.md says how the
committed data was made.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import importlib.metadata
import os
import platform
import random
import re
import select
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib

PAGE = 4096
BIN_WIDTH = 256
HALF_PAGE = PAGE // 2
# Inclusive upper edges of the bins; see the module docstring.
EDGES = [0] + list(range(BIN_WIDTH, PAGE - BIN_WIDTH + 1, BIN_WIDTH)) + [PAGE - 1, PAGE]
ZERO = bytes(PAGE)
# The reservoir sampler's seed (any fixed value: the sample must be the same every run).
SAMPLE_SEED = 2026
CGROUP_ROOT = "/sys/fs/cgroup/memory"

# pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst)
PM_PRESENT = 1 << 63
PM_SWAP = 1 << 62
PM_FILE_OR_SHARED_ANON = 1 << 61
PM_EXCLUSIVE = 1 << 56
PM_PFN_MASK = (1 << 55) - 1
# kpageflags bits (include/uapi/linux/kernel-page-flags.h)
KPF_THP = 22
KPF_ZERO_PAGE = 24
KPF_KSM = 21


def log(*a):
    print("compressibility:", *a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Compressors: each 4 KiB page on its own, as a host compresses it.


def compressors():
    """(key, description, function page -> compressed size). Errors say what to install."""
    try:
        import lzo  # python-lzo
    except ImportError:  # pragma: no cover - environment
        sys.exit("compressibility: needs python-lzo (apt-get install liblzo2-dev; .venv/bin/pip install python-lzo)")
    try:
        import lz4
        import lz4.block
    except ImportError:  # pragma: no cover - environment
        sys.exit("compressibility: needs lz4 (.venv/bin/pip install lz4)")
    lzo_v = lzo.LZO_VERSION_STRING.decode() if isinstance(lzo.LZO_VERSION_STRING, bytes) else lzo.LZO_VERSION_STRING
    return [
        # python-lzo's level 1 calls lzo1x_1_compress (the LZO1X-1 of Linux's lib/lzo and zram);
        # header=False leaves out python-lzo's own 5-byte header, so the size is the raw stream.
        (
            "lzo",
            f"LZO1X-1 (liblzo2 {lzo_v}, python-lzo {importlib.metadata.version('python-lzo')}), raw stream, no header",
            lambda p: len(lzo.compress(p, 1, False)),
        ),
        # Raw deflate (no zlib header/trailer), as the kernel's deflate crypto used by zswap.
        (
            "zlib",
            f"zlib level 1, raw deflate window 15 (zlib {zlib.ZLIB_RUNTIME_VERSION})",
            lambda p: len(zlib.compress(p, 1, -15)),
        ),
        # LZ4_compress_default (acceleration 1) block, no size prefix, as the kernel's lz4.
        (
            "lz4",
            f"LZ4 block, default acceleration 1, no size prefix (liblz4 {lz4.library_version_string()}, python lz4 {lz4.__version__})",
            lambda p: len(lz4.block.compress(p, mode="default", store_size=False)),
        ),
    ]


def bin_index(size: int, zero: bool) -> int:
    if zero:
        return 0
    if size >= PAGE:
        return len(EDGES) - 1
    if size > PAGE - BIN_WIDTH:
        return len(EDGES) - 2
    return max(1, (size + BIN_WIDTH - 1) // BIN_WIDTH)


class Tally:
    """Compressed sizes per compressor of the distinct pages seen; with `keep`, the pages too:
    all of them in the order read (`keep=0`), or a uniform sample of `keep` (reservoir sampling,
    Vitter's algorithm R, with a fixed seed: the same snapshot gives the same sample)."""

    def __init__(self, keep: int | None = None):
        self.comps = compressors()
        self.sizes = {k: [] for k, _, _ in self.comps}
        self.zero = []
        self.pages = 0
        self.keep = keep
        self.kept: list[int] = []  # indices of the kept pages
        self.kept_bytes: list[bytes] = []
        self._rng = random.Random(SAMPLE_SEED)

    def add(self, page: bytes):
        assert len(page) == PAGE
        i = self.pages
        self.pages += 1
        z = page == ZERO
        self.zero.append(z)
        for k, _, f in self.comps:
            self.sizes[k].append(f(page))
        if self.keep == 0 or (self.keep and len(self.kept) < self.keep):
            self.kept.append(i)
            self.kept_bytes.append(page)
        elif self.keep:
            j = self._rng.randrange(i + 1)
            if j < self.keep:
                self.kept[j] = i
                self.kept_bytes[j] = page

    def write_pages(self, path: str):
        """Writes the kept pages and their compressed sizes as a page set (`.mvpages`, read by
        crates/memvisor/src/content/pageset.rs): a zstd frame of the magic `MVPAGES1`, u32 page
        count, u32 compressor count, per compressor a u8 key length and its key, per compressor
        a u16 size per page, then the pages. Sampled pages keep the order they were read in."""
        order = sorted(range(len(self.kept)), key=lambda j: self.kept[j])
        idx = [self.kept[j] for j in order]
        out = bytearray(b"MVPAGES1")
        out += struct.pack("<II", len(idx), len(self.comps))
        for k, _, _ in self.comps:
            out += struct.pack("<B", len(k)) + k.encode()
        for k, _, _ in self.comps:
            out += struct.pack(f"<{len(idx)}H", *(self.sizes[k][i] for i in idx))
        for j in order:
            out += self.kept_bytes[j]
        subprocess.run(["zstd", "-19", "-q", "-f", "-o", path], input=bytes(out), check=True)

    def add_run(self, data: bytes):
        for off in range(0, len(data), PAGE):
            self.add(data[off : off + PAGE])

    def summary(self) -> dict:
        out = {}
        nonzero = [i for i, z in enumerate(self.zero) if not z]
        for k, desc, _ in self.comps:
            counts = [0] * len(EDGES)
            for s, z in zip(self.sizes[k], self.zero):
                counts[bin_index(s, z)] += 1
            nz = sorted(self.sizes[k][i] for i in nonzero)
            allsizes = sorted(0 if z else s for s, z in zip(self.sizes[k], self.zero))
            out[k] = {
                "compressor": desc,
                "edges": list(EDGES),
                "counts": counts,
                "within_half_page": sum(c for c, e in zip(counts, EDGES) if e <= HALF_PAGE),
                "incompressible": counts[-1],
                "median_bytes": median(allsizes),
                "median_nonzero_bytes": median(nz),
                "mean_nonzero_bytes": round(sum(nz) / len(nz), 1) if nz else 0,
                "p10_nonzero_bytes": quantile(nz, 0.10),
                "p90_nonzero_bytes": quantile(nz, 0.90),
            }
            assert sum(counts) == self.pages
        return out


def median(xs):
    return quantile(xs, 0.5)


def quantile(xs, q):
    """Nearest-rank quantile of a sorted list (0 for an empty one)."""
    if not xs:
        return 0
    i = min(len(xs) - 1, max(0, int(-(-q * len(xs) // 1)) - 1))
    return xs[i]


# --------------------------------------------------------------------------------------------
# Process memory


ANON_NAMES = re.compile(r"^(\[heap\]|\[stack\]|\[stack:\d+\]|\[anon:.*\])$")


def selected_vmas(pid: int):
    """Private anonymous mappings (no file), [heap], [stack] and named anon ([anon:...])."""
    out, skipped = [], {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            rng, perms = parts[0], parts[1]
            name = parts[5].strip() if len(parts) > 5 else ""
            lo, hi = (int(x, 16) for x in rng.split("-"))
            if perms[3] != "p":
                why = "shared"
            elif name and not ANON_NAMES.match(name):
                why = "file or special (" + ("file" if name.startswith("/") else name) + ")"
            elif perms[:3] == "---":
                why = "inaccessible (guard or reservation)"
            else:
                out.append((lo, hi, name or "[anon]"))
                continue
            skipped[why] = skipped.get(why, 0) + (hi - lo) // PAGE
    return out, skipped


def wchan(pid: int) -> str:
    """Where the process waits in the kernel (empty while it runs)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read().strip()
    except OSError:
        return ""


class KPageFlags:
    def __init__(self):
        self.fd = os.open("/proc/kpageflags", os.O_RDONLY)

    def get(self, pfn: int) -> int:
        b = os.pread(self.fd, 8, pfn * 8)
        return int.from_bytes(b, "little") if len(b) == 8 else 0

    def close(self):
        os.close(self.fd)


def snapshot_process(pids, tally: Tally, stats: dict):
    """Reads the resident private anonymous pages of `pids`, each physical page once."""
    import numpy as np

    seen_pfns: set[int] = set()
    kpf = KPageFlags()
    per_process = []
    for pid in pids:
        try:
            vmas, skipped = selected_vmas(pid)
            pm = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
            mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError, PermissionError) as e:
            log(f"pid {pid}: {e}")
            continue
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        mine = dict(pid=pid, comm=comm, pages=0, shared_with_other_process=0, zero_page_mappings=0, swapped=0,
                    not_present=0, file_or_shared=0, thp_pages=0, ksm_pages=0, unreadable=0)
        for k, v in skipped.items():
            stats["skipped_mapping_pages"][k] = stats["skipped_mapping_pages"].get(k, 0) + v
        for lo, hi, _name in vmas:
            CH = 1 << 18  # pagemap entries per read (2 MiB of entries, 1 GiB of address space)
            for start in range(lo, hi, CH * PAGE):
                end = min(hi, start + CH * PAGE)
                n = (end - start) // PAGE
                raw = os.pread(pm, n * 8, start // PAGE * 8)
                ent = np.frombuffer(raw, dtype="<u8")
                present = (ent & np.uint64(PM_PRESENT)) != 0
                mine["swapped"] += int(((ent & np.uint64(PM_SWAP)) != 0).sum())
                mine["not_present"] += int((~present).sum()) - int(((ent & np.uint64(PM_SWAP)) != 0).sum())
                idx = np.nonzero(present)[0]
                take = []
                for i in idx.tolist():
                    e = int(ent[i])
                    pfn = e & PM_PFN_MASK
                    fl = kpf.get(pfn)
                    if fl >> KPF_ZERO_PAGE & 1:
                        mine["zero_page_mappings"] += 1
                        continue
                    if e & PM_FILE_OR_SHARED_ANON:
                        mine["file_or_shared"] += 1
                        continue
                    if pfn in seen_pfns:
                        mine["shared_with_other_process"] += 1
                        continue
                    seen_pfns.add(pfn)
                    mine["thp_pages"] += fl >> KPF_THP & 1
                    mine["ksm_pages"] += fl >> KPF_KSM & 1
                    take.append(i)
                # read consecutive runs, at most 1 MiB per pread (the reader's memory stays small)
                j = 0
                while j < len(take):
                    k = j
                    while k + 1 < len(take) and take[k + 1] == take[k] + 1 and k + 1 - j < 256:
                        k += 1
                    addr = start + take[j] * PAGE
                    ln = (k - j + 1) * PAGE
                    try:
                        data = os.pread(mem, ln, addr)
                    except OSError:
                        data = b""
                    if len(data) == ln:
                        tally.add_run(data)
                        mine["pages"] += k - j + 1
                    else:  # page by page
                        for t in range(j, k + 1):
                            try:
                                p = os.pread(mem, PAGE, start + take[t] * PAGE)
                            except OSError:
                                p = b""
                            if len(p) == PAGE:
                                tally.add(p)
                                mine["pages"] += 1
                            else:
                                mine["unreadable"] += 1
                    j = k + 1
        os.close(pm)
        os.close(mem)
        per_process.append(mine)
    kpf.close()
    stats["processes"] = per_process
    for k in ("zero_page_mappings", "swapped", "shared_with_other_process", "file_or_shared", "thp_pages",
              "ksm_pages", "unreadable"):
        stats[k] = sum(p[k] for p in per_process)


# --------------------------------------------------------------------------------------------
# Files


def resident_pages(path: str):
    """Pages of `path` in the page cache (util-linux fincore, i.e. mincore(2)); None if unknown."""
    try:
        r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                           capture_output=True, text=True, check=True)
        return int(r.stdout.split()[0]) // PAGE
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def snapshot_files(paths, tally: Tally, stats: dict):
    files = []
    for path in paths:
        size = os.path.getsize(path)
        # Page-cache residency at the snapshot, before our own reads change it.
        resident = resident_pages(path)
        with open(path, "rb", buffering=0) as f:
            while True:
                data = f.read(PAGE * 256)
                if not data:
                    break
                if len(data) % PAGE:
                    data += bytes(PAGE - len(data) % PAGE)  # a page-cache page's tail is zero
                tally.add_run(data)
        files.append(dict(path=path, bytes=size, pages=(size + PAGE - 1) // PAGE, resident_pages_at_snapshot=resident))
    stats["files"] = files


# --------------------------------------------------------------------------------------------
# Memory cgroup (v1)


class MemCgroup:
    """A child memory cgroup of the caller's own, holding this script and the workload it starts."""

    def __init__(self, name: str, limit: int):
        own = "/"
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrl, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctrl.split(","):
                    own = path
        self.parent = os.path.join(CGROUP_ROOT, own.lstrip("/"))
        self.path = os.path.join(self.parent, name)
        os.mkdir(self.path)
        try:
            self.write("memory.limit_in_bytes", str(limit))
            self.write("memory.swappiness", "0")
            self.limit = int(self.read("memory.limit_in_bytes"))
            self.write("cgroup.procs", str(os.getpid()))
        except BaseException:
            os.rmdir(self.path)
            raise
        log(f"memory cgroup {self.path} limit {self.limit} bytes")

    def write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def read(self, f):
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def stat(self) -> dict:
        s = {}
        for line in self.read("memory.stat").splitlines():
            k, v = line.split()
            if k in ("rss", "rss_huge", "cache", "mapped_file", "swap", "pgmajfault"):
                s[k] = int(v)
        for k in ("usage_in_bytes", "max_usage_in_bytes", "failcnt"):
            s[k] = int(self.read("memory." + k))
        for line in self.read("memory.oom_control").splitlines():
            k, v = line.split()
            if k == "oom_kill":
                s["oom_kill"] = int(v)
        return s

    def remove(self):
        with open(os.path.join(self.parent, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
        for _ in range(50):
            procs = self.read("cgroup.procs").split()
            if not procs:
                break
            time.sleep(0.1)
        try:
            self.write("memory.force_empty", "0")
        except OSError:
            pass
        for _ in range(50):
            try:
                os.rmdir(self.path)
                log(f"removed {self.path}")
                return
            except OSError:
                time.sleep(0.1)
        log(f"could not remove {self.path}")


def parse_bytes(s: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


# --------------------------------------------------------------------------------------------
# Process trees


def descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        if os.path.exists(f"/proc/{p}"):
            out.append(p)
        todo.extend(kids.get(p, []))
    return sorted(out)


def rss_kib(pids) -> int:
    t = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        t += int(line.split()[1])
        except OSError:
            pass
    return t


def oom_first():
    """In the workload, before exec: should it outgrow the cgroup's limit, the OOM killer is to
    pick it rather than this reader (which then could not clean up). Raising one's own
    oom_score_adj needs no privilege."""
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")


def signal_tree(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------------------------
# snapshot


def cmd_snapshot(a):
    if os.geteuid() != 0:
        sys.exit("compressibility: run as root (pagemap PFNs, /proc/PID/mem, memory cgroups)")
    started = _dt.datetime.now(_dt.timezone.utc)
    tally = Tally(keep=a.sample if a.pages else None)
    stats: dict = {"skipped_mapping_pages": {}}
    cg = None
    child = None
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if a.cgroup:
            cg = MemCgroup(a.cgroup, a.mem_limit)
        if a.command:
            prompts = bool(a.prompt or a.until)
            child = subprocess.Popen(
                a.command,
                start_new_session=True,
                stdin=subprocess.PIPE if prompts else subprocess.DEVNULL,
                stdout=subprocess.PIPE if prompts else sys.stderr.fileno(),
                cwd=a.cwd,
                preexec_fn=oom_first,
            )
            root = child.pid
            log(f"started pid {root}: {' '.join(a.command)}")
        else:
            root = a.pid
        t0 = time.monotonic()
        if a.until:
            drive_prompts(child, a.prompt, a.until, a.timeout)
            log(f"saw {a.until!r} after {time.monotonic() - t0:.1f} s")
        deadline = time.monotonic() + a.settle
        samples = []
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                raise SystemExit(f"compressibility: the workload exited (status {child.returncode}) before the snapshot")
            samples.append((round(time.monotonic() - t0, 1), rss_kib(descendants(root))))
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        if child is not None and child.poll() is not None:
            raise SystemExit(f"compressibility: the workload exited (status {child.returncode}) before the snapshot")
        pids = descendants(root)
        stats["rss_anon_kib_samples"] = samples[-10:]
        stats["states_before_stop"] = {str(p): (state_letter(p) + " " + wchan(p)).strip() for p in pids}
        if not a.file and not a.no_freeze:
            signal_tree(pids, signal.SIGSTOP)
            time.sleep(0.2)
        stats["elapsed_s_at_snapshot"] = round(time.monotonic() - t0, 1)
        if cg:
            stats["cgroup"] = cg.stat()
            if stats["cgroup"].get("oom_kill"):
                raise SystemExit(f"compressibility: the OOM killer ran in the cgroup ({stats['cgroup']}); raise --mem-limit")
        if a.file:
            paths = sorted({p for g in a.file for p in glob.glob(g, recursive=True) if os.path.isfile(p)})
            if not paths:
                raise SystemExit(f"compressibility: no file matches {a.file}")
            log(f"reading {len(paths)} file(s): {paths}")
            snapshot_files(paths, tally, stats)
        else:
            log(f"reading process tree {pids}")
            snapshot_process(pids, tally, stats)
        stats["measure_s"] = round(time.monotonic() - t0 - stats["elapsed_s_at_snapshot"], 1)
        if child is None and not a.kill and not a.file and not a.no_freeze:
            signal_tree(pids, signal.SIGCONT)
    except KeyboardInterrupt:
        log(f"interrupted ({interrupted or 'SIGINT'}); cleaning up")
        raise SystemExit(130)
    finally:
        if child is not None or a.kill:
            victims = descendants(child.pid if child is not None else a.pid)
            signal_tree(victims, signal.SIGKILL)
            signal_tree(victims, signal.SIGCONT)
            if child is not None:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.wait()
            log(f"killed {victims}")
        if cg:
            cg.remove()
        for s, h in old.items():
            signal.signal(s, h)

    summary = tally.summary()
    doc = {
        "name": a.name,
        "kind": "file" if a.file else "anon",
        "source": a.source or "",
        "command": " ".join(a.command) if a.command else f"attached to pid {a.pid}",
        "measured_at": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": platform.release(),
        "os": os_release(),
        "settle_s": a.settle,
        "cgroup_limit_bytes": cg.limit if cg else 0,
        "pages": tally.pages,
        "zero_pages": sum(tally.zero),
        "stats": stats,
        **summary,
    }
    if a.pages:
        tally.write_pages(a.pages)
        doc["page_set"] = {"file": os.path.basename(a.pages), "pages": len(tally.kept),
                           "how": f"uniform sample of {a.sample} (reservoir, seed {SAMPLE_SEED})" if a.sample else "every page, in the order read"}
    text = to_toml_workload(doc)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
        log(f"wrote {a.output}")
    else:
        sys.stdout.write(text)
    lz = summary["lzo"]
    log(f"{a.name}: {tally.pages} pages, zero {doc['zero_pages']}, LZO1X-1 <= 2 KiB "
        f"{lz['within_half_page']} ({lz['within_half_page'] / max(1, tally.pages):.3f}), median {lz['median_bytes']} B")


def drive_prompts(child, prompt, until, timeout):
    """Answers the workload's prompts (lines matching `prompt`) with a newline until a line
    matches `until`; bonnie++ -y p prompts "N:" before each of its tests and waits for a line."""
    pr = re.compile(prompt) if prompt else None
    un = re.compile(until)
    buf = b""
    end = time.monotonic() + timeout
    fd = child.stdout.fileno()
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 1.0)
        if not r:
            if child.poll() is not None:
                raise SystemExit(f"compressibility: the workload exited (status {child.returncode}) before {until!r}")
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise SystemExit(f"compressibility: the workload closed its output before {until!r}")
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            s = line.decode(errors="replace")
            print(f"  | {s}", file=sys.stderr, flush=True)
            if un.search(s):
                return
            if pr and pr.search(s):
                child.stdin.write(b"\n")
                child.stdin.flush()
    raise SystemExit(f"compressibility: timed out waiting for {until!r}")


def state_letter(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rindex(")") + 2]
    except OSError:
        return "?"


def os_release() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return ""


# --------------------------------------------------------------------------------------------
# TOML (written by hand: the standard library reads TOML but does not write it)


def tq(s) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def tv(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(tv(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{tk(k)} = {tv(x)}" for k, x in v.items() if x is not None) + " }"
    return tq(v)


def tk(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else tq(k)


COMPRESSOR_KEYS = ("lzo", "zlib", "lz4")


def to_toml_workload(doc: dict) -> str:
    name = doc["name"]
    out = [f"[{tk(name)}]"]
    for k in ("kind", "source", "command", "measured_at", "kernel", "os", "settle_s", "cgroup_limit_bytes",
              "pages", "zero_pages"):
        out.append(f"{k} = {tv(doc[k])}")
    st = doc.get("stats", {})
    flat = {k: v for k, v in st.items() if not isinstance(v, (list, dict))}
    if flat:
        out.append(f"snapshot = {tv(flat)}")
    if st.get("cgroup"):
        out.append(f"cgroup = {tv(st['cgroup'])}")
    if st.get("rss_anon_kib_samples"):
        out.append(f"rss_anon_kib_samples = {tv([list(x) for x in st['rss_anon_kib_samples']])}  # [s since start, KiB] before the snapshot")
    if st.get("states_before_stop"):
        out.append(f"states_before_stop = {tv(st['states_before_stop'])}  # pid: state wchan")
    if st.get("skipped_mapping_pages"):
        out.append(f"skipped_mapping_pages = {tv(st['skipped_mapping_pages'])}")
    if st.get("files"):
        out.append("files = [" + ", ".join(tv(f) for f in st["files"]) + "]")
    if st.get("processes"):
        procs = [{k: p[k] for k in ("pid", "comm", "pages", "zero_page_mappings", "shared_with_other_process", "swapped", "thp_pages")}
                 for p in st["processes"]]
        out.append("processes = [" + ", ".join(tv(p) for p in procs) + "]")
    if doc.get("page_set"):
        out.append(f"page_set = {tv(doc['page_set'])}  # the pages themselves, for the engine (data/pages/)")
    for ck in COMPRESSOR_KEYS:
        c = doc[ck]
        out.append("")
        out.append(f"[{tk(name)}.{ck}]")
        for k in ("compressor", "edges", "counts", "within_half_page", "incompressible", "median_bytes",
                  "median_nonzero_bytes", "mean_nonzero_bytes", "p10_nonzero_bytes", "p90_nonzero_bytes"):
            out.append(f"{k} = {tv(c[k])}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# merge


DATA_HEADER = """\
# Compressed sizes of real 4 KiB workload pages, measured with real compressors.
# Made by bench/compressibility.py (how, and how to redo it: bench/compressibility.md);
# read by crates/memvisor/src/content/compressibility.rs.
#
# One table per workload, the whole snapshot's histograms: [<workload>.lzo] is LZO1X-1,
# [<workload>.zlib] zlib level 1 (raw deflate), [<workload>.lz4] LZ4 default. The engine reads
# each table's `pages` and `zero_pages`, and its page_set (data/pages/<workload>.mvpages: a
# uniform sample of real pages with their sizes under all three); its tests check the sample
# against these histograms. In each histogram, `counts[i]` pages compressed to a size s with edges[i-1] < s <= edges[i]:
#   edge 0      zero pages (every byte zero; counted apart: hosts keep them as a flag);
#   edges 256, 512, ..., 3840   bins of 256 bytes (256 = 1..256 bytes, 512 = 257..512, ...);
#   edge 4095   3841..4095 bytes;
#   edge 4096   does not compress (compressed size >= 4096; stored as a whole page).
# ESX keeps a page compressed only at <= 2048 bytes: `within_half_page` = the pages in the bins
# with edge <= 2048, zero pages included. `pages` = sum(counts); `zero_pages` = counts[0].
# median_bytes counts zero pages as 0 bytes; median_nonzero_bytes, mean_nonzero_bytes,
# p10/p90_nonzero_bytes are over the non-zero pages; all are exact (from every page, not the bins).
"""


def cmd_merge(a):
    import tomllib

    parts = []
    names = []
    for path in a.inputs:
        with open(path) as f:
            text = f.read()
        doc = tomllib.loads(text)  # every part must parse on its own
        for name, t in doc.items():
            for ck in COMPRESSOR_KEYS:
                c = t[ck]
                assert c["edges"] == EDGES, f"{path}: {name}.{ck}: other bin edges"
                assert sum(c["counts"]) == t["pages"], f"{path}: {name}.{ck}: counts do not add up to pages"
                assert c["counts"][0] == t["zero_pages"], f"{path}: {name}.{ck}: zero pages"
            names.append(name)
        parts.append(text.strip() + "\n")
    if len(set(names)) != len(names):
        sys.exit(f"compressibility: a workload appears twice: {names}")
    text = DATA_HEADER + "\n" + "\n".join(parts)
    if a.comment:
        text = DATA_HEADER + "#\n" + "".join(f"# {line}\n" for line in textwrap.wrap(a.comment, 96)) + "\n" + "\n".join(parts)
    tomllib.loads(text)
    with open(a.output, "w") as f:
        f.write(text)
    log(f"wrote {a.output}: {', '.join(names)}")


# --------------------------------------------------------------------------------------------
# workloads carried here


# Seed 003 (/work/shared/seeds/003_db5d19de35ee11a3.txt), section 4.3.1, verbatim, with the two
# #include lines the listing leaves out. Note: the listing increments virtualMemory[i] before it
# tests i == 61036, so it also touches index 61036, one page past the 61,036 allocated; that
# page lies in the tail of malloc's mmap chunk (61,037 pages) for j < 1020.
SEED003_C = r"""#include <stdio.h>
#include <stdlib.h>

struct page {
    int buf[1024];
} typedef page;

int main() {
    // 61036 pages to makes 0.122072 GB
    page* virtualMemory = malloc(sizeof(page)*61036);

    int i = 0;
    int j = 0;
    while(1) {
        virtualMemory[i].buf[j]++;
        if (i == 61036) {
            i = 0;
            j++;
            if (j == 1023) {
                j = 0;
            }
        }
        i++;
    }
}
"""


def cmd_workload(a):
    if a.which == "seed003":
        os.makedirs(a.dir, exist_ok=True)
        src = os.path.join(a.dir, "seed003_stress.c")
        exe = os.path.join(a.dir, "seed003_stress")
        with open(src, "w") as f:
            f.write(SEED003_C)
        cc = ["cc", "-O0", "-o", exe, src]
        subprocess.run(cc, check=True)
        print(exe)
        log(f"built {exe} with {' '.join(cc)}")
    elif a.which == "pyheap":
        pyheap(a.mb)


def pyheap(mb: int):
    """A managed-runtime application heap: a few hundred MB of the objects a service keeps
    (records as dicts with strings, ints, floats, dates, lists of tags; an index dict; text
    blobs; a few bytes buffers; class instances), built deterministically, then kept unchanged."""
    import random

    rnd = random.Random(20261122)
    first = ["anna", "bob", "carla", "dmitri", "eve", "farid", "grace", "hiro", "ines", "jon", "kemal", "lena",
             "mateo", "nadia", "oskar", "priya", "quinn", "rosa", "sven", "tomoko", "uma", "viktor", "wen", "ximena"]
    last = ["smith", "garcia", "müller", "rossi", "tanaka", "kowalski", "nguyen", "dubois", "silva", "jensen",
            "novak", "haddad", "okafor", "larsen", "ivanova", "chen", "kaur", "moreau", "costa", "berg"]
    words = ("the of and to in is for on that by this with from at as are was be or an it not which have "
             "memory page host guest balloon swap reclaim cache kernel process thread file disk network "
             "order customer invoice payment shipping status pending complete error retry timeout user "
             "session token request response latency queue worker batch report account region zone").split()
    tags = ["gold", "silver", "new", "vip", "eu", "us", "apac", "mobile", "web", "b2b", "trial", "churn-risk"]

    class Event:
        __slots__ = ("kind", "at", "user", "payload")

        def __init__(self, kind, at, user, payload):
            self.kind, self.at, self.user, self.payload = kind, at, user, payload

    class Session:
        def __init__(self, sid, user, started):
            self.sid = sid
            self.user = user
            self.started = started
            self.pages = [rnd.randrange(1, 5000) for _ in range(rnd.randrange(1, 12))]
            self.agent = f"Mozilla/5.0 (X11; Linux x86_64) Gecko/{rnd.randrange(2010, 2026)}0101 Firefox/{rnd.randrange(60, 130)}.0"

    import resource

    records, index, events, sessions, blobs, buffers = [], {}, [], [], [], []
    base = 1_700_000_000
    target = mb * 1024
    i = 0
    while True:
        name = f"{rnd.choice(first).title()} {rnd.choice(last).title()}"
        rec = {
            "id": i,
            "name": name,
            "email": f"{name.lower().replace(' ', '.')}{rnd.randrange(1000)}@example.{rnd.choice(['com', 'org', 'net'])}",
            "balance": round(rnd.uniform(-500, 50_000), 2),
            "score": rnd.random(),
            "created": _dt.datetime.fromtimestamp(base + rnd.randrange(10**8), _dt.timezone.utc).isoformat(),
            "tags": rnd.sample(tags, rnd.randrange(0, 4)),
            "visits": [rnd.randrange(0, 10**6) for _ in range(rnd.randrange(0, 8))],
            "address": (rnd.randrange(1, 400), rnd.choice(words).title() + " Street", f"{rnd.randrange(10000, 99999)}"),
            "active": rnd.random() < 0.8,
        }
        records.append(rec)
        index[rec["email"]] = i
        if i % 3 == 0:
            events.append(Event(rnd.choice(["login", "view", "buy", "logout"]), base + i, i,
                                {"ref": rnd.randrange(10**9), "ok": rnd.random() < 0.95}))
        if i % 7 == 0:
            sessions.append(Session(f"{rnd.getrandbits(64):016x}", i, base + i))
        if i % 50 == 0:
            blobs.append(" ".join(rnd.choice(words) for _ in range(rnd.randrange(50, 400))))
        if i % 5000 == 0:
            # an I/O buffer as a service keeps them: allocated zeroed, part filled by the last
            # message read (a binary header, then text), the rest untouched
            b = bytearray(rnd.randrange(4096, 65536))
            fill = rnd.randrange(len(b))
            msg = rnd.randbytes(64) + " ".join(rnd.choice(words) for _ in range(fill // 5)).encode()
            b[:fill] = msg[:fill]
            buffers.append(b)
        i += 1
        if i % 20000 == 0 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >= target:
            break
    print(f"pyheap: {i} records, {len(events)} events, {len(sessions)} sessions, {len(blobs)} texts, "
          f"{len(buffers)} buffers; maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} KiB; ready", flush=True)
    keep = (records, index, events, sessions, blobs, buffers)
    while True:
        time.sleep(3600)
        del keep  # never reached; keeps the references alive until then


# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See bench/compressibility.md for the commands that made the committed data.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("snapshot", help="measure one workload (a process tree's anonymous pages, or files)")
    s.add_argument("--name", required=True, help="the workload's table name in the TOML")
    s.add_argument("--source", help="free text saying what was run and why (goes into the TOML)")
    s.add_argument("--pid", type=int, help="attach to this process (and its descendants) instead of starting one")
    s.add_argument("--kill", action="store_true", help="with --pid: kill the process tree afterwards")
    s.add_argument("--settle", type=float, default=10.0, help="seconds to wait before the snapshot (steady state)")
    s.add_argument("--file", action="append", help="measure these files (glob, expanded at the snapshot) instead of process memory")
    s.add_argument("--prompt", help="regex: answer the workload's output lines that match with a newline on its stdin")
    s.add_argument("--until", help="regex: wait for an output line matching this before settling (e.g. a test phase)")
    s.add_argument("--timeout", type=float, default=600, help="seconds to wait for --until")
    s.add_argument("--no-freeze", action="store_true", help="do not SIGSTOP the process tree while reading it")
    s.add_argument("--cgroup", help="create this child memory cgroup (of the caller's own, v1) for the run; removed afterwards")
    s.add_argument("--mem-limit", type=parse_bytes, default=1 << 30, help="memory.limit_in_bytes of --cgroup (default 1G)")
    s.add_argument("--cwd", help="working directory of the workload")
    s.add_argument("-o", "--output", help="write the TOML here instead of stdout")
    s.add_argument("--pages", help="also write the pages and their compressed sizes here (.mvpages): the engine's "
                   "page set of this content, or a captured process image a workload can use")
    s.add_argument("--sample", type=int, default=0, help="with --pages: keep a uniform sample of this many pages (0: all, in address order)")
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- the workload's command line")
    s.set_defaults(func=cmd_snapshot)

    m = sub.add_parser("merge", help="combine snapshot outputs into the engine's data file")
    m.add_argument("inputs", nargs="+")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--comment", help="a paragraph added to the file's header comment")
    m.set_defaults(func=cmd_merge)

    w = sub.add_parser("workload", help="workloads carried by this script")
    w.add_argument("which", choices=["seed003", "pyheap"])
    w.add_argument("--dir", default="/tmp/memvisor-compressibility", help="seed003: where to write and build it")
    w.add_argument("--mb", type=int, default=400, help="pyheap: grow until the max RSS reaches this many MiB")
    w.set_defaults(func=cmd_workload)

    a = ap.parse_args(argv)
    if a.cmd == "snapshot":
        if a.command and a.command[0] == "--":
            a.command = a.command[1:]
        if bool(a.command) == bool(a.pid):
            ap.error("snapshot: give either --pid or -- COMMAND")
        if a.kill and not a.pid:
            ap.error("--kill goes with --pid")
    a.func(a)


if __name__ == "__main__":
    main()
