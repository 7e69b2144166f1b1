//! The one-guest scenario `memvisor trace replay` runs: a guest in which exactly `frames` page
//! frames are available to the replaying process, its swap on an SSD, nothing else running. It is
//! an ordinary scenario, so the replay goes through the same guest memory manager as any other.

use crate::guest::{Replacement, Sysctl, Watermarks};

/// Guest pages for `frames` usable frames: in exact-LRU mode exactly that; in Linux mode also the
/// free memory the high watermark keeps, which itself depends on the guest's size.
pub fn guest_pages_for(frames: u64, mode: Replacement) -> u64 {
    if mode == Replacement::ExactLru {
        return frames;
    }
    let mut managed = frames;
    loop {
        let next = frames + Watermarks::linux(managed, &Sysctl::default()).high;
        if next == managed {
            return managed;
        }
        managed = next;
    }
}

/// Scenario text replaying `file` (of `distinct_pages` pages) with `frames` frames available. THP is
/// off so that `min_free_kbytes` is the formula's, as `guest_pages_for` assumes.
pub fn replay_scenario(file: &str, distinct_pages: u64, frames: u64, mode: Replacement, loops: u64, compute_ns: u64) -> String {
    let pages = guest_pages_for(frames, mode);
    // A file name is any text: written as TOML strings, quotes and newlines in it stay its own.
    let quoted = |s: String| toml::Value::String(s).to_string();
    let description = quoted(format!("replay of {file} with {frames} page frames ({})", mode.name()));
    let file = quoted(file.to_string());
    format!(
        "name = \"trace-replay\"\n\
         description = {description}\n\
         [host]\nmemory = \"{pages} pages\"\nsample_interval = \"1h\"\n\
         [[datastore]]\nname = \"swap\"\ndevice = \"ssd\"\n\
         [[vm]]\nname = \"replay\"\nmemory = \"{pages} pages\"\nkernel_reserved = \"0B\"\noverhead = \"0B\"\ntransparent_hugepage = \"never\"\n\
         datastore = \"swap\"\nswap = \"{swap} pages\"\nreplacement = \"{mode}\"\n\
         workload = {{ kind = \"trace\", file = {file}, loops = {loops}, compute = \"{compute_ns}ns\" }}\n\
         [report]\ncolumns = [\"pgfault\", \"pgmajfault\", \"runtime_s\"]\n",
        // A slot for every page the trace touches, and one more: linux-mode reclaim scans anon
        // pages only while a slot is free (`can_reclaim_anon_pages` in mm/vmscan.c), and each
        // page holds at most one slot, so one spare slot keeps swap from ever stopping reclaim.
        // Without it, pages reclaim has just written (clean, in the swap cache) fill the last
        // slots, nothing anon can be scanned, and the OOM killer ends the replay, as in Linux.
        swap = distinct_pages + 1,
        mode = mode.name(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::WorkloadSpec;

    #[test]
    fn a_file_name_is_the_name_whatever_it_holds() {
        let name = "q\"uote\\back\nduration = \"10ms\"";
        let text = replay_scenario(name, 10, 64, Replacement::ExactLru, 1, 0);
        let s = crate::scenario::load(&text, "replay", &[]).expect("loads").remove(0);
        assert_eq!(s.duration_ns, None, "nothing in the name became a key");
        match &s.vms[0].guest.workloads[0].spec {
            WorkloadSpec::Trace(t) => assert_eq!(t.file, name),
            other => panic!("{other:?}"),
        }
    }
}
