//! Workloads: each yields a stream of operations (touch pages, map memory, read and write files,
//! compute, sleep) with a fixed amount of work, so a run's runtime measures its performance.
//!
//! A workload is pure: it never sees simulator state, only the order of its own operations, so the
//! same workload could drive a real process.

mod access;
mod bonnie;
mod dotnet_heap;
mod fileio;
mod idle;
mod kernel_build;
mod random;
mod stress;
mod stressvm;
mod trace;
mod web_server;

pub use access::{Pattern, Ref, xorshift64star};
pub use bonnie::Bonnie;
pub use dotnet_heap::{ClrHeap, DotnetHeap};
pub use fileio::FileIo;
pub use idle::Idle;
pub use kernel_build::{Arch, Config, KernelBuild, KernelBuildJob, TreeShape};
pub use random::Random;
pub use stress::Stress;
pub use stressvm::StressVm;
pub use trace::{Replayer, TraceReplay};
pub use web_server::{Closer, Load, MSS, WebServer, zipf_cdf, zipf_pick};

use std::sync::Arc;

use crate::trace::Trace;

/// Finds the trace a `trace` workload names (loading files is the caller's business).
pub type TraceSource<'a> = &'a dyn Fn(&str) -> Result<Arc<Trace>, String>;

/// One operation of a workload. Operations carry their own progress: the simulator advances the
/// fields in place (`first`, `count`, `ns`) as work is done, so an interrupted operation resumes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Create an anonymous region of `pages` untouched pages; regions are numbered 0, 1, ... in order.
    Map {
        /// Size in pages.
        pages: u32,
    },
    /// Release a region, its pages and its swap slots.
    Unmap {
        /// Region number.
        region: u32,
    },
    /// Reference the pages of a region in the pattern's order.
    Access {
        /// Region number.
        region: u32,
        /// The order of references, with its progress.
        pattern: Pattern,
    },
    /// Create an empty file of `pages` pages on the guest's file system; files are numbered 0, 1, ...
    CreateFile {
        /// Size in pages.
        pages: u32,
    },
    /// `open()` the file named `key` (shared by every process of the guest): one already on the
    /// guest's disk, or with `create` a new empty one replacing any of that name. It takes the
    /// process's next file number, as `CreateFile` does.
    Open {
        /// The file's name.
        key: u64,
        /// Its size in pages.
        pages: u32,
        /// `O_CREAT | O_TRUNC`.
        create: bool,
    },
    /// `unlink()` the file named `key`.
    Unlink {
        /// The file's name.
        key: u64,
    },
    /// `write()` `count` whole pages starting at page `first` of a file, through the page cache.
    Write {
        /// File number.
        file: u32,
        /// First page.
        first: u32,
        /// Pages still to write.
        count: u32,
    },
    /// `read()` pages of a file through the page cache.
    Read {
        /// File number.
        file: u32,
        /// First page.
        first: u32,
        /// Pages still to read.
        count: u32,
    },
    /// `fsync()`: write the file's dirty pages and wait for them.
    Fsync {
        /// File number.
        file: u32,
    },
    /// Use the CPU for a while without touching memory the simulator tracks.
    Compute {
        /// Time still to compute.
        ns: u64,
    },
    /// Sleep without using the CPU.
    Sleep {
        /// Time to sleep.
        ns: u64,
    },
    /// Record the current time under a label (phase boundaries for the summary).
    Mark {
        /// Label.
        label: String,
    },
    /// End of the workload.
    Exit,
}

/// What a process can ask the operating system about memory: Windows' `GlobalMemoryStatusEx`
/// and memory resource notifications (on Linux, MemAvailable; no notification). Workloads that
/// adapt to memory (the CLR's collector) read it; the others ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemView {
    /// The current simulated time, ns.
    pub now_ns: u64,
    /// Physical memory, pages.
    pub total_pages: u64,
    /// Available memory, pages (Windows: free + zeroed + standby).
    pub available_pages: u64,
    /// Whether the low-memory resource notification is signalled.
    pub low_memory: bool,
}

/// A source of operations.
pub trait Workload: Send + Sync {
    /// The next operation; called when the previous one has completed. After `Op::Exit` it is not
    /// called again.
    fn next_op(&mut self, sys: &SystemView) -> Op;

    /// The .NET Memory counters, for a managed process.
    fn clr(&self) -> Option<ClrHeap> {
        None
    }
}

/// A workload as a scenario configures it.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    /// Seed 003's paging stress program.
    Stress(Stress),
    /// Sequential file write (and optional read back) through the page cache.
    FileIo(FileIo),
    /// A quiet, booted system touching a small set now and then.
    Idle(Idle),
    /// Replay of a recorded page-reference trace.
    Trace(TraceReplay),
    /// Uniformly random page references.
    Random(Random),
    /// The `stress` tool's `--vm` workers.
    StressVm(StressVm),
    /// bonnie++'s block write, rewrite and read.
    Bonnie(Bonnie),
    /// Seed 000's .NET program: a Large Object Heap updated at random, collected by the CLR.
    DotnetHeap(DotnetHeap),
    /// Seed 002's `make -j8` of a Linux 2.6.32 tree, twice.
    KernelBuild(KernelBuild),
    /// Seed 004's web server in an Ilwaco guest (host profile `denali`), with its clients.
    WebServer(WebServer),
}

/// A configured workload with its place in time.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadEntry {
    /// Name used in the summary (defaults to the kind).
    pub name: String,
    /// When its processes start.
    pub start_ns: u64,
    /// What it does.
    pub spec: WorkloadSpec,
    /// What its processes write: its kind of data if the scenario says (else the workload kind's
    /// default, `WorkloadSpec::content`), and the declared shares of zero, common and repeated pages.
    pub mix: crate::content::ContentMix,
    /// Its processes run in a memory cgroup with this limit in pages (Linux guests).
    pub memory_limit: Option<u64>,
}

impl WorkloadEntry {
    /// What its pages hold: anonymous memory, or (`file`) the data of files it writes.
    pub fn content(&self, file: bool) -> crate::host::Content {
        self.mix.class.unwrap_or_else(|| self.spec.content(file))
    }
}

impl WorkloadSpec {
    /// Kind names as written in scenario files.
    pub const KINDS: &'static [&'static str] =
        &["stress", "file-io", "idle", "trace", "random", "stress-vm", "bonnie", "dotnet-heap", "kernel-build", "web-server"];

    /// The kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stress(_) => "stress",
            Self::FileIo(_) => "file-io",
            Self::Idle(_) => "idle",
            Self::Trace(_) => "trace",
            Self::Random(_) => "random",
            Self::StressVm(_) => "stress-vm",
            Self::Bonnie(_) => "bonnie",
            Self::DotnetHeap(_) => "dotnet-heap",
            Self::KernelBuild(_) => "kernel-build",
            Self::WebServer(_) => "web-server",
        }
    }

    /// The processes this workload runs, each with its operation source; `seed` is this workload's
    /// stream seed (derived from the scenario's).
    pub fn processes(&self, traces: TraceSource, seed: u64) -> Result<Vec<Box<dyn Workload>>, String> {
        Ok(match self {
            Self::Stress(s) => (0..s.instances).map(|_| Box::new(s.clone()) as Box<dyn Workload>).collect(),
            Self::FileIo(f) => vec![Box::new(f.clone())],
            Self::Idle(i) => vec![Box::new(i.clone())],
            Self::Trace(t) => vec![Box::new(Replayer::new(t.clone(), traces(&t.file)?))],
            Self::Random(r) => vec![Box::new(r.seeded(seed))],
            Self::StressVm(s) => (0..s.workers).map(|_| Box::new(s.clone()) as Box<dyn Workload>).collect(),
            Self::Bonnie(b) => vec![Box::new(b.clone())],
            Self::DotnetHeap(d) => vec![Box::new(d.process(seed))],
            Self::KernelBuild(k) => k.processes().into_iter().map(|p| Box::new(p) as Box<dyn Workload>).collect(),
            // Requests, not an operation stream: the Denali host serves it (`denali::DenaliHost`).
            Self::WebServer(_) => return Err("a web-server workload runs only in an ilwaco guest on a denali host".into()),
        })
    }

    /// How many processes `processes` returns.
    pub fn processes_len(&self) -> usize {
        match self {
            Self::Stress(s) => s.instances as usize,
            Self::StressVm(s) => s.workers as usize,
            Self::KernelBuild(k) => k.jobs as usize,
            Self::FileIo(_)
            | Self::Idle(_)
            | Self::Trace(_)
            | Self::Random(_)
            | Self::Bonnie(_)
            | Self::DotnetHeap(_)
            | Self::WebServer(_) => 1,
        }
    }

    /// What its pages hold (anonymous memory, or the data of files it writes), for how well they
    /// compress.
    pub fn content(&self, file: bool) -> crate::host::Content {
        use crate::host::Content;
        match self {
            Self::Stress(_) if !file => Content::Stress,
            Self::StressVm(_) if !file => Content::StressVm,
            Self::Bonnie(_) if file => Content::BonnieData,
            // Its files are mostly the tree's sources and headers; objects compress alike
            // (mean LZO1X-1 size 1,642 B against the sources' 1,664 B).
            Self::KernelBuild(_) if file => Content::KernelSource,
            _ => Content::Generic,
        }
    }

    /// Bytes a timed phase ("write", "rewrite", "read") moves, for its rate.
    pub fn phase_bytes(&self, phase: &str) -> Option<u64> {
        let pages = match (self, phase) {
            (Self::FileIo(f), "write") => f.pages,
            (Self::FileIo(f), "read") if f.read => f.pages,
            (Self::Bonnie(b), "write" | "rewrite" | "read") => b.pages,
            _ => return None,
        };
        Some(pages as u64 * crate::units::PAGE_SIZE)
    }

    /// Whether the workload reads or writes files (through the page cache).
    pub fn uses_files(&self) -> bool {
        matches!(self, Self::FileIo(_) | Self::Bonnie(_) | Self::KernelBuild(_))
    }

    /// Whether the workload finishes on its own.
    pub fn is_finite(&self) -> bool {
        match self {
            Self::Stress(s) => s.passes.is_some(),
            Self::FileIo(_) | Self::Trace(_) | Self::Random(_) | Self::Bonnie(_) | Self::DotnetHeap(_) | Self::KernelBuild(_) => true,
            Self::StressVm(s) => s.rounds.is_some(),
            Self::Idle(_) | Self::WebServer(_) => false,
        }
    }
}
