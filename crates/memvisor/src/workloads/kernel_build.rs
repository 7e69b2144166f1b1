//! Seed 002's workload: `make clean; make -j8` of a Linux 2.6.32 tree, twice
//! (docs/sources/tmem.md section 6). Each of make's `jobs` slots runs one compiler after another;
//! a compilation maps cc1's heap, reads its `.c` file and its headers through the page cache,
//! computes, writes its object and exits. Between builds `make clean` unlinks the objects. The
//! tree is on the guest's disk, the same in every guest (its pages share content identities);
//! objects depend on the architecture.
//!
//! Sizes, from tmem.md 6.1-6.3 (measured on a 2.6.32.2 tree, defconfig): 1,651 C units built for
//! x86_64, 1,636 for i386; `.c` bytes per unit median 10.9 KB, mean 19.8 KB (a lognormal through
//! both); objects 0.64 of their source; 314 headers per unit (p10 219, p90 414), 1,562 distinct
//! headers of 9.8 MB in all, modelled as one include file read in two parts: the headers nearly
//! every unit includes (the first 219, "core"), then a window of the rest chosen by the unit's
//! subsystem (one of 16). cc1's memory, tmem.md 6.3 (gcc 12): its anonymous peak (the heap) per
//! unit median 23.6 MiB, mean 24.2 MiB, within 3.6..84 MiB; beside it 24.4 MiB of
//! file pages (cc1's text and its libraries), the same in every compiler and so shared by all of
//! them through the page cache; gcc 4.1 used less, unmeasured. Beside the compilers, a real
//! `make -j8` holds 18 MiB of anonymous memory (make's sub-makes, `as`, drivers, shells; 6.4),
//! and fixdep writes a 25 KB `.cmd` file beside each object. Compilation CPU per unit: 0.71 s,
//! this machine's gcc 12 building the 1,650 defconfig units in 9 min 43 s on two cores
//! (bench/compressibility.md); the seed's Conroe and gcc 4.1 are not measured.
//!
//! Job slots take units round robin (make hands the next unit to the first free slot; with
//! similar units the two orders agree). Linking `vmlinux` is not modelled.

use std::collections::VecDeque;

use super::access::Pattern;
use super::{Op, SystemView, Workload};
use crate::content::{name_digest, splitmix64};
use crate::units::PAGE_SIZE;

/// Distinct header bytes over a defconfig build: 9.8 MB (tmem.md 6.2).
const HEADER_BYTES: f64 = 9.8e6;
/// Distinct headers over the build.
const HEADERS: f64 = 1_562.0;
/// Headers nearly every unit includes: the p10 of headers per unit.
const CORE_HEADERS: f64 = 219.0;
/// Headers per unit: mean 314, p10 219, p90 414 (normal: sd = (414 - 219) / 2.563).
const HEADERS_MEAN: f64 = 314.0;
const HEADERS_SD: f64 = 76.0;
/// Most headers of a unit (tmem.md 6.2's max).
const HEADERS_MAX: f64 = 516.0;
/// Subsystems the non-core headers are split among.
const SUBSYSTEMS: u64 = 16;
/// `.c` bytes per unit: lognormal with median 10.9 KB and mean 19.8 KB.
const C_MEDIAN: f64 = 10_900.0;
const C_MEAN: f64 = 19_800.0;
/// Object bytes per source byte.
const OBJECT_RATIO: f64 = 0.64;
/// cc1's anonymous peak, MiB (tmem.md 6.3: RssAnon over every 36th unit, median 23.6, p10 14.8,
/// p90 32.0, mean 24.2): a lognormal through the median with the log-spread of the p10-p90 range
/// (sigma 0.30, so mean 24.7; its p10 and p90, 16.1 and 34.7, sit above the measured ones, whose
/// middle lies below the median). Clamped to what the tree's units span: 3.6 among the every-36th
/// units, 84 for `kernel/sched.c` among the five heavy ones measured beside them. The 32-bit
/// guests' compilers are taken to be the same size (their pointers are half as wide: less).
const CC1_MEDIAN_MIB: f64 = 23.6;
const CC1_MEAN_MIB: f64 = 24.7;
const CC1_MIN_MIB: f64 = 3.6;
const CC1_MAX_MIB: f64 = 84.0;
/// cc1's text and libraries as mapped, MiB (tmem.md 6.3: RssFile, median 24.4).
const CC1_TEXT_MIB: f64 = 24.4;
/// The rest of a job slot's anonymous memory, MiB: `as`, the gcc driver, the shell and its share
/// of make's sub-makes (tmem.md 6.4: 17.9 MiB median beside the compilers in a real `make -j8`,
/// with 7.4 compilers running on average).
const JOB_OTHER_MIB: f64 = 2.4;
/// Bytes of the `.X.o.cmd` file fixdep writes beside each object (its dependencies; tmem.md 6.4:
/// mean 25,226 over 1,786 files), for a unit with the mean number of headers.
const CMD_MEAN_BYTES: f64 = 25_226.0;

/// The architecture a tree is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `x86_64_defconfig`.
    X86_64,
    /// `i386_defconfig`.
    I386,
}

impl Arch {
    /// Names as written in scenario files.
    pub const NAMES: &'static [&'static str] = &["x86_64", "i386"];

    /// Parses a scenario name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "x86_64" => Some(Self::X86_64),
            "i386" => Some(Self::I386),
            _ => None,
        }
    }

    /// The scenario name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// C units its defconfig compiles (tmem.md 6.2).
    pub fn units(self) -> u32 {
        match self {
            Self::X86_64 => 1_651,
            Self::I386 => 1_636,
        }
    }
}

/// The kernel-build workload as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelBuild {
    /// The tree's name: guests building trees of one name read the same bytes.
    pub tree: String,
    /// Target architecture.
    pub arch: Arch,
    /// `make -j`.
    pub jobs: u32,
    /// Builds in a row, each after a `make clean`.
    pub builds: u32,
    /// C units per build.
    pub units: u32,
    /// CPU time of one compilation.
    pub compile_ns: u64,
}

/// What one unit needs, all fixed by the tree (the same in every guest and run).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Unit {
    c_pages: u32,
    o_pages: u32,
    cmd_pages: u32,
    /// The job's anonymous memory while it compiles: cc1's heap and the rest of the slot's processes.
    anon_pages: u32,
    core_pages: u32,
    sub_first: u32,
    sub_pages: u32,
}

/// A uniform draw in (0, 1) from a key.
fn uniform(key: u64) -> f64 {
    ((splitmix64(key) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// A standard normal draw from a key (Box-Muller).
fn normal(key: u64) -> f64 {
    (-2.0 * uniform(key).ln()).sqrt() * (std::f64::consts::TAU * uniform(key ^ 0x5bd1_e995)).cos()
}

/// A lognormal draw with this median and mean.
fn lognormal(key: u64, median: f64, mean: f64) -> f64 {
    median * ((2.0 * (mean / median).ln()).sqrt() * normal(key)).exp()
}

fn pages(bytes: f64) -> u32 {
    (bytes / PAGE_SIZE as f64).ceil().max(1.0) as u32
}

impl KernelBuild {
    /// The include directory's key and size in pages.
    fn include(&self) -> (u64, u32) {
        (splitmix64(name_digest(&self.tree) ^ 1), pages(HEADER_BYTES))
    }

    /// The key of the compiler's binary (one per target: a 32-bit guest runs a 32-bit gcc).
    fn compiler_key(&self) -> u64 {
        splitmix64(name_digest("gcc") ^ (self.arch as u64 + 1) << 40)
    }

    /// The key of unit `u`'s source file.
    fn source_key(&self, u: u32) -> u64 {
        splitmix64(name_digest(&self.tree) ^ (2 + u as u64) << 8)
    }

    /// The key of unit `u`'s object file (it depends on the architecture too).
    fn object_key(&self, u: u32) -> u64 {
        splitmix64(name_digest(&self.tree) ^ (3 + u as u64) << 8 ^ (self.arch as u64 + 1) << 40)
    }

    /// The key of unit `u`'s `.cmd` file (its dependency list, written by fixdep).
    fn cmd_key(&self, u: u32) -> u64 {
        splitmix64(name_digest(".cmd") ^ name_digest(&self.tree) ^ (u as u64) << 8 ^ (self.arch as u64 + 1) << 40)
    }

    /// Unit `u`'s sizes. Units are numbered in the tree, not per architecture: the i386 build
    /// compiles the first `units` of them as the x86_64 one does.
    fn unit(&self, u: u32) -> Unit {
        let k = splitmix64(name_digest(&self.tree) ^ u as u64);
        let c_bytes = lognormal(k ^ 1, C_MEDIAN, C_MEAN);
        let cc1 = lognormal(k ^ 2, CC1_MEDIAN_MIB, CC1_MEAN_MIB).clamp(CC1_MIN_MIB, CC1_MAX_MIB);
        let headers = (HEADERS_MEAN + HEADERS_SD * normal(k ^ 3)).clamp(CORE_HEADERS, HEADERS_MAX);
        let header_page = HEADER_BYTES / HEADERS / PAGE_SIZE as f64;
        let (_, include) = self.include();
        let core_pages = (CORE_HEADERS * header_page).ceil() as u32;
        let sub_pages = ((headers - CORE_HEADERS) * header_page).ceil() as u32;
        let zone = (include - core_pages) as u64 / SUBSYSTEMS;
        let sub_first = (core_pages + (splitmix64(k ^ 4) % SUBSYSTEMS * zone) as u32).min(include - sub_pages);
        Unit {
            c_pages: pages(c_bytes),
            o_pages: pages(c_bytes * OBJECT_RATIO),
            cmd_pages: pages(CMD_MEAN_BYTES * headers / HEADERS_MEAN),
            anon_pages: pages((cc1 + JOB_OTHER_MIB) * (1 << 20) as f64),
            core_pages,
            sub_first,
            sub_pages,
        }
    }

    /// The process of job slot `job`.
    pub fn process(&self, job: u32) -> KernelBuildJob {
        KernelBuildJob { cfg: self.clone(), job, build: 0, next: job, ops: VecDeque::new(), handles: 0, regions: 0, done: false }
    }
}

/// One of make's job slots: its compilations, one after another.
#[derive(Clone, Debug)]
pub struct KernelBuildJob {
    cfg: KernelBuild,
    job: u32,
    build: u32,
    /// Its next unit.
    next: u32,
    ops: VecDeque<Op>,
    /// Files it has opened (the next handle).
    handles: u32,
    /// Regions it has mapped (the next region number).
    regions: u32,
    done: bool,
}

impl KernelBuildJob {
    /// Queues the operations of the next compilation, `make clean`, or the end.
    fn refill(&mut self) {
        let cfg = &self.cfg;
        if self.next >= cfg.units {
            self.ops.push_back(Op::Mark { label: format!("build-{}-end", self.build + 1) });
            self.build += 1;
            self.next = self.job;
            if self.build >= cfg.builds {
                self.done = true;
                self.ops.push_back(Op::Exit);
                return;
            }
            // `make clean`: this slot's objects go.
            for u in (self.job..cfg.units).step_by(cfg.jobs as usize) {
                self.ops.push_back(Op::Unlink { key: cfg.object_key(u) });
                self.ops.push_back(Op::Unlink { key: cfg.cmd_key(u) });
            }
        }
        let u = self.next;
        self.next += cfg.jobs;
        let unit = cfg.unit(u);
        let (include, include_pages) = cfg.include();
        if self.next - cfg.jobs == self.job {
            self.ops.push_back(Op::Mark { label: format!("build-{}-start", self.build + 1) });
        }
        let region = self.regions;
        self.regions += 1;
        let mut open = |ops: &mut VecDeque<Op>, key, pages, create| {
            ops.push_back(Op::Open { key, pages, create });
            self.handles += 1;
            self.handles - 1
        };
        let ops = &mut self.ops;
        // cc1 starts: its text and libraries come through the page cache, one copy for every
        // compiler (read, not mapped: a copy per cached page is charged, 2 ms against 710).
        let text_pages = pages(CC1_TEXT_MIB * (1 << 20) as f64);
        let cc1 = open(ops, cfg.compiler_key(), text_pages, false);
        ops.push_back(Op::Read { file: cc1, first: 0, count: text_pages });
        ops.push_back(Op::Map { pages: unit.anon_pages });
        let src = open(ops, cfg.source_key(u), unit.c_pages, false);
        ops.push_back(Op::Read { file: src, first: 0, count: unit.c_pages });
        let inc = open(ops, include, include_pages, false);
        ops.push_back(Op::Read { file: inc, first: 0, count: unit.core_pages });
        if unit.sub_pages > 0 {
            ops.push_back(Op::Read { file: inc, first: unit.sub_first, count: unit.sub_pages });
        }
        // cc1 builds its trees in the heap, then works over them.
        let sweep = |write| Pattern::Sweep { first: 0, count: unit.anon_pages as u64, refs: 1, write };
        ops.push_back(Op::Access { region, pattern: sweep(true) });
        ops.push_back(Op::Compute { ns: cfg.compile_ns / 2 });
        ops.push_back(Op::Access { region, pattern: sweep(false) });
        ops.push_back(Op::Compute { ns: cfg.compile_ns - cfg.compile_ns / 2 });
        let obj = open(ops, cfg.object_key(u), unit.o_pages, true);
        ops.push_back(Op::Write { file: obj, first: 0, count: unit.o_pages });
        ops.push_back(Op::Unmap { region });
        let cmd = open(ops, cfg.cmd_key(u), unit.cmd_pages, true);
        ops.push_back(Op::Write { file: cmd, first: 0, count: unit.cmd_pages });
    }
}

impl Workload for KernelBuildJob {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        loop {
            if let Some(op) = self.ops.pop_front() {
                return op;
            }
            if self.done {
                return Op::Exit;
            }
            self.refill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(arch: Arch) -> KernelBuild {
        KernelBuild { tree: "linux-2.6.32".into(), arch, jobs: 8, builds: 2, units: arch.units(), compile_ns: 710_000_000 }
    }

    #[test]
    fn units_follow_the_measured_tree() {
        let b = build(Arch::X86_64);
        let n = b.units as f64;
        let units: Vec<Unit> = (0..b.units).map(|u| b.unit(u)).collect();
        let mean = |f: &dyn Fn(&Unit) -> u32| units.iter().map(|u| f(u) as f64).sum::<f64>() / n;
        // Means of 1,651 draws: within 15 % of the measured means (the lognormal's sampling error
        // of the mean is about 4 %; page rounding adds up to a page).
        let c_kb = mean(&|u| u.c_pages) * 4.096;
        assert!((c_kb - 19.8 - 2.0).abs() < 0.15 * 21.8, "{c_kb} KB of .c per unit");
        // cc1's heap: the median of 1,651 draws within 10 % of the measured 23.6 MiB, and the
        // measured p10-p90 range (14.8..32.0) holding between 60 % and 95 % of the units.
        let mut cc1: Vec<f64> = units.iter().map(|u| u.anon_pages as f64 / 256.0 - JOB_OTHER_MIB).collect();
        cc1.sort_by(f64::total_cmp);
        let median = cc1[cc1.len() / 2];
        assert!((median - 23.6).abs() < 0.1 * 23.6, "median {median} MiB of cc1");
        let inside = cc1.iter().filter(|&&x| (14.8..=32.0).contains(&x)).count() as f64 / n;
        assert!((0.6..0.95).contains(&inside), "{inside} of the units within the measured p10-p90");
        let cmd_kb = mean(&|u| u.cmd_pages) * 4.096;
        assert!((cmd_kb - 25.2 - 2.0).abs() < 0.15 * 27.2, "{cmd_kb} KB of .cmd per unit");
        let hdr = mean(&|u| u.core_pages + u.sub_pages) * 4096.0 / (HEADER_BYTES / HEADERS);
        assert!((hdr - HEADERS_MEAN).abs() < 0.15 * HEADERS_MEAN, "{hdr} headers per unit");
        assert_eq!(b.unit(7), build(Arch::I386).unit(7), "one tree, whatever the target");
        assert_ne!(b.object_key(7), build(Arch::I386).object_key(7), "objects differ by target");
        assert_eq!(b.source_key(7), build(Arch::I386).source_key(7));
    }

    #[test]
    fn every_file_of_the_tree_has_its_own_name() {
        let b = build(Arch::X86_64);
        let mut keys: Vec<u64> = (0..b.units)
            .flat_map(|u| [b.source_key(u), b.object_key(u), b.cmd_key(u), build(Arch::I386).object_key(u), build(Arch::I386).cmd_key(u)])
            .chain([b.include().0, b.compiler_key(), build(Arch::I386).compiler_key()])
            .collect();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n, "two files share a name");
    }

    #[test]
    fn each_job_builds_its_share_twice_and_cleans_between() {
        let b = build(Arch::I386);
        let sys = SystemView::default();
        let (mut maps, mut unlinks, mut writes) = (0, 0, 0);
        for j in 0..b.jobs {
            let mut p = b.process(j);
            loop {
                match p.next_op(&sys) {
                    Op::Map { .. } => maps += 1,
                    Op::Unlink { .. } => unlinks += 1,
                    Op::Write { .. } => writes += 1,
                    Op::Exit => break,
                    _ => {}
                }
            }
        }
        assert_eq!((maps, writes, unlinks), (2 * 1_636, 4 * 1_636, 2 * 1_636), "objects and .cmd files");
    }
}
