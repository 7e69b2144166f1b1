//! A storage device as a queue: a request waits for one of `queue_depth` slots, spends the device's
//! access latency (plus a seek on a rotating disk when it does not continue where the previous request
//! ended, or on an NFS server's disk when its cache and readahead cannot answer: `filer.rs`), then
//! transfers its bytes over the device's one shared data path at the device bandwidth.
//!
//! Latency overlaps across slots; transfers do not. So a deep queue hides latency but never creates
//! bandwidth, and every guest whose virtual disk lives on the device shares both. A transfer takes
//! the first idle stretch of the data path after its request is ready, so a request held up behind
//! a file server's disk seek does not hold up the ones behind it.

use std::collections::VecDeque;

use super::filer::{Filer, FilerSpec};

/// The kinds of device a datastore can sit on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Solid-state disk.
    Ssd,
    /// Rotating disk: non-contiguous requests pay a seek.
    Hdd,
    /// Network file server: link bandwidth plus server latency.
    Nfs,
    /// RAM-backed device (ramdisk, host cache).
    Ram,
}

scenario_names!(DeviceKind {
    Ssd => "ssd",
    Hdd => "hdd",
    Nfs => "nfs",
    Ram => "ram",
});

impl DeviceKind {
    /// Default parameters; every figure names its source.
    pub fn defaults(self) -> DeviceSpec {
        match self {
            // SATA III SSD: 6 Gbit/s line with 8b/10b coding caps transfers at 600 MB/s, drives sustain
            // about 550 MB/s (Samsung 860 EVO: sequential read up to 550 MB/s [doc-recalled]; its
            // predecessor the 850 EVO's specification lists 540 MB/s); NCQ allows 32 outstanding
            // commands (SATA 3.x spec); a 4 KiB random read takes 100 us at queue depth 1 (the 850
            // EVO's specification: 10,000 IOPS, 4 KB random read, QD1).
            Self::Ssd => DeviceSpec { kind: self, latency_ns: 100_000, bandwidth: 550e6, queue_depth: 32, seek_ns: 0, filer: None },
            // Seek (positioning) 8 ms: seed 002, "typical disk (seek) 8,000,000 ns". 150 MB/s sustained
            // transfer of a current 7,200 rpm desktop drive (WD Blue WD10EZEX's "host to/from drive
            // (sustained)" [doc-recalled]; Seagate's 2010 Barracuda XT lists 138 MB/s at the outer
            // diameter); one head, so one request at a time. A case of an older machine sets its own
            // (tmem-kernel-build's IDE disk).
            Self::Hdd => DeviceSpec { kind: self, latency_ns: 0, bandwidth: 150e6, queue_depth: 1, seek_ns: 8_000_000, filer: None },
            // Seed 001: "a 2Gb NFS link (a pair of 1Gb NICs bonded together)". But an NFSv3 datastore
            // is one TCP session, and a bond carries one session on one member link ("the bandwidth
            // for a single datastore ... is limited to what a single connection can provide",
            // VMware's Best Practices for Running vSphere on NFS; "NFS 3 uses one TCP connection
            // for I/O", vSphere 6.7 storage guide): 1 Gbit/s, of which TCP over 1,500-byte Ethernet
            // frames carries 1,460 payload bytes per 1,538 on the wire, 118.7 MB/s. The server (a
            // NetApp filer in the seed) answers from its cache in about 0.5 ms round trip over
            // gigabit Ethernet [assumed: the seed gives no latency; a LAN round trip and a cached
            // read]; 128 outstanding RPCs is the Linux client's default sunrpc slot table (the seed's
            // client is ESX's, whose limit is not published: [assumed] the same).
            // Behind it (`filer.rs`): the seed's FAS3020 has 2 GB of memory per controller (NetApp's
            // FAS3000-series datasheet; recalled, not checked against a copy) and disks in DS14
            // shelves of 14; a read it must fetch from disk pays seed 002's 8 ms seek. The filer is
            // the seed's production one, shared with other hosts: the whole cache for this test is
            // the most it could have had.
            Self::Nfs => DeviceSpec {
                kind: self,
                latency_ns: 500_000,
                bandwidth: 118.7e6,
                queue_depth: 128,
                seek_ns: 8_000_000,
                filer: Some(FilerSpec { cache_bytes: 2 << 30, disks: 14 }),
            },
            // A RAM-backed device: memcpy-speed transfer (DDR3-1600 peak 12.8 GB/s, seed 002's memory)
            // plus a block-layer round trip of about 1 us.
            Self::Ram => DeviceSpec { kind: self, latency_ns: 1_000, bandwidth: 12.8e9, queue_depth: 128, seek_ns: 0, filer: None },
        }
    }
}

/// A device's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSpec {
    /// Which kind of device.
    pub kind: DeviceKind,
    /// Access latency of every request, overlapping across queue slots.
    pub latency_ns: u64,
    /// Transfer bandwidth of the shared data path, bytes per second.
    pub bandwidth: f64,
    /// Requests the device works on at once.
    pub queue_depth: u32,
    /// Extra positioning time of a request that does not continue the previous one (rotating disks).
    pub seek_ns: u64,
    /// The file server behind a network device: its cache and disks decide which reads seek
    /// (its `seek_ns` is this spec's).
    pub filer: Option<FilerSpec>,
}

/// Cumulative device counters.
#[derive(Clone, Debug, Default)]
pub struct DeviceStats {
    /// Read requests completed or in flight.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Sum over requests of the time spent waiting for a slot or the data path.
    pub queue_wait_ns: u64,
    /// Time the data path was transferring.
    pub busy_ns: u64,
    /// Time with at least one request at the device, queued, positioning or transferring: what
    /// iostat's `%util` measures (the kernel's `io_ticks`), which for a disk counts its seeks too.
    pub active_ns: u64,
    /// Reads the file server behind the device had to fetch from its disks.
    pub server_disk_reads: u64,
    /// Time those reads waited for the server's disks (queue and seek), summed.
    pub server_disk_wait_ns: u64,
}

/// One device with its queue state.
#[derive(Clone, Debug)]
pub struct Device {
    spec: DeviceSpec,
    /// Times at which each queue slot becomes free, sorted, earliest first (a short sorted deque:
    /// a completion nearly always goes at the back).
    slots: VecDeque<u64>,
    /// Transfers booked on the shared data path, (start, end), disjoint and sorted; those that
    /// ended before the latest submission are dropped. A few at most (one per request in flight),
    /// nearly always appended at the back: a deque searched in place beats a tree here.
    path: VecDeque<(u64, u64)>,
    /// Byte offset just past the previous request (for seeks).
    head: u64,
    filer: Option<Filer>,
    stats: DeviceStats,
    /// The last request's size and its transfer time (`transfer_ns`).
    last_transfer: (u64, u64),
    /// The latest completion so far: `active_ns` counts up to it.
    active_until: u64,
}

impl Device {
    /// A fresh, idle device.
    pub fn new(spec: DeviceSpec) -> Self {
        let slots = (0..spec.queue_depth.max(1)).map(|_| 0).collect();
        let filer = spec.filer.map(|f| Filer::new(f, spec.seek_ns));
        Self {
            spec,
            slots,
            path: VecDeque::new(),
            head: u64::MAX,
            filer,
            stats: DeviceStats::default(),
            last_transfer: (u64::MAX, 0),
            active_until: 0,
        }
    }

    /// The device's parameters.
    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// Counters so far.
    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// The first idle stretch of the data path of `len` ns at or after `ready`; books it.
    fn book_path(&mut self, now: u64, ready: u64, len: u64) -> u64 {
        while self.path.front().is_some_and(|&(_, e)| e <= now) {
            self.path.pop_front();
        }
        // The booking that starts at or before `ready` may still be running then.
        let mut i = if self.path.back().is_none_or(|&(s, _)| s <= ready) {
            self.path.len()
        } else {
            self.path.partition_point(|&(s, _)| s <= ready)
        };
        let mut t = if i > 0 { ready.max(self.path[i - 1].1) } else { ready };
        while let Some(&(s, e)) = self.path.get(i) {
            if s >= t + len {
                break;
            }
            t = t.max(e);
            i += 1;
        }
        if len > 0 && i == self.path.len() {
            // The usual case; `insert` at the back would still take its general path.
            self.path.push_back((t, t + len));
        } else if len > 0 {
            self.path.insert(i, (t, t + len));
        }
        t
    }

    /// The transfer time of `bytes`, rounded up to whole nanoseconds; the last size's is kept, as
    /// nearly every request is the size of the one before (a division saved per request).
    fn transfer_ns(&mut self, bytes: u64) -> u64 {
        if self.last_transfer.0 != bytes {
            // f64::ceil is a library call on baseline x86-64.
            let exact = bytes as f64 * 1e9 / self.spec.bandwidth;
            self.last_transfer = (bytes, exact as u64 + ((exact as u64 as f64) < exact) as u64);
        }
        self.last_transfer.1
    }

    /// Queues a request submitted at `now` and returns when it completes; the answer is known at
    /// submission and needs no event of its own.
    pub fn submit(&mut self, now: u64, offset: u64, bytes: u64, write: bool) -> u64 {
        self.submit_at(now, now, offset, bytes, write)
    }

    /// `submit` of a request handed over at `now` that reaches the device at `arrives` (after a
    /// backend's work): nothing submitted later reaches it before `now`.
    pub fn submit_at(&mut self, now: u64, arrives: u64, offset: u64, bytes: u64, write: bool) -> u64 {
        let slot_free = self.slots.pop_front().expect("queue_depth >= 1");
        let start = arrives.max(slot_free);
        let seek = match &mut self.filer {
            Some(f) if write => {
                f.write(offset, bytes);
                0
            }
            Some(f) => {
                let wait = f.read(start, offset, bytes);
                self.stats.server_disk_reads = f.disk_reads;
                self.stats.server_disk_wait_ns += wait;
                wait
            }
            None if self.spec.seek_ns > 0 && offset != self.head => self.spec.seek_ns,
            None => 0,
        };
        let ready = start + self.spec.latency_ns + seek;
        let transfer = self.transfer_ns(bytes);
        let xfer_start = self.book_path(now, ready, transfer);
        let done = xfer_start + transfer;
        self.head = offset + bytes;
        // A completion nearly always comes after every other: append it without a search.
        if self.slots.back().is_none_or(|&t| t <= done) {
            self.slots.push_back(done);
        } else {
            let at = self.slots.partition_point(|&t| t <= done);
            self.slots.insert(at, done);
        }
        self.stats.queue_wait_ns += (start - arrives) + (xfer_start - ready);
        self.stats.busy_ns += transfer;
        // Requests reach the device in submission order but for a backend's delay, so the part
        // of this one past the latest completion is its addition to the union (short by at most
        // that delay when a later submission arrives first).
        self.stats.active_ns += done.saturating_sub(arrives.max(self.active_until));
        self.active_until = self.active_until.max(done);
        if write {
            self.stats.writes += 1;
            self.stats.bytes_written += bytes;
        } else {
            self.stats.reads += 1;
            self.stats.bytes_read += bytes;
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_plus_transfer_when_idle() {
        let mut d = Device::new(DeviceKind::Ssd.defaults());
        let done = d.submit(1_000, 0, 4096, false);
        assert_eq!(done, 1_000 + 100_000 + (4096.0f64 * 1e9 / 550e6).ceil() as u64);
    }

    #[test]
    fn deep_queue_overlaps_latency_but_not_bandwidth() {
        let mut d = Device::new(DeviceKind::Nfs.defaults());
        let a = d.submit(0, 0, 1 << 20, true);
        let b = d.submit(0, 1 << 20, 1 << 20, true);
        let transfer = ((1u64 << 20) as f64 * 1e9 / DeviceKind::Nfs.defaults().bandwidth).ceil() as u64;
        assert_eq!(a, 500_000 + transfer);
        assert_eq!(b, a + transfer, "second transfer waits for the shared link");
    }

    #[test]
    fn an_nfs_server_answers_written_blocks_from_its_cache_and_seeks_for_others() {
        let mut d = Device::new(DeviceKind::Nfs.defaults());
        let w = d.submit(0, 1 << 30, 4096, true);
        let cached = d.submit(w, 1 << 30, 4096, false) - w;
        let t = w + cached;
        let missed = d.submit(t, 5 << 30, 4096, false) - t;
        assert_eq!(missed - cached, 8_000_000, "a read the filer never saw waits for a disk seek");
        assert_eq!(d.stats().server_disk_reads, 1);
    }

    #[test]
    fn a_read_waiting_for_the_filers_disk_does_not_hold_up_the_link() {
        let mut d = Device::new(DeviceKind::Nfs.defaults());
        let miss = d.submit(0, 7 << 30, 4096, false);
        let write = d.submit(0, 1 << 30, 65536, true);
        let alone = Device::new(DeviceKind::Nfs.defaults()).submit(0, 1 << 30, 65536, true);
        assert_eq!(write, alone, "the write uses the link while the read waits for a seek");
        assert!(miss > 8_000_000);
        assert_eq!(d.stats().server_disk_wait_ns, 8_000_000);
    }

    #[test]
    fn active_time_is_the_union_of_requests_at_the_device_seeks_included() {
        let mut d = Device::new(DeviceKind::Hdd.defaults());
        let a = d.submit(0, 0, 4096, false);
        let b = d.submit(0, 1 << 30, 4096, false);
        assert!(b > a);
        assert_eq!(d.stats().active_ns, b, "the second queued behind the first: one stretch");
        assert!(d.stats().active_ns > d.stats().busy_ns + 2 * 8_000_000 - 1, "both seeks count");
        let later = b + 1_000_000_000;
        let c = d.submit(later, 1 << 31, 4096, false);
        assert_eq!(d.stats().active_ns, b + (c - later), "an idle second between is not counted");
        let mut ssd = Device::new(DeviceKind::Ssd.defaults());
        let x = ssd.submit(0, 0, 4096, false);
        let y = ssd.submit(0, 1 << 20, 4096, false);
        assert!(y > x && y < 2 * x, "two in flight at once");
        assert_eq!(ssd.stats().active_ns, y, "overlapping requests count once");
    }

    #[test]
    fn hdd_seeks_only_when_not_contiguous() {
        let mut d = Device::new(DeviceKind::Hdd.defaults());
        let a = d.submit(0, 0, 4096, false);
        let b = d.submit(a, 4096, 4096, false);
        let c = d.submit(b, 1 << 30, 4096, false);
        assert!(a >= 8_000_000);
        assert!(b - a < 1_000_000, "sequential request pays no seek");
        assert!(c - b >= 8_000_000, "random request pays a seek");
    }
}
