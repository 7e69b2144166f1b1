//! dom0's block backend: on a Xen host, a guest's disk request goes through dom0 (blkfront's
//! shared ring to blkback, or to tapdisk for `tap:aio` as in seed 002), which maps the guest's
//! granted pages, submits the request to the real disk and, when it completes, unmaps them,
//! answers on the ring and notifies the guest. That work takes dom0's vCPUs, and they take the
//! host's physical CPUs from the guests (`pcpu.rs`). Modelled where `host.dom0_vcpus` is set.
//!
//! Each ring request carries at most `BLKIF_MAX_SEGMENTS_PER_REQUEST` pages (a segment is at
//! most a page), so a guest request of n pages is ceil(n / 11) ring requests to dom0. dom0's
//! CPU per ring request is `costs.blkback_request`, half when it is issued and half when it
//! completes, on whichever of dom0's vCPUs is free first.

/// Pages one ring request carries: `BLKIF_MAX_SEGMENTS_PER_REQUEST`, 11
/// (xen/include/public/io/blkif.h; blkfront caps a request's segments at it, each at a page).
pub const BLKIF_MAX_SEGMENTS_PER_REQUEST: u64 = 11;

/// dom0's CPU per ring request, issue and completion together: 25 us [assumed: not measured.
/// The steps are an event-channel upcall into dom0, a batched grant map and unmap hypercall,
/// tapdisk's wake-up and `io_submit`, the disk's interrupt, `io_getevents`, the response and a
/// notification: of order a few microseconds each on a 2 GHz Core 2 under a PV kernel]. The
/// tmem case's README section shows what ten times as much changes.
pub const DEFAULT_REQUEST_NS: u64 = 25_000;

/// dom0's vCPUs as the backend uses them, and what it has done.
#[derive(Clone, Debug)]
pub struct Blkback {
    /// When each of dom0's vCPUs is free of backend work.
    vcpus: Vec<u64>,
    /// CPU per ring request (issue and completion together).
    request_ns: u64,
    /// Ring requests issued.
    pub requests: u64,
}

impl Blkback {
    /// A backend on `vcpus` dom0 vCPUs costing `request_ns` a ring request.
    pub fn new(vcpus: u32, request_ns: u64) -> Self {
        assert!(vcpus > 0, "dom0 has a vCPU");
        Self { vcpus: vec![0; vcpus as usize], request_ns, requests: 0 }
    }

    /// Ring requests a guest request of `pages` pages becomes.
    pub fn ring_requests(pages: u64) -> u64 {
        pages.div_ceil(BLKIF_MAX_SEGMENTS_PER_REQUEST).max(1)
    }

    /// dom0 handles one half (issue, or with `completion` the rest) of `requests` ring requests
    /// that reach it at `at`, on its vCPU free first: returns when it starts and how long it takes.
    pub fn half(&mut self, at: u64, requests: u64, completion: bool) -> (u64, u64) {
        let v = (0..self.vcpus.len()).min_by_key(|&i| self.vcpus[i]).expect("a vCPU");
        let start = at.max(self.vcpus[v]);
        let all = requests * self.request_ns;
        let ns = if completion { all - all / 2 } else { all / 2 };
        self.vcpus[v] = start + ns;
        (start, ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_split_into_ring_requests_of_eleven_pages() {
        assert_eq!(Blkback::ring_requests(1), 1);
        assert_eq!(Blkback::ring_requests(11), 1);
        assert_eq!(Blkback::ring_requests(12), 2);
        assert_eq!(Blkback::ring_requests(256), 24);
    }

    #[test]
    fn work_goes_to_the_vcpu_free_first_and_queues_when_both_are_busy() {
        let mut b = Blkback::new(2, 20_001);
        assert_eq!(b.half(100, 1, false), (100, 10_000));
        assert_eq!(b.half(100, 2, false), (100, 20_001), "the second vCPU");
        assert_eq!(b.half(105, 1, true), (10_100, 10_001), "behind the first vCPU's work; the halves add up");
        assert_eq!(b.half(50_000, 1, false), (50_000, 10_000), "both free again");
    }
}
