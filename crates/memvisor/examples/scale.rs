//! Simulator memory per VM: `cargo run --release --example scale -- [VMS] [MEMORY] [TOUCHED]`
//! powers on VMS guests of MEMORY (default 1,000 of 512 MiB) that each touch TOUCHED (default
//! 8 MiB) and go idle, runs them for two simulated seconds, and prints the simulator's memory per
//! VM two ways: bytes allocated and not freed (counted by this program's allocator, so untouched
//! zeroed allocations cannot hide) and resident memory (VmRSS), both less an empty run's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok()).unwrap_or(0)
        * 1024
}

/// Live bytes and resident bytes after running `vms` guests for two simulated seconds.
fn measure(vms: usize, memory: &str, touched: &str) -> (usize, usize, f64) {
    let text = format!(
        "name = \"scale\"\nduration = \"2s\"\n[host]\nmemory = \"{}GiB\"\nsample_interval = \"1s\"\n\
         [[datastore]]\nname = \"d\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"vm\"\ncount = {}\nmemory = \"{memory}\"\ndatastore = \"d\"\n\
         workload = {{ kind = \"idle\", footprint = \"{touched}\" }}\n",
        vms.max(1),
        vms.max(1)
    );
    let s = memvisor::scenario::load(&text, "scale", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
    let (live0, rss0) = (LIVE.load(Ordering::Relaxed), rss_bytes());
    let t0 = std::time::Instant::now();
    let mut sim = memvisor::Simulation::new(&s).unwrap_or_else(|e| panic!("{e}"));
    sim.run().unwrap_or_else(|e| panic!("{e}"));
    let wall = t0.elapsed().as_secs_f64();
    let out = (LIVE.load(Ordering::Relaxed) - live0, rss_bytes().saturating_sub(rss0), wall);
    drop(sim);
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let vms: usize = args.next().map_or(1000, |a| a.parse().expect("VMS is a number"));
    let memory = args.next().unwrap_or_else(|| "512MiB".into());
    let touched = args.next().unwrap_or_else(|| "8MiB".into());
    let (live, rss, wall) = measure(vms, &memory, &touched);
    println!(
        "{vms} VMs of {memory}, each touching {touched}: {:.1} KiB allocated and {:.1} KiB resident per VM ({:.2} s wall)",
        live as f64 / vms as f64 / 1024.0,
        rss as f64 / vms as f64 / 1024.0,
        wall
    );
}
