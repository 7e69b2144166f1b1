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
use std::sync::{Arc, Mutex};

use super::access::Pattern;
use super::{Op, SystemView, Workload};
use crate::content::{name_digest, splitmix64};
use crate::index::NONE;
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
/// Subsystems the non-core headers are split among [assumed: the tree's header-sharing structure is
/// not measured; a unit draws its non-core headers from one subsystem's zone].
const SUBSYSTEMS: u64 = 16;
/// `.c` bytes per unit: lognormal with median 10.9 KB and mean 19.8 KB.
const C_MEDIAN: f64 = 10_900.0;
const C_MEAN: f64 = 19_800.0;
/// Object bytes per source byte without debug info (docs/sources/tmem.md 6.2: 80 random x86_64
/// units compiled with gcc 12 `-Os`).
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

scenario_names!(Arch {
    X86_64 => "x86_64",
    I386 => "i386",
});

/// What the tree is configured to build (tmem.md 6.2, 6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// `x86_64_defconfig` / `i386_defconfig`: nearly everything built in, no debug info.
    Defconfig,
    /// The guests' own distribution config, RHEL/OEL 5.4's `kernel-2.6.18-{x86_64,i686}.config`
    /// (2.6.18-164.el5) through `make oldconfig` with its defaults: two thirds of the code in
    /// modules, and `CONFIG_DEBUG_INFO=y`, so objects are about eight times their source.
    Rhel5,
}

scenario_names!(Config {
    Defconfig => "defconfig",
    Rhel5 => "rhel5",
});

/// What one configuration of the tree builds for one architecture (tmem.md 6.2 and 6.5: the dry
/// run `make -n -k V=1 all` of the 2.6.32.2 tree; objects compiled with gcc 12).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeShape {
    /// Kernel C units built in.
    pub builtin: u32,
    /// Kernel C units built as module code.
    pub module_units: u32,
    /// Modules (`.ko` files).
    pub modules: u32,
    /// Directories whose `built-in.o` links objects (`ld -r`).
    pub dirs: u32,
    /// `.c` bytes per built-in unit, median and mean (a lognormal through both).
    pub c_builtin: (f64, f64),
    /// `.c` bytes per module unit, median and mean.
    pub c_module: (f64, f64),
    /// Object bytes per source byte, built-in and module units.
    pub o_ratio: (f64, f64),
    /// cc1's anonymous peak, MiB: median and mean of a lognormal, clamped to a least and a most.
    pub cc1_mib: (f64, f64, f64, f64),
}

impl TreeShape {
    /// The measured shape of `config` for `arch`.
    pub fn of(config: Config, arch: Arch) -> Self {
        match (config, arch) {
            // The two module units of defconfig (test_nx, scsi_wait_scan) are 2.9 KB each.
            (Config::Defconfig, Arch::X86_64) => Self {
                builtin: 1_651,
                module_units: 2,
                modules: 2,
                dirs: 156,
                c_builtin: (C_MEDIAN, C_MEAN),
                c_module: (2_900.0, 2_900.0),
                o_ratio: (OBJECT_RATIO, OBJECT_RATIO),
                cc1_mib: (CC1_MEDIAN_MIB, CC1_MEAN_MIB, CC1_MIN_MIB, CC1_MAX_MIB),
            },
            (Config::Defconfig, Arch::I386) => Self { builtin: 1_636, dirs: 158, ..Self::of(Config::Defconfig, Arch::X86_64) },
            // Objects with `-g` (gcc 12's DWARF 5; `-gdwarf-2` gave 7.63 and 8.06, so gcc 4.1's
            // DWARF 2 is taken to be the same): 7.69 bytes per source byte over 100 built-in
            // units, 8.23 over 100 module units. The i686 objects were not measured.
            (Config::Rhel5, Arch::X86_64) => Self {
                builtin: 1_203,
                module_units: 2_325,
                modules: 993,
                dirs: 119,
                c_builtin: (10_000.0, 17_100.0),
                c_module: (14_900.0, 28_600.0),
                o_ratio: (7.69, 8.23),
                // cc1 with `-g` (tmem.md 6.5: every 40th unit of this config, 88 units): median
                // 29.3 MiB, p10 19.4, p90 43.4, so sigma 0.31 and mean 30.8 (measured 30.4); at
                // least 14.2; at most 88.4, `kernel/sched.c` with the GC settings gcc gives a
                // 368 MiB machine (one collection; 116.9 MiB with this machine's).
                cc1_mib: (29.3, 30.8, 14.2, 88.4),
            },
            (Config::Rhel5, Arch::I386) => Self {
                builtin: 1_191,
                module_units: 2_264,
                modules: 1_020,
                dirs: 120,
                c_builtin: (10_000.0, 16_900.0),
                c_module: (14_500.0, 28_300.0),
                ..Self::of(Config::Rhel5, Arch::X86_64)
            },
        }
    }

    /// C units in all.
    pub fn units(&self) -> u32 {
        self.builtin + self.module_units
    }
}

/// The kernel-build workload as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelBuild {
    /// The tree's name: guests building trees of one name read the same bytes.
    pub tree: String,
    /// Target architecture.
    pub arch: Arch,
    /// What the tree is configured to build.
    pub config: Config,
    /// `make -j`.
    pub jobs: u32,
    /// Builds in a row, each after a `make clean`.
    pub builds: u32,
    /// C units per build (the configuration's, or fewer for small runs: modules and directories
    /// shrink in proportion).
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

/// What `make` links, fixed by the configuration: which units are module code, the directories'
/// `built-in.o` and the modules. Units are numbered in make's order; module units are spread
/// evenly among the built-in ones, each directory and module is a run of consecutive units of
/// its kind (the dry run's per-directory and per-module counts are not modelled).
#[derive(Debug)]
struct Plan {
    module: Vec<bool>,
    /// Built-in units of each directory.
    dirs: Vec<Vec<u32>>,
    /// Each unit's directory (`NONE` for module units).
    dir_of: Vec<u32>,
    /// Module units of each module.
    modules: Vec<Vec<u32>>,
}

impl Plan {
    fn new(shape: &TreeShape, units: u32) -> Self {
        // A run with fewer units than the configuration keeps its proportions.
        let scale = |n: u32| ((n as u64 * units as u64).div_ceil(shape.units() as u64) as u32).max(1);
        let module_units = (shape.module_units as u64 * units as u64 / shape.units() as u64) as u32;
        let module: Vec<bool> =
            (0..units as u64).map(|u| (u + 1) * module_units as u64 / units as u64 > u * module_units as u64 / units as u64).collect();
        let builtin: Vec<u32> = (0..units).filter(|&u| !module[u as usize]).collect();
        let mods: Vec<u32> = (0..units).filter(|&u| module[u as usize]).collect();
        let split = |of: &[u32], n: u32| -> Vec<Vec<u32>> {
            let n = n.min(of.len() as u32) as usize;
            (0..n).map(|i| of[i * of.len() / n..(i + 1) * of.len() / n].to_vec()).collect()
        };
        let dirs = split(&builtin, scale(shape.dirs));
        let mut dir_of = vec![NONE; units as usize];
        for (d, us) in dirs.iter().enumerate() {
            for &u in us {
                dir_of[u as usize] = d as u32;
            }
        }
        Self { dirs, dir_of, modules: split(&mods, scale(shape.modules)), module }
    }
}

/// The job slots' common progress: how many have reached each point of each build (make's
/// waits for its children).
#[derive(Debug, Default)]
struct Progress {
    /// Per build: slots done compiling, `vmlinux` linked (0 or 1), slots done with modules.
    arrived: Vec<[u32; 3]>,
    /// Per build and directory: its units compiled.
    compiled: Vec<Vec<u32>>,
}

/// A point of a build the slots wait at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Compiled = 0,
    Vmlinux = 1,
    Modules = 2,
}

/// How often a slot waiting for the others looks again: make is woken by its children's exit at
/// once; 10 ms is far below a compilation and keeps the waiting cheap to simulate.
const POLL_NS: u64 = 10_000_000;

/// `ld -r`'s CPU per byte it reads, and per run: 2.9 ms per MB linking 126 `-g` objects of 24.4
/// MB (Binutils 2.40 on this machine, as `compile_ns`; 3.0 ms over 21 runs, 2.9 with DWARF 2),
/// 1.7 ms to start (tmem.md 6.5).
const LD_NS_PER_BYTE: f64 = 2.9;
const LD_START_NS: u64 = 1_700_000;
/// A final link applies the relocations too: 4.1 ms per MB on the same objects.
const LD_FINAL_NS_PER_BYTE: f64 = 4.1;

/// Generating and compiling a module's `.mod.c` (its version and symbol tables): a small unit,
/// taken as a quarter of a compilation [assumed]; its object is taken as 8 pages.
const MOD_C_DIVISOR: u64 = 4;
const MOD_O_PAGES: u32 = 8;

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

    /// The key of a linked output: `what` names the kind (`built-in.o`, `.ko`, ...), `n` which.
    fn output_key(&self, what: &str, n: u32) -> u64 {
        splitmix64(name_digest(what) ^ name_digest(&self.tree) ^ (n as u64) << 8 ^ (self.arch as u64 + 1) << 40)
    }

    /// Unit `u`'s sizes. Units are numbered in the tree, not per architecture: the i386 build
    /// compiles the first `units` of them as the x86_64 one does. A module unit's source and object
    /// follow the module units' measured sizes.
    fn unit(&self, u: u32, module: bool) -> Unit {
        let shape = TreeShape::of(self.config, self.arch);
        let k = splitmix64(name_digest(&self.tree) ^ u as u64);
        let ((median, mean), ratio) = if module { (shape.c_module, shape.o_ratio.1) } else { (shape.c_builtin, shape.o_ratio.0) };
        let c_bytes = lognormal(k ^ 1, median, mean);
        let (cc1_median, cc1_mean, cc1_min, cc1_max) = shape.cc1_mib;
        let cc1 = lognormal(k ^ 2, cc1_median, cc1_mean).clamp(cc1_min, cc1_max);
        let headers = (HEADERS_MEAN + HEADERS_SD * normal(k ^ 3)).clamp(CORE_HEADERS, HEADERS_MAX);
        let header_page = HEADER_BYTES / HEADERS / PAGE_SIZE as f64;
        let (_, include) = self.include();
        let core_pages = (CORE_HEADERS * header_page).ceil() as u32;
        let sub_pages = ((headers - CORE_HEADERS) * header_page).ceil() as u32;
        let zone = (include - core_pages) as u64 / SUBSYSTEMS;
        let sub_first = (core_pages + (splitmix64(k ^ 4) % SUBSYSTEMS * zone) as u32).min(include - sub_pages);
        Unit {
            c_pages: pages(c_bytes),
            o_pages: pages(c_bytes * ratio),
            cmd_pages: pages(CMD_MEAN_BYTES * headers / HEADERS_MEAN),
            anon_pages: pages((cc1 + JOB_OTHER_MIB) * (1 << 20) as f64),
            core_pages,
            sub_first,
            sub_pages,
        }
    }

    /// The processes of make's job slots, sharing make's view of the build.
    pub fn processes(&self) -> Vec<KernelBuildJob> {
        let plan = Arc::new(Plan::new(&TreeShape::of(self.config, self.arch), self.units));
        let builds = self.builds as usize;
        let progress = Arc::new(Mutex::new(Progress { arrived: vec![[0; 3]; builds], compiled: vec![vec![0; plan.dirs.len()]; builds] }));
        (0..self.jobs)
            .map(|job| KernelBuildJob {
                cfg: self.clone(),
                plan: plan.clone(),
                progress: progress.clone(),
                job,
                build: 0,
                stage: Stage::Compile { next: job },
                compiling: NONE,
                linked: Vec::new(),
                ops: VecDeque::new(),
                handles: 0,
                regions: 0,
            })
            .collect()
    }
}

/// Where a job slot is in the current build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Compiling its units, the next one `next`.
    Compile { next: u32 },
    /// Done compiling; slot 0 links `vmlinux` once all are, the others wait for it.
    Vmlinux,
    /// Slot 0's `vmlinux` links are queued.
    Linked,
    /// Building its share of the modules (`.mod.c`, `.ko`), the next one `next`.
    Modules { next: u32 },
    /// Done with this build; waiting for every slot before `make clean` and the next build.
    Finish,
    /// No builds left.
    Done,
}

/// One of make's job slots: its compilations, one after another, then its share of the links.
#[derive(Debug)]
pub struct KernelBuildJob {
    cfg: KernelBuild,
    plan: Arc<Plan>,
    progress: Arc<Mutex<Progress>>,
    job: u32,
    build: u32,
    stage: Stage,
    /// The unit whose compilation is queued (`NONE`: none).
    compiling: u32,
    /// Directories whose `built-in.o` it linked in this build.
    linked: Vec<u32>,
    ops: VecDeque<Op>,
    /// Files it has opened (the next handle).
    handles: u32,
    /// Regions it has mapped (the next region number).
    regions: u32,
}

impl KernelBuildJob {
    /// Records that this slot reached `point` of the current build.
    fn arrive(&self, point: Point) {
        self.progress.lock().expect("make's progress").arrived[self.build as usize][point as usize] += 1;
    }

    /// Whether `n` slots have reached `point` of the current build.
    fn reached(&self, point: Point, n: u32) -> bool {
        self.progress.lock().expect("make's progress").arrived[self.build as usize][point as usize] >= n
    }

    fn open(&mut self, key: u64, pages: u32, create: bool) -> u32 {
        self.ops.push_back(Op::Open { key, pages, create });
        self.handles += 1;
        self.handles - 1
    }

    /// `ld`: reads `inputs` (name, pages) whole and writes `output`, their sum; `final_link`
    /// applies the relocations (vmlinux), otherwise it is `ld -r`.
    fn link(&mut self, inputs: &[(u64, u32)], output: u64, final_link: bool) {
        let mut total = 0;
        for &(key, n) in inputs {
            let f = self.open(key, n, false);
            self.ops.push_back(Op::Read { file: f, first: 0, count: n });
            total += n;
        }
        let per_byte = if final_link { LD_FINAL_NS_PER_BYTE } else { LD_NS_PER_BYTE };
        self.ops.push_back(Op::Compute { ns: LD_START_NS + (total as f64 * PAGE_SIZE as f64 * per_byte) as u64 });
        let out = self.open(output, total, true);
        self.ops.push_back(Op::Write { file: out, first: 0, count: total });
    }

    fn object(&self, u: u32) -> (u64, u32) {
        (self.cfg.object_key(u), self.cfg.unit(u, self.plan.module[u as usize]).o_pages)
    }

    /// A directory's `built-in.o`: its name and size.
    fn builtin_o(&self, d: u32) -> (u64, u32) {
        (self.cfg.output_key("built-in.o", d), self.plan.dirs[d as usize].iter().map(|&u| self.object(u).1).sum())
    }

    /// Queues unit `u`'s compilation, and the link of its directory's `built-in.o` if it is the
    /// directory's last unit.
    fn compile(&mut self, u: u32) {
        let cfg = self.cfg.clone();
        let unit = cfg.unit(u, self.plan.module[u as usize]);
        let (include, include_pages) = cfg.include();
        let region = self.regions;
        self.regions += 1;
        // cc1 starts: its text and libraries come through the page cache, one copy for every
        // compiler (read, not mapped: a copy per cached page is charged, 2 ms against 710).
        let text_pages = pages(CC1_TEXT_MIB * (1 << 20) as f64);
        let cc1 = self.open(cfg.compiler_key(), text_pages, false);
        self.ops.push_back(Op::Read { file: cc1, first: 0, count: text_pages });
        self.ops.push_back(Op::Map { pages: unit.anon_pages });
        let src = self.open(cfg.source_key(u), unit.c_pages, false);
        self.ops.push_back(Op::Read { file: src, first: 0, count: unit.c_pages });
        let inc = self.open(include, include_pages, false);
        self.ops.push_back(Op::Read { file: inc, first: 0, count: unit.core_pages });
        if unit.sub_pages > 0 {
            self.ops.push_back(Op::Read { file: inc, first: unit.sub_first, count: unit.sub_pages });
        }
        // cc1 builds its trees in the heap, then works over them.
        let sweep = |write| Pattern::Sweep { first: 0, count: unit.anon_pages as u64, refs: 1, write };
        self.ops.push_back(Op::Access { region, pattern: sweep(true) });
        self.ops.push_back(Op::Compute { ns: cfg.compile_ns / 2 });
        self.ops.push_back(Op::Access { region, pattern: sweep(false) });
        self.ops.push_back(Op::Compute { ns: cfg.compile_ns - cfg.compile_ns / 2 });
        let obj = self.open(cfg.object_key(u), unit.o_pages, true);
        self.ops.push_back(Op::Write { file: obj, first: 0, count: unit.o_pages });
        self.ops.push_back(Op::Unmap { region });
        let cmd = self.open(cfg.cmd_key(u), unit.cmd_pages, true);
        self.ops.push_back(Op::Write { file: cmd, first: 0, count: unit.cmd_pages });
        self.compiling = u;
    }

    /// Unit `u`'s compilation is done: the slot that finishes a directory's last unit links its
    /// `built-in.o` (make starts a target once all it depends on exists). Returns whether it does.
    fn compiled(&mut self, u: u32) -> bool {
        let d = self.plan.dir_of[u as usize];
        if d == NONE {
            return false;
        }
        let done = {
            let mut p = self.progress.lock().expect("make's progress");
            let c = &mut p.compiled[self.build as usize][d as usize];
            *c += 1;
            *c as usize == self.plan.dirs[d as usize].len()
        };
        if done {
            let inputs: Vec<(u64, u32)> = self.plan.dirs[d as usize].iter().map(|&v| self.object(v)).collect();
            self.link(&inputs, self.cfg.output_key("built-in.o", d), false);
            self.linked.push(d);
        }
        done
    }

    /// Queues `vmlinux`'s three links (`.tmp_vmlinux1`, `.tmp_vmlinux2` after kallsyms, then
    /// `vmlinux`), each reading every directory's `built-in.o`.
    fn vmlinux(&mut self) {
        let inputs: Vec<(u64, u32)> = (0..self.plan.dirs.len() as u32).map(|d| self.builtin_o(d)).collect();
        for i in 0..3 {
            self.link(&inputs, self.cfg.output_key("vmlinux", i), true);
        }
    }

    /// Queues module `m`: its `.mod.c` compiled, then its `.ko` linked from its objects.
    fn module(&mut self, m: u32) {
        let mod_o = self.cfg.output_key(".mod.o", m);
        self.ops.push_back(Op::Compute { ns: self.cfg.compile_ns / MOD_C_DIVISOR });
        let f = self.open(mod_o, MOD_O_PAGES, true);
        self.ops.push_back(Op::Write { file: f, first: 0, count: MOD_O_PAGES });
        let mut inputs: Vec<(u64, u32)> = self.plan.modules[m as usize].iter().map(|&u| self.object(u)).collect();
        inputs.push((mod_o, MOD_O_PAGES));
        self.link(&inputs, self.cfg.output_key(".ko", m), false);
    }

    /// `make clean`: this slot's outputs go.
    fn clean(&mut self) {
        let (jobs, job) = (self.cfg.jobs, self.job);
        for u in (job..self.cfg.units).step_by(jobs as usize) {
            self.ops.push_back(Op::Unlink { key: self.cfg.object_key(u) });
            self.ops.push_back(Op::Unlink { key: self.cfg.cmd_key(u) });
        }
        for d in std::mem::take(&mut self.linked) {
            self.ops.push_back(Op::Unlink { key: self.cfg.output_key("built-in.o", d) });
        }
        for m in (job..self.plan.modules.len() as u32).step_by(jobs as usize) {
            self.ops.push_back(Op::Unlink { key: self.cfg.output_key(".mod.o", m) });
            self.ops.push_back(Op::Unlink { key: self.cfg.output_key(".ko", m) });
        }
        if job == 0 {
            for i in 0..3 {
                self.ops.push_back(Op::Unlink { key: self.cfg.output_key("vmlinux", i) });
            }
        }
    }

    /// Queues the next step, or a wait for the other slots.
    fn refill(&mut self) {
        let jobs = self.cfg.jobs;
        if self.compiling != NONE {
            let u = std::mem::replace(&mut self.compiling, NONE);
            if self.compiled(u) {
                return;
            }
        }
        match self.stage {
            Stage::Compile { next } if next < self.cfg.units => {
                if next == self.job {
                    self.ops.push_back(Op::Mark { label: format!("build-{}-start", self.build + 1) });
                }
                self.stage = Stage::Compile { next: next + jobs };
                self.compile(next);
            }
            Stage::Compile { .. } => {
                self.arrive(Point::Compiled);
                self.stage = Stage::Vmlinux;
            }
            Stage::Vmlinux if self.job == 0 => {
                if self.reached(Point::Compiled, jobs) {
                    self.vmlinux();
                    self.stage = Stage::Linked;
                } else {
                    self.ops.push_back(Op::Sleep { ns: POLL_NS });
                }
            }
            Stage::Vmlinux => {
                if self.reached(Point::Vmlinux, 1) {
                    self.stage = Stage::Modules { next: self.job };
                } else {
                    self.ops.push_back(Op::Sleep { ns: POLL_NS });
                }
            }
            Stage::Linked => {
                // vmlinux is linked: modpost and the modules may start.
                self.arrive(Point::Vmlinux);
                self.stage = Stage::Modules { next: self.job };
            }
            Stage::Modules { next } if next < self.plan.modules.len() as u32 => {
                self.stage = Stage::Modules { next: next + jobs };
                self.module(next);
            }
            Stage::Modules { .. } => {
                self.arrive(Point::Modules);
                self.stage = Stage::Finish;
            }
            Stage::Finish => {
                if !self.reached(Point::Modules, jobs) {
                    self.ops.push_back(Op::Sleep { ns: POLL_NS });
                    return;
                }
                self.ops.push_back(Op::Mark { label: format!("build-{}-end", self.build + 1) });
                self.build += 1;
                if self.build >= self.cfg.builds {
                    self.stage = Stage::Done;
                    self.ops.push_back(Op::Exit);
                } else {
                    self.clean();
                    self.stage = Stage::Compile { next: self.job };
                }
            }
            Stage::Done => self.ops.push_back(Op::Exit),
        }
    }
}

impl Workload for KernelBuildJob {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        loop {
            if let Some(op) = self.ops.pop_front() {
                return op;
            }
            self.refill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(arch: Arch) -> KernelBuild {
        configured(arch, Config::Defconfig)
    }

    fn configured(arch: Arch, config: Config) -> KernelBuild {
        let units = TreeShape::of(config, arch).units();
        KernelBuild { tree: "linux-2.6.32".into(), arch, config, jobs: 8, builds: 2, units, compile_ns: 710_000_000 }
    }

    #[test]
    fn units_follow_the_measured_tree() {
        let b = build(Arch::X86_64);
        let n = b.units as f64;
        let units: Vec<Unit> = (0..b.units).map(|u| b.unit(u, false)).collect();
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
        assert_eq!(b.unit(7, false), build(Arch::I386).unit(7, false), "one tree, whatever the target");
        assert_ne!(b.object_key(7), build(Arch::I386).object_key(7), "objects differ by target");
        assert_eq!(b.source_key(7), build(Arch::I386).source_key(7));
    }

    #[test]
    fn every_file_of_the_tree_has_its_own_name() {
        let b = build(Arch::X86_64);
        let mut keys: Vec<u64> = (0..b.units)
            .flat_map(|u| [b.source_key(u), b.object_key(u), b.cmd_key(u), build(Arch::I386).object_key(u), build(Arch::I386).cmd_key(u)])
            .chain([b.include().0, b.compiler_key(), build(Arch::I386).compiler_key()])
            .chain(["built-in.o", "vmlinux", ".mod.o", ".ko"].iter().flat_map(|w| (0..1_000).map(|n| b.output_key(w, n))))
            .collect();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n, "two files share a name");
    }

    /// Runs every slot of `b` to its end, one operation of each in turn (a `Sleep` is a turn
    /// spent waiting), and returns the operations in the order they were issued, with their slot.
    fn drive(b: &KernelBuild) -> Vec<(u32, Op)> {
        let sys = SystemView::default();
        let mut slots = b.processes();
        let mut live = vec![true; slots.len()];
        let mut ops = Vec::new();
        while live.iter().any(|&l| l) {
            for (j, p) in slots.iter_mut().enumerate() {
                if !live[j] {
                    continue;
                }
                let op = p.next_op(&sys);
                live[j] = op != Op::Exit;
                ops.push((j as u32, op));
            }
            assert!(ops.len() < 10_000_000, "the slots never finish");
        }
        ops
    }

    #[test]
    fn each_job_builds_its_share_twice_links_and_cleans_between() {
        let b = build(Arch::I386);
        let shape = TreeShape::of(Config::Defconfig, Arch::I386);
        let ops = drive(&b);
        let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|(_, o)| f(o)).count() as u32;
        let (units, dirs, modules) = (shape.units(), shape.dirs, shape.modules);
        assert_eq!(count(&|o| matches!(o, Op::Map { .. })), 2 * units, "a compiler per unit and build");
        // Per build: objects and .cmd files, built-in.o per directory, three vmlinux links, a
        // .mod.o and a .ko per module; `make clean` between the two builds removes them all.
        let outputs = 2 * units + dirs + 3 + 2 * modules;
        assert_eq!(count(&|o| matches!(o, Op::Write { .. })), 2 * outputs);
        assert_eq!(count(&|o| matches!(o, Op::Unlink { .. })), outputs);
    }

    #[test]
    fn links_wait_for_what_they_read() {
        let mut b = configured(Arch::X86_64, Config::Rhel5);
        b.units = 300;
        let ops = drive(&b);
        // Positions of the writes of each kind of file, by name.
        let files: Vec<(usize, u64)> = ops
            .iter()
            .enumerate()
            .filter_map(|(i, (_, o))| if let Op::Open { key, create: true, .. } = o { Some((i, *key)) } else { None })
            .collect();
        let first_build_end = ops.iter().position(|(_, o)| matches!(o, Op::Unlink { .. })).expect("a make clean");
        let at = |key: u64| files.iter().find(|&&(i, k)| k == key && i < first_build_end).map(|&(i, _)| i).expect("written");
        let objects = (0..b.units).map(|u| at(b.object_key(u))).max().expect("units");
        let vmlinux: Vec<usize> = (0..3).map(|i| at(b.output_key("vmlinux", i))).collect();
        let plan = Plan::new(&TreeShape::of(b.config, b.arch), b.units);
        let modules = plan.modules.len() as u32;
        assert!(modules > 50, "{modules} modules");
        let kos: Vec<usize> = (0..modules).map(|m| at(b.output_key(".ko", m))).collect();
        for (d, units) in plan.dirs.iter().enumerate() {
            let last = units.iter().map(|&u| at(b.object_key(u))).max().expect("a directory has units");
            assert!(at(b.output_key("built-in.o", d as u32)) > last, "directory {d} is linked after its objects");
        }
        assert!(vmlinux[0] > objects, "vmlinux is linked after every object is written");
        assert!(kos.iter().all(|&k| k > vmlinux[2]), "modules are linked after vmlinux");
        assert!(first_build_end > *kos.iter().max().expect("modules"), "make clean waits for every module");
        // Only slot 0 links vmlinux, and every slot links modules.
        assert!(vmlinux.iter().all(|&i| ops[i].0 == 0));
        let linkers: std::collections::BTreeSet<u32> = kos.iter().map(|&i| ops[i].0).collect();
        assert_eq!(linkers.len() as u32, b.jobs);
    }

    #[test]
    fn the_distribution_config_builds_modules_with_debug_info() {
        let b = configured(Arch::X86_64, Config::Rhel5);
        let shape = TreeShape::of(b.config, b.arch);
        let plan = Plan::new(&shape, b.units);
        assert_eq!(plan.module.iter().filter(|&&m| m).count() as u32, shape.module_units);
        assert_eq!((plan.dirs.len() as u32, plan.modules.len() as u32), (shape.dirs, shape.modules));
        // Mean object bytes per unit within 15 % of source mean x measured ratio (the lognormal's
        // sampling error of the mean is a few percent; page rounding adds half a page).
        for module in [false, true] {
            let units: Vec<Unit> = (0..b.units).filter(|&u| plan.module[u as usize] == module).map(|u| b.unit(u, module)).collect();
            let o_kb = units.iter().map(|u| u.o_pages as f64).sum::<f64>() / units.len() as f64 * 4.096;
            let ((_, c_mean), ratio) = if module { (shape.c_module, shape.o_ratio.1) } else { (shape.c_builtin, shape.o_ratio.0) };
            let want = c_mean / 1000.0 * ratio;
            assert!((o_kb - want).abs() < 0.15 * want, "module {module}: {o_kb} KB per object, {want} expected");
        }
        // cc1 with -g: the median of 3,528 draws within 10 % of the measured 29.3 MiB, above
        // defconfig's 23.6.
        let mut cc1: Vec<f64> =
            (0..b.units).map(|u| b.unit(u, plan.module[u as usize]).anon_pages as f64 / 256.0 - JOB_OTHER_MIB).collect();
        cc1.sort_by(f64::total_cmp);
        let median = cc1[cc1.len() / 2];
        assert!((median - 29.3).abs() < 0.1 * 29.3, "median {median} MiB of cc1 with -g");
    }
}
