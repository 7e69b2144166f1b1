"""`memvisor validate ksm`: the simulated KSM scanner against this machine's KSM.

Real processes (data/ksmpages.c) hold pages of a declared content mix (`MIXES`), written once
with MADV_NOHUGEPAGE and then marked MADV_MERGEABLE; the kernel's ksmd scans them until it has
finished (at least three full scans after the last write, and no counter changed across the last
full scan); its counters are read at a full-scan boundary and set beside the simulated scanner's
(`memvisor._core.ksm_scan`) on the same mix, and beside the counts KSM's rules give by hand
(`expected`). KSM's counts are arithmetic, so the simulated ones must equal the kernel's within
1 % (exactly below 100: `within_tolerance`).

KSM is global and the machine may be shared, so the kernel side is careful:

- it refuses to start when KSM is running (`run` not 0), its advisor is on, or another live
  process has mergeable memory (the counters would mix its pages with ours);
- every setting it writes (`pages_to_scan`, `sleep_millisecs`, `max_page_sharing`,
  `use_zero_pages`, `smart_scan`, `run`) is put back to the exact text it had, on success, error
  or Ctrl-C, with `run` last; SIGINT, SIGTERM and SIGHUP are held back while it restores;
- `max_page_sharing` can only change while no KSM page exists (`max_page_sharing_store` returns
  EBUSY otherwise): it is set while `run` is 0, before the processes merge, and restored only after
  the processes are killed and ksmd has freed their rmap_items and stable nodes (exited mms are
  cleaned up when ksmd's cursor passes them: `scan_get_next_rmap_item`, `ksm_test_exit`);
- the processes run in a child memory cgroup (removed afterwards), in their own session, and die
  with their parent (PR_SET_PDEATHSIG).

Counting rules relied on (Linux 6.11+ `mm/ksm.c`; docs/sources/page-sharing.md sections 1.4-1.9):

- `ksm_do_scan` processes `pages_to_scan` pages a batch but ends the batch at the end of a full
  scan; `scan_get_next_rmap_item` bumps `full_scans` (`ksm_scan.seqnr`) when the cursor wraps.
  With `pages_to_scan` above the pages of the mix, each batch is exactly one full scan, and writing
  `run` = 0 (which takes `ksm_thread_mutex`, held for a whole batch) stops ksmd at a boundary.
- `__ksm_enter` puts a new mm just behind the cursor; with the cursor at the list head (ensured by
  a drain pass before the processes start) every full scan after they register visits them all.
- `cmp_and_merge_page` (6.11+ order): a page already in a KSM page on its rmap_item's node is left
  alone; otherwise its rmap_item leaves its tree (`remove_rmap_item_from_tree`), then the page must
  have the checksum of its previous visit (`calc_checksum`; `oldchecksum` starts at 0, so a first
  visit only records it), then an all-zero page goes to the zero page if `use_zero_pages`
  (`try_to_merge_with_zero_page`), then the stable tree (`stable_tree_search`), then the unstable
  tree (`unstable_tree_search_insert`: a match makes a new KSM page, `try_to_merge_two_pages`, else
  the page is inserted and counts as unshared).
- `stable_tree_append`: the first mapping of a KSM page counts in `pages_shared`, every further
  one in `pages_sharing`. A KSM page takes at most `max_page_sharing` mappings
  (`is_page_sharing_candidate`); when every copy of a content is full a further page must pair in
  the unstable tree, and `stable_tree_insert` then chains the copies (`alloc_stable_node_chain`:
  one chain, each copy a dup, `stable_node_chain_add_dup`).
- `replace_page` with the zero page: `ksm_map_zero_page` (+1 `ksm_zero_pages`), no stable node;
  the zero PTE is no anonymous folio, so ksmd frees its rmap_item when it next passes
  (`get_next_rmap_item`, `remove_trailing_rmap_items`).
- `should_skip_rmap_item` (smart scan): never skips a KSM page; other pages are processed at
  visits 0, 1, 2, 3, 5, 8, 13, 22, ... (`skip_age`), and a skipped page leaves the unstable tree
  (volatile) and costs no `pages_scanned`.
- `pages_volatile` = rmap_items - shared - sharing - unshared (`pages_volatile_show`);
  `general_profit` = (sharing + ksm_zero_pages) x 4096 - rmap_items x 64 (`general_profit_show`).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from memvisor import _core
from memvisor.live import hostfs
from memvisor.live.cgroup import MemoryCgroup
from memvisor.signals import STOPPING, held
from memvisor.console import describe_status
from memvisor.validate import ValidationError, _check, _read, find_memory_cgroup_root

__all__ = [
    "MIXES", "Mix", "ZERO", "common", "unique", "duplicate", "kind_of", "page_bytes",
    "missing_prerequisites", "run_kernel", "simulate", "expected", "settle_scans", "compare", "within_tolerance",
    "run_validation", "ValidationError",
]

PAGE = 4096
KSM_DIR = hostfs.KSM

# ---------------------------------------------------------------------------------------------
# Content ids (the encoding of `memvisor::content`) and page bytes (its generator)

#: An all-zero page.
ZERO = 0
_KIND_SHIFT = 40
_PROC_SHIFT = 20
_FIELD = 1 << _PROC_SHIFT


def common(k: int) -> int:
    """Content k shared by every process of a mix (an OS image's pages): (1 << 40) | k."""
    if not 0 <= k < 1 << _KIND_SHIFT:
        raise ValueError(f"common content {k} out of range 0..2^40-1")
    return _core.content_id("common", k, 0)


def unique(p: int, i: int) -> int:
    """Page i of process p, found nowhere else: (2 << 40) | (p << 20) | i."""
    if not (0 <= p < _FIELD and 0 <= i < _FIELD):
        raise ValueError(f"unique page ({p}, {i}) out of range 0..2^20-1")
    return _core.content_id("unique", p, i)


def duplicate(p: int, d: int) -> int:
    """Content d repeated within process p only: (3 << 40) | (p << 20) | d."""
    if not (0 <= p < _FIELD and 0 <= d < _FIELD):
        raise ValueError(f"duplicate content ({p}, {d}) out of range 0..2^20-1")
    return _core.content_id("duplicate", p, d)


def kind_of(cid: int) -> str:
    """"zero", "common", "unique" or "duplicate"."""
    if cid == ZERO:
        return "zero"
    kind = cid >> _KIND_SHIFT
    names = {1: "common", 2: "unique", 3: "duplicate"}
    if kind not in names:
        raise ValueError(f"content id {cid:#x} is not of the declared encoding")
    return names[kind]


def page_bytes(cid: int) -> bytes:
    """The 4 KiB a content id stands for, from the engine's generator (`memvisor::content`): zeros
    for 0, else 512 little-endian words splitmix64((id << 9) | i), as ksmpages.c writes them."""
    return bytes(_core.page_bytes(cid))


# ---------------------------------------------------------------------------------------------
# Mixes


@dataclass(frozen=True)
class Mix:
    """A declared content mix: `build()` gives one list of content ids per process."""

    name: str
    layout: str
    build: Callable[[], list[list[int]]]

    def processes(self) -> list[list[int]]:
        return self.build()

    @property
    def pages(self) -> int:
        return sum(len(p) for p in self.build())


def _zero_mix() -> list[list[int]]:
    return [[ZERO] * 4096 for _ in range(2)]


#: image: the common pool, and the per-process quarters.
IMAGE_POOL = 1024


def _image_mix() -> list[list[int]]:
    procs = []
    for p in range(4):
        ids = [ZERO] * 1024
        # A fixed pseudo-random draw, so that contents are found 1 to ~20 times, not a round number.
        ids += [common(_core.splitmix64((p << 20) | j) % IMAGE_POOL) for j in range(1024, 3072)]
        ids += [unique(p, i) for i in range(3072, 4096)]
        procs.append(ids)
    return procs


def _chains_mix() -> list[list[int]]:
    return [[duplicate(0, 0)] * 1000 + [unique(0, i) for i in range(1000, 1024)]]


#: mixed-sizes: zero pages per process, 257 in all (one full KSM page of 256 and one left over).
MIXED_ZEROS = (64, 128, 65)


def _mixed_sizes_mix() -> list[list[int]]:
    procs = []
    for p, n in enumerate((1024, 2048, 3072)):
        ids = [common(j) for j in range(n // 2)]
        ids += [duplicate(p, j % 8) for j in range(n // 2, 3 * n // 4)]
        ids += [ZERO] * MIXED_ZEROS[p]
        ids += [unique(p, i) for i in range(len(ids), n)]
        procs.append(ids)
    return procs


MIXES: dict[str, Mix] = {
    m.name: m
    for m in (
        Mix("zero", "2 processes x 4,096 pages, every page zero", _zero_mix),
        Mix(
            "image",
            "4 processes x 4,096 pages; in each, pages 0-1,023 zero, pages j = 1,024-3,071 common content "
            "splitmix64((p << 20) | j) mod 1,024 (a pool of 1,024), pages 3,072-4,095 unique",
            _image_mix,
        ),
        Mix("chains", "1 process x 1,024 pages: pages 0-999 one content (duplicate 0), pages 1,000-1,023 unique", _chains_mix),
        Mix(
            "mixed-sizes",
            "3 processes of 1,024, 2,048 and 3,072 pages; process p of n pages: pages 0..n/2-1 common content j "
            "(0-511 in all three, 512-1,023 in two, 1,024-1,535 in one), n/2..3n/4-1 duplicate j mod 8, "
            "then 64, 128, 65 zero pages (257 in all), the rest unique",
            _mixed_sizes_mix,
        ),
    )
}

#: Settings each mix runs under by default: max_page_sharing at the kernel's default 256, smart
#: scan on (the 6.7+ default), the zero page off and on.
DEFAULT_SETTINGS = {"use_zero_pages": 0, "max_page_sharing": 256, "smart_scan": 1}
DEFAULT_SETTINGS_LIST = ({**DEFAULT_SETTINGS, "use_zero_pages": 0}, {**DEFAULT_SETTINGS, "use_zero_pages": 1})

# ---------------------------------------------------------------------------------------------
# Counters

#: Counters the simulated scanner returns and that are compared.
COMPARED = (
    "pages_shared", "pages_sharing", "pages_unshared", "pages_volatile", "ksm_zero_pages",
    "stable_node_chains", "stable_node_dups", "full_scans", "pages_scanned",
)
#: Read from the kernel as well (expected() gives them too).
KERNEL_ONLY = ("pages_skipped", "general_profit")
#: Counted since boot: the run's value is the difference from the baseline.
CUMULATIVE = ("full_scans", "pages_scanned", "pages_skipped")
#: "Finished" means none of these changed across the last full scan.
SETTLED = ("pages_shared", "pages_sharing", "pages_unshared", "pages_volatile", "ksm_zero_pages",
           "stable_node_chains", "stable_node_dups", "general_profit")
#: Settings this command may write, in the order they are put back: max_page_sharing first (it
#: needs no KSM page; ksmd, still fast, has just freed ours), `run` last.
WRITTEN = ("max_page_sharing", "use_zero_pages", "smart_scan", "pages_to_scan", "sleep_millisecs", "run")
#: Files the comparison needs (ksm_zero_pages 6.6, pages_scanned 6.6, smart_scan 6.7).
REQUIRED_FILES = COMPARED + KERNEL_ONLY + WRITTEN
#: sizeof(struct ksm_rmap_item) on 64-bit, in general_profit.
RMAP_ITEM_BYTES = 64
#: Between batches ksmd sleeps this long: the window in which `run` = 0 lands.
SLEEP_MILLISECS = 50

TOLERANCE = 0.01
EXACT_BELOW = 100


def within_tolerance(kernel: int, simulated: int | None) -> bool:
    """The issue's criterion: |simulated - kernel| <= 1 % of the kernel's value, and exact
    equality when the kernel's value is below 100 (1 % of it would be less than one page)."""
    if simulated is None:
        return False
    if abs(kernel) < EXACT_BELOW:
        return simulated == kernel
    return abs(simulated - kernel) <= TOLERANCE * abs(kernel)


def compare(kernel: dict, sim: dict) -> list[dict]:
    """One row per compared counter the kernel has: kernel, simulated, their difference and
    relative difference ((sim - kernel) / kernel; None when the kernel's value is 0), and whether
    the simulated value is within tolerance (`within_tolerance`: 1 % of the kernel's value,
    exact when that is below 100)."""
    rows = []
    for name in COMPARED + KERNEL_ONLY:
        if name not in kernel or (name in KERNEL_ONLY and name not in sim):
            continue
        k = int(kernel[name])
        s = sim.get(name)
        s = None if s is None else int(s)
        rows.append({
            "counter": name,
            "kernel": k,
            "simulated": s,
            "difference": None if s is None else s - k,
            "relative_difference": None if s is None or k == 0 else (s - k) / k,
            "within_1pct": within_tolerance(k, s),
        })
    return rows


# ---------------------------------------------------------------------------------------------
# KSM's rules by hand


def _skip_age(age: int) -> int:
    # mm/ksm.c skip_age()
    if age <= 3:
        return 1
    if age <= 5:
        return 2
    if age <= 8:
        return 4
    return 8


def processed_visits(visits: int, smart_scan: bool) -> list[bool]:
    """For a page that never merges, whether each of its first `visits` full-scan visits is
    processed (True) or skipped by smart scan (False): `should_skip_rmap_item`, whose age starts
    at 0 in a zeroed rmap_item and counts visits (0-based: processed at 0, 1, 2, 3, 5, 8, 13, 22, ...)."""
    out = []
    age = remaining = 0
    for _ in range(visits):
        if not smart_scan:
            out.append(True)
            continue
        a = age
        if age != 255:
            age += 1
        if a < 3:
            out.append(True)
        elif remaining == 0:
            remaining = _skip_age(a)
            out.append(True)
        else:
            remaining -= 1
            out.append(False)
    return out


def _mix_processes(mix: str | Mix | Sequence[Sequence[int]]) -> list[list[int]]:
    if isinstance(mix, str):
        if mix not in MIXES:
            raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
        return MIXES[mix].processes()
    if isinstance(mix, Mix):
        return mix.processes()
    return [list(p) for p in mix]


def expected(mix: str | Mix | Sequence[Sequence[int]], settings: dict, full_scans: int | None = None) -> dict:
    """The counters KSM's rules give for static pages after `full_scans` full scans that each
    visited every page of the mix (default: `settle_scans`, when the run is "finished").

    Per content with g pages (all processes together; zero pages too unless use_zero_pages):
    pages meet on their second visit (v1: checksum unchanged) and fill KSM pages of M =
    max_page_sharing mappings in scan order (`stable_tree_search` finds a candidate below M,
    `is_page_sharing_candidate`; a full one sends the next page to the unstable tree, where the
    page after it pairs with it: `try_to_merge_two_pages`). With q, r = divmod(g, M):

    - KSM pages n = q + [r >= 2]: pages_shared += n; pages_sharing += g - n - [r == 1];
    - r == 1 (or g == 1): one page never merges; it is unshared after each processed visit;
    - n >= 2: one stable_node_chain and n stable_node_dups (`alloc_stable_node_chain`).

    Zero pages with use_zero_pages go to the zero page on v1 (`try_to_merge_with_zero_page`):
    ksm_zero_pages += g, never shared/sharing; their rmap_items stay (volatile) until v2 frees them.
    Pages that never merge are unshared when their last visit was processed (`processed_visits`)
    and volatile otherwise (after v0, or after a smart-scan skip). pages_scanned counts processed
    visits: every visit of a merged page (KSM pages are never skipped), v0 and v1 of a zero page
    under use_zero_pages, the processed visits of the others. Same process or not makes no
    difference: KSM compares contents, whoever maps them.
    """
    procs = _mix_processes(mix)
    k = settle_scans(procs, settings) if full_scans is None else int(full_scans)
    if k < 0:
        raise ValueError("full_scans must be >= 0")
    m = int(settings.get("max_page_sharing", 256))
    uzp = bool(int(settings.get("use_zero_pages", 0)))
    smart = bool(int(settings.get("smart_scan", 1)))
    counts = Counter(cid for p in procs for cid in p)
    total = sum(counts.values())
    zeros = counts.pop(ZERO, 0) if uzp else 0

    shared = sharing = chains = dups = loners = merged = 0
    for g in counts.values():
        q, r = divmod(g, m)
        n = q + (r >= 2)
        if n == 0:
            loners += 1
            continue
        shared += n
        sharing += g - n - (r == 1)
        merged += g - (r == 1)
        loners += r == 1
        if n >= 2:
            chains += 1
            dups += n

    visits = processed_visits(k, smart)
    if k < 2:
        # Nothing can merge before a page's second visit.
        loners += merged
        merged = shared = sharing = chains = dups = 0
    zero_pages = zeros if k >= 2 else 0
    unshared = loners if k >= 2 and visits[-1] else 0
    rmap_items = total - (zeros if k >= 3 else 0)
    # Merged pages: k processed visits; zero pages under use_zero_pages: v0 and v1 only.
    scanned = merged * k + zeros * min(k, 2) + loners * sum(visits)
    skipped = loners * (k - sum(visits))
    if k < 2:
        scanned = total * k
        skipped = 0
    return {
        "pages_shared": shared,
        "pages_sharing": sharing,
        "pages_unshared": unshared,
        "pages_volatile": rmap_items - shared - sharing - unshared,
        "ksm_zero_pages": zero_pages,
        "stable_node_chains": chains,
        "stable_node_dups": dups,
        "full_scans": k,
        "pages_scanned": scanned,
        "pages_skipped": skipped,
        "general_profit": (sharing + zero_pages) * PAGE - rmap_items * RMAP_ITEM_BYTES,
    }


def settle_scans(mix: str | Mix | Sequence[Sequence[int]], settings: dict) -> int:
    """The full scan at which `run_kernel` stops by KSM's rules: the first k >= 3 after which no
    SETTLED counter changed across scan k."""
    procs = _mix_processes(mix)
    prev = expected(procs, settings, 2)
    for k in range(3, 64):
        cur = expected(procs, settings, k)
        if all(cur[c] == prev[c] for c in SETTLED):
            return k
        prev = cur
    raise AssertionError("KSM's counters never settle for this mix")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# The simulated side


def simulate(mix_name: str, settings: dict) -> dict:
    """The simulated scanner (`memvisor._core.ksm_scan`) on the mix: settings pages_to_scan,
    sleep_millisecs, max_page_sharing, use_zero_pages, smart_scan and full_scans (how many full
    scans to run; default `settle_scans`). Returns its counters by the kernel's names."""
    procs = _mix_processes(mix_name)
    s = {**DEFAULT_SETTINGS, **settings}
    total = sum(len(p) for p in procs)
    sim_settings = {
        "pages_to_scan": int(s.get("pages_to_scan", total + 1)),
        "sleep_millisecs": int(s.get("sleep_millisecs", SLEEP_MILLISECS)),
        "max_page_sharing": int(s["max_page_sharing"]),
        "use_zero_pages": int(s["use_zero_pages"]),
        "smart_scan": int(s["smart_scan"]),
        "full_scans": int(s.get("full_scans") or settle_scans(procs, s)),
    }
    out = _core.ksm_scan(procs, sim_settings)
    return {k: int(v) for k, v in dict(out).items()}


# ---------------------------------------------------------------------------------------------
# The kernel side


def missing_prerequisites(cgroup_root: Path = Path("/sys/fs/cgroup"), ksm_dir: Path = KSM_DIR) -> list[str]:
    """Everything this machine lacks for the kernel side, in words (empty: it can run)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (to change KSM's settings in /sys/kernel/mm/ksm and create a memory cgroup; run as root)")
    if not (ksm_dir / "run").exists():
        missing.append(f"KSM in the kernel ({ksm_dir} is missing: a kernel built with CONFIG_KSM)")
    else:
        absent = [f for f in REQUIRED_FILES if not (ksm_dir / f).exists()]
        if absent:
            missing.append(f"KSM of Linux 6.7 or later ({ksm_dir} has no {', '.join(absent)})")
    if find_memory_cgroup_root(cgroup_root) is None:
        missing.append(f"a memory cgroup controller under {cgroup_root} (v1 'memory' hierarchy or v2 with 'memory' enabled)")
    if shutil.which("cc") is None:
        missing.append("a C compiler ('cc') to build the page-writing program")
    return missing


def compile_program(work: Path) -> Path:
    """Builds data/ksmpages.c into `work`; returns the executable."""
    exe = Path(work) / "ksmpages"
    src = resources.files("memvisor") / "data" / "ksmpages.c"
    _check(["cc", "-O2", "-o", str(exe), str(src)])
    return exe


def write_ids(path: Path, ids: Sequence[int]) -> None:
    """An ids file for ksmpages: little-endian uint64, one per page."""
    Path(path).write_bytes(struct.pack(f"<{len(ids)}Q", *ids))


def read_ksm(ksm_dir: Path = KSM_DIR) -> dict[str, str]:
    """Every file of the KSM directory, as text."""
    return {p.name: (_read(p) or "") for p in sorted(Path(ksm_dir).iterdir()) if p.is_file()}


def ksm_settings(ksm_dir: Path = KSM_DIR) -> dict[str, str]:
    """KSM's writable files (its settings), as text."""
    return {p.name: (_read(p) or "") for p in sorted(Path(ksm_dir).iterdir()) if p.is_file() and p.stat().st_mode & 0o222}


def ksm_counters(ksm_dir: Path = KSM_DIR) -> dict[str, int]:
    """The counters compared or kept, as integers."""
    out = {}
    for name in COMPARED + KERNEL_ONLY:
        text = _read(Path(ksm_dir) / name)
        if text is not None:
            out[name] = int(text)
    return out


def _rmap_items(c: dict[str, int]) -> int:
    return c["pages_shared"] + c["pages_sharing"] + c["pages_unshared"] + c["pages_volatile"]


def ksm_stat(pid: int) -> dict[str, object]:
    """/proc/PID/ksm_stat as a dict (values int where they are numbers)."""
    out: dict[str, object] = {}
    for line in (_read(Path(f"/proc/{pid}/ksm_stat")) or "").splitlines():
        key, _, val = line.replace(":", " ").partition(" ")
        val = val.strip()
        out[key] = int(val) if val.lstrip("-").isdigit() else val
    return out


def ksm_users(exclude: Sequence[int] = ()) -> list[str]:
    """Live processes other than `exclude` that KSM knows of (a mergeable area, or rmap_items)."""
    users = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in exclude or int(d.name) == os.getpid():
            continue
        st = ksm_stat(int(d.name))
        if st.get("ksm_mergeable") == "yes" or st.get("ksm_merge_any") == "yes" or int(st.get("ksm_rmap_items", 0) or 0) > 0:
            users.append(f"{d.name} ({(_read(d / 'comm') or '?')})")
    return users


class KsmSettings:
    """Writes KSM settings, remembering the text each had before its first write, and puts back
    exactly those (`restore`), in WRITTEN order: `run` last."""

    def __init__(self, ksm_dir: Path = KSM_DIR):
        self.dir = Path(ksm_dir)
        self.original: dict[str, str] = {}

    def get(self, name: str) -> str:
        return (self.dir / name).read_text().strip()

    def set(self, name: str, value: int | str) -> None:
        if name not in WRITTEN:
            raise ValueError(f"{name} is not a setting this command changes")
        current = self.get(name)
        self.original.setdefault(name, current)
        if current == str(value):
            return
        try:
            (self.dir / name).write_text(str(value))
        except OSError as e:
            raise ValidationError(f"cannot set {self.dir / name} to {value} (it is {current}): {e.strerror or e}") from None

    def restore(self) -> list[str]:
        """Puts every changed setting back; returns what could not be, in words."""
        errors = []
        for name in WRITTEN:
            if name not in self.original:
                continue
            want = self.original[name]
            try:
                if self.get(name) != want:
                    (self.dir / name).write_text(want)
                if self.get(name) != want:
                    errors.append(f"{self.dir / name} is {self.get(name)}, was {want}")
            except OSError as e:
                errors.append(f"cannot put {self.dir / name} back to {want}: {e.strerror or e} (write it by hand: echo {want} > {self.dir / name})")
        return errors


def _wait(cond: Callable[[], bool], deadline: float, what: str, poll: float = 0.002) -> None:
    while not cond():
        if time.monotonic() > deadline:
            raise ValidationError(f"timed out waiting for {what}")
        time.sleep(poll)


def _drain(ksm: KsmSettings, deadline: float) -> None:
    """Runs ksmd until its cursor has gone round once (freeing the mm slots and rmap_items that
    exited processes left: `scan_get_next_rmap_item` drops a slot whose mm `ksm_test_exit`s), then
    stops it. Afterwards the cursor is at the list head, so processes registered next are all
    visited by the very next full scan (`__ksm_enter` adds them just behind the cursor)."""
    c0 = ksm_counters(ksm.dir)
    items = _rmap_items(c0)
    ksm.set("run", 1)
    t0 = time.monotonic()
    # An empty list never wraps (ksmd_should_run is false); a non-empty one wraps at once.
    _wait(lambda: ksm_counters(ksm.dir)["full_scans"] != c0["full_scans"] or (items == 0 and time.monotonic() - t0 > 0.5),
          deadline, "ksmd to finish a full scan over leftovers of exited processes")
    ksm.set("run", 0)
    _purge_stale_chains(ksm)


def _purge_stale_chains(ksm: KsmSettings) -> None:
    """Frees stable-tree nodes left without any KSM page. When the last mapping of every dup of a
    chain goes, the dups are freed (`remove_node_from_stable_tree`) but the chain head stays, and
    stays counted in stable_node_chains, until a stable-tree search walks it (`stable_node_dup`
    finds no dup: `free_stable_node_chain`); a run whose pages never search the stable tree (zero
    pages under use_zero_pages) would count it as its own. `max_page_sharing_store` calls
    `remove_all_stable_nodes` when the value changes and no KSM page exists: changing it and back
    frees them (only while pages_shared is 0; the setting ends as it was)."""
    c = ksm_counters(ksm.dir)
    if c["pages_shared"] or not (c["stable_node_chains"] or c["stable_node_dups"]):
        return
    m = int(ksm.get("max_page_sharing"))
    ksm.set("max_page_sharing", m + 1)
    ksm.set("max_page_sharing", m)


def _start(exe: Path, ids_file: Path, cgroup: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(exe), str(ids_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Its own session: a terminal's Ctrl-C reaches the validation, which kills it itself.
        start_new_session=True,
        preexec_fn=lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid())),
    )


def _wait_ready(procs: list[subprocess.Popen], deadline: float) -> None:
    """Waits for each program's "ready" line; a program that ends first is an error with its message."""
    sel = selectors.DefaultSelector()
    bufs = {}
    for i, p in enumerate(procs):
        sel.register(p.stdout, selectors.EVENT_READ, i)
        bufs[i] = b""
    try:
        pending = set(bufs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ValidationError(f"timed out waiting for {len(pending)} page-writing program(s) to be ready")
            for key, _ in sel.select(timeout=min(left, 0.5)):
                i = key.data
                chunk = os.read(key.fileobj.fileno(), 4096)
                bufs[i] += chunk
                if b"ready\n" in bufs[i]:
                    pending.discard(i)
                    sel.unregister(key.fileobj)
                elif not chunk:
                    p = procs[i]
                    rc = p.wait(timeout=5)
                    msg = " ".join(p.stderr.read().decode(errors="replace").split()) or "no message"
                    raise ValidationError(f"ksmpages (process {i}) failed with {describe_status(rc)}: {msg}")
    finally:
        sel.close()


def _kill(procs: list[subprocess.Popen]) -> list[str]:
    errors = []
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            errors.append(f"process {p.pid} did not die")
        for f in (p.stdout, p.stderr):
            if f:
                f.close()
    return errors


def run_kernel(
    mix_name: str,
    settings: dict,
    *,
    exe: Path | None = None,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    ksm_dir: Path = KSM_DIR,
    timeout_s: float = 120.0,
    min_scans: int = 3,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Runs the mix on this machine's KSM and returns its counters when finished.

    `settings`: use_zero_pages (0/1), max_page_sharing, smart_scan (0/1). Finished means at least
    `min_scans` (3) full scans after every process was ready and no SETTLED counter changed across
    the last one; the counters are read with ksmd stopped at a full-scan boundary, the cumulative ones
    (CUMULATIVE) as differences from the moment the processes were ready. Also returned: wall_s,
    the KSM settings used, each process's /proc/PID/ksm_stat and the snapshots after every scan.
    Every KSM setting is put back and the processes and their cgroup removed, also on error or
    Ctrl-C; `timeout_s` bounds the run (a ValidationError, never a hang)."""
    procs_ids = _mix_processes(mix_name)
    s = {**DEFAULT_SETTINGS, **settings}
    total = sum(len(p) for p in procs_ids)
    found = find_memory_cgroup_root(Path(cgroup_root))
    if found is None:
        raise ValidationError(f"no memory cgroup controller under {cgroup_root}")
    cg_root, cg_version = found
    say = log or (lambda _line: None)
    t_start = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    ksm = KsmSettings(ksm_dir)
    work = Path(tempfile.mkdtemp(prefix="memvisor-ksm-"))
    # Made by `_measure`, removed by `_clean_up` whether or not it was made.
    cg = MemoryCgroup(cg_root / f"memvisor-validate-ksm-{os.getpid()}", cg_version == 2)
    children: list[subprocess.Popen] = []
    state = {"baseline": None, "merged": False}
    try:
        result = _measure(mix_name, procs_ids, s, total, exe, work, ksm, cg, children, state, deadline, min_scans, say)
    except BaseException:
        errors = _clean_up(ksm, children, cg, work, state)
        for e in errors:
            print(f"warning: {e}", file=sys.stderr)
        raise
    errors = _clean_up(ksm, children, cg, work, state)
    if errors:
        raise ValidationError("the run finished but cleaning up failed: " + "; ".join(errors))
    result["wall_s"] = time.perf_counter() - t_start
    return result


def _measure(mix_name, procs_ids, s, total, exe, work, ksm, cg: MemoryCgroup, children, state, deadline, min_scans, say) -> dict:
    before = read_ksm(ksm.dir)
    if before.get("run") != "0":
        raise ValidationError(f"KSM is running (run = {before.get('run')}): someone else is using it, and its counters are global; stop it or wait")
    if "[none]" not in before.get("advisor_mode", "[none]"):
        raise ValidationError(f"KSM's advisor is on (advisor_mode: {before['advisor_mode']}): it rewrites pages_to_scan; turn it off first")
    others = ksm_users()
    if others:
        raise ValidationError(f"other processes have KSM-mergeable memory, whose pages would mix into the counters: {', '.join(others)}")
    if exe is None:
        exe = compile_program(work)

    # One batch is one full scan (ksm_do_scan ends a batch at the wrap; the wrap itself is one
    # more step of the budget), so `run` = 0 always lands on a full-scan boundary.
    pages_to_scan = total + 1
    ksm.set("pages_to_scan", pages_to_scan)
    ksm.set("sleep_millisecs", SLEEP_MILLISECS)
    _drain(ksm, deadline)
    state["baseline"] = base0 = ksm_counters(ksm.dir)
    leftover = {k: base0[k] for k in SETTLED if k != "general_profit" and base0[k]}
    if leftover:
        raise ValidationError(f"KSM still counts pages that are not this run's after a full scan: {leftover}")
    # While run is 0 and no KSM page exists: otherwise max_page_sharing_store returns EBUSY.
    ksm.set("max_page_sharing", int(s["max_page_sharing"]))
    ksm.set("use_zero_pages", int(s["use_zero_pages"]))
    ksm.set("smart_scan", int(s["smart_scan"]))
    used = {name: int(ksm.get(name)) for name in ("pages_to_scan", "sleep_millisecs", "max_page_sharing", "use_zero_pages", "smart_scan")}
    used["merge_across_nodes"] = int(ksm.get("merge_across_nodes")) if (ksm.dir / "merge_across_nodes").exists() else None

    cg.path.mkdir()
    # Room for every page unmerged plus the programs themselves: the limit only guards the host.
    cg.set_limit(total * PAGE + (64 << 20))
    for i, ids in enumerate(procs_ids):
        f = work / f"ids-{i}.bin"
        write_ids(f, ids)
        children.append(_start(exe, f, cg.path))
    _wait_ready(children, deadline)
    pids = [p.pid for p in children]
    others = ksm_users(exclude=pids)
    if others:
        raise ValidationError(f"other processes started using KSM: {', '.join(others)}")

    base = ksm_counters(ksm.dir)
    say(f"  {mix_name}: {len(children)} processes, {total:,} pages ready; ksmd: pages_to_scan {pages_to_scan}, sleep_millisecs {SLEEP_MILLISECS}")
    state["merged"] = True
    ksm.set("run", 1)
    snaps: dict[int, dict[str, int]] = {}
    last = base["full_scans"]
    while True:
        _wait(lambda: ksm_counters(ksm.dir)["full_scans"] != last, deadline, "ksmd's next full scan")
        # Takes ksm_thread_mutex, which ksmd holds for a whole batch: ksmd stops between scans.
        ksm.set("run", 0)
        snap = ksm_counters(ksm.dir)
        for c in CUMULATIVE:
            snap[c] -= base[c]
        k = snap["full_scans"]
        snaps[k] = snap
        if k >= max(min_scans, 2) and k - 1 in snaps and all(snaps[k][c] == snaps[k - 1][c] for c in SETTLED):
            break
        last = base["full_scans"] + k
        ksm.set("run", 1)

    final = snaps[k]
    per_process = [{"pid": p.pid, "pages": len(ids), **ksm_stat(p.pid)} for p, ids in zip(children, procs_ids)]
    # Every rmap_item, merged page and zero page counted must be these processes' own.
    sums = {key: sum(int(pp.get(key, 0) or 0) for pp in per_process) for key in ("ksm_rmap_items", "ksm_merging_pages", "ksm_zero_pages")}
    rmap_items = _rmap_items(final)
    if (sums["ksm_rmap_items"] != rmap_items or sums["ksm_merging_pages"] != final["pages_shared"] + final["pages_sharing"]
            or sums["ksm_zero_pages"] != final["ksm_zero_pages"]):
        raise ValidationError(f"KSM's global counters are not these processes' alone: {sums} against rmap_items {rmap_items}, "
                              f"shared+sharing {final['pages_shared'] + final['pages_sharing']}, zero {final['ksm_zero_pages']}")
    say(f"  {mix_name}: finished after {k} full scans: " + ", ".join(f"{c} {final[c]:,}" for c in COMPARED if c in final))
    return {
        **final,
        "mix": mix_name,
        "settings": {key: s[key] for key in ("use_zero_pages", "max_page_sharing", "smart_scan")},
        "ksm_settings_used": used,
        "kernel": os.uname().release,
        "cgroup_version": 2 if cg.v2 else 1,
        "rmap_items": rmap_items,
        "per_process": per_process,
        "scans": [snaps[i] for i in sorted(snaps)],
    }


def _clean_up(ksm: KsmSettings, children: list[subprocess.Popen], cg: MemoryCgroup, work: Path, state: dict) -> list[str]:
    """Kills the processes, lets ksmd free what they left, puts KSM's settings back (`run` last),
    removes the cgroup and the work directory. Returns what failed, in words; never raises."""
    errors: list[str] = []
    with held(*STOPPING):
        errors += _kill(children)
        base = state.get("baseline")
        if state.get("merged") and base is not None:
            # Exited mms keep their rmap_items and stable nodes until ksmd's cursor passes them; only
            # then do pages_shared/sharing return and can max_page_sharing change back.
            try:
                ksm.set("run", 1)
                keys = ("pages_shared", "pages_sharing", "pages_unshared", "pages_volatile", "ksm_zero_pages")
                _wait(lambda: all(ksm_counters(ksm.dir)[c] == base[c] for c in keys), time.monotonic() + 30,
                      "ksmd to free the pages of the killed processes", poll=0.01)
                ksm.set("run", 0)
                _purge_stale_chains(ksm)
            except (ValidationError, OSError) as e:
                errors.append(str(e))
        errors += ksm.restore()
        if not cg.remove(tries=200, wait_s=0.01):
            errors.append(f"cannot remove the cgroup {cg.path}")
        shutil.rmtree(work, ignore_errors=True)
    return errors


# ---------------------------------------------------------------------------------------------
# The whole comparison


def run_validation(
    out_dir: Path,
    mixes: Sequence[str] | None = None,
    settings_list: Sequence[dict] | None = None,
    *,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    timeout_s: float = 120.0,
    min_scans: int = 3,
    simulator: Callable[[str, dict], dict] | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Runs every mix under every settings dict (default: use_zero_pages 0 and 1, max_page_sharing
    256, smart_scan 1) on the kernel, by hand (`expected`) and in the simulator given the kernel's
    number of full scans; writes the run folder (summary.json, results.md) atomically and returns
    it. `min_scans` above 4 lets smart scan's skips (from visit 4 on) show in the comparison. The
    caller has checked `missing_prerequisites`."""
    from memvisor.runfolder import RunFolder

    mixes = list(mixes or MIXES)
    for m in mixes:
        if m not in MIXES:
            raise ValueError(f"unknown mix {m!r}; known: {', '.join(MIXES)}")
    settings_list = [{**DEFAULT_SETTINGS, **st} for st in (settings_list or DEFAULT_SETTINGS_LIST)]
    sim_fn = simulator or simulate
    settings_before = ksm_settings()
    runs = []
    work = Path(tempfile.mkdtemp(prefix="memvisor-ksm-build-"))
    try:
        exe = compile_program(work)
        for m in mixes:
            for st in settings_list:
                kern = run_kernel(m, st, exe=exe, cgroup_root=cgroup_root, timeout_s=timeout_s, min_scans=min_scans, log=log)
                used = kern["ksm_settings_used"]
                exp = expected(m, st, full_scans=kern["full_scans"])
                sim = sim_fn(m, {**st, "pages_to_scan": used["pages_to_scan"], "sleep_millisecs": used["sleep_millisecs"],
                                 "full_scans": kern["full_scans"]})
                rows = compare(kern, sim)
                exp_rows = compare(kern, exp)
                runs.append({
                    "mix": m,
                    "layout": MIXES[m].layout,
                    "settings": st,
                    "kernel": {k: v for k, v in kern.items() if k not in ("per_process", "scans")},
                    "kernel_scans": kern["scans"],
                    "per_process": kern["per_process"],
                    "expected": exp,
                    "simulated": sim,
                    "rows": rows,
                    "expected_rows": exp_rows,
                    "within": all(r["within_1pct"] for r in rows),
                    "expected_equals_kernel": all(r["difference"] == 0 for r in exp_rows),
                })
                log(f"  {m} use_zero_pages={st['use_zero_pages']}: simulated {'within 1 %' if runs[-1]['within'] else 'OUTSIDE 1 %'}, "
                    f"by hand {'equal' if runs[-1]['expected_equals_kernel'] else 'DIFFERENT'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    settings_after = ksm_settings()
    if settings_after != settings_before:
        changed = {k: (settings_before.get(k), settings_after.get(k)) for k in settings_before if settings_before.get(k) != settings_after.get(k)}
        raise ValidationError(f"KSM settings differ from before the run: {changed}")
    summary = {
        "kernel": os.uname().release,
        "criterion": "every compared counter: |simulated - kernel| <= 1 % of the kernel's value; exactly equal when the kernel's value is below 100",
        "finished": f"at least {max(min_scans, 2)} full scans after every process was ready, and no counter changed across the last full scan",
        "target_met": all(r["within"] for r in runs),
        "expected_equals_kernel": all(r["expected_equals_kernel"] for r in runs),
        "ksm_settings_before": settings_before,
        "ksm_settings_after": settings_after,
        "runs": runs,
    }
    with RunFolder(Path(out_dir), "validation") as folder:
        (folder.tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (folder.tmp / "results.md").write_text(markdown(summary), encoding="utf-8")
        return folder.commit([])


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:+.2%}"
    return f"{v:,}"


def markdown(summary: dict) -> str:
    """results.md: one side-by-side table per mix and setting."""
    lines = [
        "# memvisor validate ksm",
        "",
        f"Kernel {summary['kernel']}. Criterion: {summary['criterion']}. Finished: {summary['finished']}.",
        "",
        f"Target met: **{'yes' if summary['target_met'] else 'no'}**; counts by hand equal the kernel's: "
        f"**{'yes' if summary['expected_equals_kernel'] else 'no'}**.",
        "",
    ]
    for r in summary["runs"]:
        k = r["kernel"]
        used = k["ksm_settings_used"]
        lines += [
            f"## {r['mix']}, use_zero_pages={r['settings']['use_zero_pages']}",
            "",
            f"{r['layout']}.",
            "",
            "KSM settings used: " + ", ".join(f"{n} {v}" for n, v in used.items()) +
            f"; finished after {k['full_scans']} full scans, {k['wall_s']:.2f} s (memory cgroup v{k['cgroup_version']}).",
            "",
            "| counter | kernel | by hand | simulated | sim - kernel | relative | within 1 % |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        exp = r["expected"]
        for row in r["rows"]:
            lines.append(f"| {row['counter']} | {_fmt(row['kernel'])} | {_fmt(exp.get(row['counter']))} | {_fmt(row['simulated'])} | "
                         f"{_fmt(row['difference'])} | {_fmt(row['relative_difference'])} | {'yes' if row['within_1pct'] else '**no**'} |")
        shown = {row["counter"] for row in r["rows"]}
        for name in KERNEL_ONLY:
            if name in k and name not in shown:
                lines.append(f"| {name} | {_fmt(k[name])} | {_fmt(exp.get(name))} | - | - | - | - |")
        lines.append("")
    return "\n".join(lines)
