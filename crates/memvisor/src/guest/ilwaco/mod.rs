//! Ilwaco, Denali's guest OS (OSDI 2002 section 3.3): a library OS with the Alpine user-level TCP
//! stack (FreeBSD 3.3's), threads, a subset of libc, and no virtual memory of its own; every page
//! it touches is a guest-physical page the isolation kernel pages (`host::Pager`).
//!
//! The guest runs the `web-server` workload: requests queue at the VM (at most SOMAXCONN), its
//! one vCPU serves them in order, touching the server's code path, a thread stack, the document
//! and the packet buffers its answer takes from the mbuf pool; a page that is not resident stops
//! the VM until the pager has read it in. Simulator state for a VM that has never served a
//! request is none at all: its pool is as boot left it, which needs no record.

pub mod mbuf;

use std::collections::VecDeque;

use crate::bitmap::Bitmap;
use crate::host::Pager;
use crate::units::PAGE_SIZE;
use crate::workloads::WebServer;
use mbuf::{MCLBYTES, MSIZE, Pool};

/// Pending connections a socket accepts (FreeBSD `SOMAXCONN`, 128); a request past it is dropped.
pub const SOMAXCONN: usize = 128;
/// Pages of the thread stack a request runs on: 8 KiB [assumed; Ilwaco's thread stack size is
/// not published].
pub const STACK_PAGES: u32 = 2;
/// Requests per footprint window: the VM's footprint is the distinct pages it touches while
/// serving this many requests [chosen: a window spans many round trips at every load studied].
pub const FOOTPRINT_WINDOW: u32 = 100;

/// Where an Ilwaco guest's pages are: code path, stack, document, mbufs, clusters, in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Code and data pages a request runs through.
    pub path: u32,
    /// First page of the document.
    pub doc: u32,
    /// Pages of the document.
    pub doc_pages: u32,
    /// First page of the mbuf region.
    pub mbufs: u32,
    /// First page of the cluster region.
    pub clusters: u32,
    /// Pages the layout spans.
    pub end: u32,
}

impl Layout {
    /// The layout of a server configured as `w`.
    pub fn of(w: &WebServer) -> Self {
        let doc = w.path_pages + STACK_PAGES;
        let doc_pages = w.document.div_ceil(PAGE_SIZE).max(1) as u32;
        let mbufs = doc + doc_pages;
        let clusters = mbufs + (w.mbufs as u64 * MSIZE as u64).div_ceil(PAGE_SIZE) as u32;
        let end = clusters + (w.clusters as u64 * MCLBYTES as u64).div_ceil(PAGE_SIZE) as u32;
        Self { path: w.path_pages, doc, doc_pages, mbufs, clusters, end }
    }
}

/// One request at the VM.
#[derive(Clone, Debug)]
struct Request {
    arrived: u64,
    /// Closed-loop client that sent it, if any.
    client: Option<u32>,
    /// The connection's TCP/IP header template: an mbuf `tcp_template` takes when the SYN
    /// arrives, copied into every segment sent and freed by `tcp_close` (4.4BSD and FreeBSD
    /// 2.x-3.x `netinet/tcp_subr.c`; Alpine's stack is FreeBSD 3.3's, whose own tree was not read).
    template: u32,
    /// The mbuf its packet arrived in.
    rx: u32,
    /// Buffers of its answer taken so far: mbufs, and clusters with bit 31 set.
    answer: Vec<u32>,
    /// Next step (`Vm::step`).
    step: u32,
}

const CLUSTER: u32 = 1 << 31;

/// Counters of a VM's web server.
#[derive(Clone, Debug, Default)]
pub struct WebStats {
    /// Requests answered.
    pub served: u64,
    /// Requests dropped: listen queue full, or no mbuf for the connection's template or packet.
    pub dropped: u64,
    /// Sum of answered requests' latencies, ns.
    pub latency_ns: u64,
    /// Sum of completed footprint windows' distinct pages.
    pub footprint_pages: u64,
    /// Footprint windows completed.
    pub footprint_windows: u64,
    /// The last completed window's distinct pages.
    pub last_footprint: u32,
    /// Time the vCPU waited for the pager, ns.
    pub paging_wait_ns: u64,
}

/// What a served VM holds in the simulator: its pools, its requests, its footprint window.
#[derive(Clone, Debug)]
struct Serving {
    mbufs: Pool,
    clusters: Pool,
    queue: VecDeque<Request>,
    /// Answers waiting for their acknowledgement, by slot (`Wake::Ack`); the last buffer of each is
    /// its connection's header template.
    unacked: Vec<Vec<u32>>,
    /// Templates of acknowledged connections not yet closed (LAST_ACK or TIME_WAIT).
    closing: u32,
    free_slots: Vec<u32>,
    touched: Bitmap,
    window: u32,
    /// The vCPU is busy (running, waiting for a page or the CPU) until it next wakes.
    busy: bool,
    /// The head request waits for buffers an acknowledgement or a closing connection will free.
    starved: bool,
}

impl Serving {
    /// Buffers came back: a vCPU that waited for them runs again. Returns whether it must be
    /// started.
    fn wake_if_starved(&mut self) -> bool {
        let start = self.starved && !self.busy;
        if start {
            self.starved = false;
            self.busy = true;
        }
        start
    }
}

/// Returns a buffer of an answer (a cluster if bit 31 is set) to its pool.
fn release(mbufs: &mut Pool, clusters: &mut Pool, o: u32) {
    if o & CLUSTER != 0 { clusters.free(o & !CLUSTER) } else { mbufs.free(o) }
}

/// The guest page a buffer of an answer lies in.
fn buffer_page(mbufs: &Pool, clusters: &Pool, o: u32) -> u32 {
    if o & CLUSTER != 0 { clusters.page_of(o & !CLUSTER) } else { mbufs.page_of(o) }
}

/// What the VM asks its host to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Run the VM again at this time (a page is in, or its CPU burst ends).
    Run(u64),
    /// The head request was answered at this time; its buffers are acknowledged at `ack_at`.
    Answered {
        /// Acknowledgement time.
        ack_at: u64,
        /// Slot of the unacknowledged answer.
        slot: u32,
        /// The closed-loop client answered, if any.
        client: Option<u32>,
    },
    /// Nothing to do until a request, an acknowledgement or a connection's close arrives.
    Idle,
}

/// An Ilwaco VM.
#[derive(Clone, Debug, Default)]
pub struct Vm {
    serving: Option<Box<Serving>>,
    /// Counters.
    pub stats: WebStats,
}

impl Vm {
    /// Whether the VM has ever had a request (and so holds simulator state).
    pub fn is_serving(&self) -> bool {
        self.serving.is_some()
    }

    /// Simulator bytes the VM holds.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .serving
                .as_ref()
                .map_or(0, |s| std::mem::size_of::<Serving>() + s.mbufs.bytes() + s.clusters.bytes() + s.touched.len() / 8)
    }

    fn serving(&mut self, w: &WebServer, l: &Layout) -> &mut Serving {
        self.serving.get_or_insert_with(|| {
            Box::new(Serving {
                mbufs: Pool::new(w.pool, l.mbufs, MSIZE, w.mbufs),
                clusters: Pool::new(w.pool, l.clusters, MCLBYTES, w.clusters),
                queue: VecDeque::new(),
                unacked: Vec::new(),
                closing: 0,
                free_slots: Vec::new(),
                touched: Bitmap::new(l.end as usize),
                window: 0,
                busy: false,
                starved: false,
            })
        })
    }

    /// A request arrives at `now`: `None` if it is dropped, else whether the vCPU must be
    /// started (it was idle).
    pub fn arrive(&mut self, now: u64, client: Option<u32>, w: &WebServer, l: &Layout) -> Option<bool> {
        let s = self.serving(w, l);
        // A SYN past a full listen queue, or one whose template or packet finds no mbuf
        // (M_DONTWAIT; tcp_input drops it with ENOBUFS), is dropped (a closed-loop client tries again).
        let got = if s.queue.len() < SOMAXCONN {
            s.mbufs.alloc().and_then(|template| match s.mbufs.alloc() {
                Some(rx) => Some((template, rx)),
                None => {
                    s.mbufs.free(template);
                    None
                }
            })
        } else {
            None
        };
        let Some((template, rx)) = got else {
            self.stats.dropped += 1;
            return None;
        };
        s.queue.push_back(Request { arrived: now, client, template, rx, answer: Vec::new(), step: 0 });
        let start = !s.busy && !s.starved;
        s.busy |= start;
        Some(start)
    }

    /// Whether the vCPU has a request to go on with.
    pub fn has_work(&self) -> bool {
        self.serving.as_ref().is_some_and(|s| s.busy)
    }

    /// The client acknowledged the answer in `slot`: its buffers go back to the pool, and the
    /// connection's template stays until `close`. Returns the template and whether the vCPU must
    /// be started (it waited for buffers).
    pub fn ack(&mut self, slot: u32) -> (u32, bool) {
        let s = self.serving.as_mut().expect("an acknowledged VM has served");
        let mut buffers = std::mem::take(&mut s.unacked[slot as usize]);
        let template = buffers.pop().expect("an answer holds its template");
        for o in buffers {
            release(&mut s.mbufs, &mut s.clusters, o);
        }
        s.free_slots.push(slot);
        s.closing += 1;
        (template, s.wake_if_starved())
    }

    /// The connection whose header template is `template` has ended (`tcp_close`). Returns
    /// whether the vCPU must be started (it waited for buffers).
    pub fn close(&mut self, template: u32) -> bool {
        let s = self.serving.as_mut().expect("a closing VM has served");
        s.mbufs.free(template);
        s.closing -= 1;
        s.wake_if_starved()
    }

    /// The vCPU runs at `now`: it steps through the head request, touching its pages through the
    /// pager; `cpu_free` is when the host CPU is next free, `rtt_ns` the acknowledgement delay to
    /// use if it answers.
    pub fn run(&mut self, now: u64, id: u32, server: &(WebServer, Layout), pager: &mut Pager, cpu_free: &mut u64, rtt_ns: u64) -> Wake {
        let (w, l) = (&server.0, &server.1);
        let s = self.serving.as_mut().expect("a running VM has requests");
        let Some(r) = s.queue.front_mut() else {
            s.busy = false;
            return Wake::Idle;
        };
        let path_end = 1 + l.path + STACK_PAGES + l.doc_pages;
        let answer_n = w.mbufs_per_answer() + w.clusters_per_request();
        loop {
            let step = r.step;
            let touch = if step == 0 {
                Some((s.mbufs.page_of(r.rx), true))
            } else if step < path_end {
                // Code path, then stack (written), then the document, contiguous from page 0.
                let p = step - 1;
                Some((p, p >= l.path && p < l.doc))
            } else if step == path_end {
                if r.answer.len() < answer_n as usize {
                    // sosend copies the answer into the socket buffer as buffers come: what it has
                    // taken stays there while it sleeps (M_WAIT) for the rest, until an
                    // acknowledgement or a closing connection frees some.
                    let want = (w.mbufs_per_answer(), w.clusters_per_request());
                    let have_c = r.answer.iter().filter(|&&o| o & CLUSTER != 0).count() as u32;
                    let have_m = r.answer.len() as u32 - have_c;
                    for _ in have_m..want.0 {
                        let Some(o) = s.mbufs.alloc() else { break };
                        r.answer.push(o);
                    }
                    for _ in have_c..want.1 {
                        let Some(o) = s.clusters.alloc() else { break };
                        r.answer.push(o | CLUSTER);
                    }
                    if r.answer.len() < answer_n as usize {
                        s.busy = false;
                        s.starved = true;
                        return Wake::Idle;
                    }
                }
                None
            } else if step < path_end + 1 + answer_n {
                Some((buffer_page(&s.mbufs, &s.clusters, r.answer[(step - path_end - 1) as usize]), true))
            } else if step == path_end + 1 + answer_n {
                // tcp_output copies the template into each segment's header.
                Some((s.mbufs.page_of(r.template), false))
            } else if step == path_end + 2 + answer_n {
                // The CPU work of the request, queued on the host's one CPU.
                r.step += 1;
                let start = now.max(*cpu_free);
                *cpu_free = start + w.cpu_ns;
                return Wake::Run(*cpu_free);
            } else {
                break;
            };
            r.step += 1;
            if let Some((page, write)) = touch {
                s.touched.set(page as usize);
                let ready = pager.touch(now, id, page, write);
                if ready > now {
                    self.stats.paging_wait_ns += ready - now;
                    return Wake::Run(ready);
                }
            }
        }
        // Answered: the request's packet buffer is freed, the answer waits for its acknowledgement.
        let mut r = s.queue.pop_front().expect("head request");
        s.mbufs.free(r.rx);
        r.answer.push(r.template);
        let slot = match s.free_slots.pop() {
            Some(i) => {
                s.unacked[i as usize] = r.answer;
                i
            }
            None => {
                s.unacked.push(r.answer);
                s.unacked.len() as u32 - 1
            }
        };
        self.stats.served += 1;
        self.stats.latency_ns += now - r.arrived;
        s.window += 1;
        if s.window == FOOTPRINT_WINDOW {
            let n = s.touched.count_ones() as u32;
            self.stats.last_footprint = n;
            self.stats.footprint_pages += n as u64;
            self.stats.footprint_windows += 1;
            s.touched = Bitmap::new(l.end as usize);
            s.window = 0;
        }
        s.busy = !s.queue.is_empty();
        Wake::Answered { ack_at: now + rtt_ns, slot, client: r.client }
    }

    /// Checks the VM's pools.
    pub fn check(&self) -> Result<(), String> {
        let Some(s) = &self.serving else { return Ok(()) };
        s.mbufs.check()?;
        s.clusters.check()?;
        let held_m: u32 = s.queue.iter().map(|r| 2 + r.answer.iter().filter(|&&o| o & CLUSTER == 0).count() as u32).sum::<u32>()
            + s.unacked.iter().flatten().filter(|&&o| o & CLUSTER == 0).count() as u32
            + s.closing;
        let held_c: u32 =
            s.queue.iter().flat_map(|r| &r.answer).chain(s.unacked.iter().flatten()).filter(|&&o| o & CLUSTER != 0).count() as u32;
        if held_m != s.mbufs.in_use() || held_c != s.clusters.in_use() {
            return Err(format!(
                "web server: requests, unacknowledged answers and closing connections hold {held_m} mbufs and {held_c} clusters, the pools count {} and {} in use",
                s.mbufs.in_use(),
                s.clusters.in_use()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{Device, DeviceKind};

    /// Runs the VM from `now` until it answers or sleeps, waiting out its page-ins and CPU bursts.
    fn serve(vm: &mut Vm, mut now: u64, server: &(WebServer, Layout), pager: &mut Pager) -> (u64, Wake) {
        let mut cpu_free = 0;
        loop {
            match vm.run(now, 0, server, pager, &mut cpu_free, 1_000_000) {
                Wake::Run(t) => now = t,
                w => return (now, w),
            }
        }
    }

    #[test]
    fn a_starved_sender_woken_by_a_close_alone_keeps_what_it_took() {
        // Six mbufs and one cluster: a connection takes its template and packet at the SYN, its
        // one-byte answer two mbufs and the cluster.
        let w = WebServer::small(1, 6, 1);
        assert_eq!((w.mbufs_per_answer(), w.clusters_per_request()), (2, 1));
        let server = (w, Layout::of(&w));
        let mut pager = Pager::new(64, Device::new(DeviceKind::Hdd.defaults()));
        pager.add_vm(server.1.end);
        let mut vm = Vm::default();
        let in_use = |vm: &Vm| {
            let s = vm.serving.as_ref().unwrap();
            (s.mbufs.in_use(), s.clusters.in_use())
        };
        // A is answered and acknowledged: only its template stays, until its close.
        assert_eq!(vm.arrive(0, None, &server.0, &server.1), Some(true));
        let (now, Wake::Answered { slot: a, .. }) = serve(&mut vm, 0, &server, &mut pager) else { panic!("A is answered") };
        let (template_a, _) = vm.ack(a);
        // B is answered and not yet acknowledged: it holds two mbufs and the cluster.
        assert_eq!(vm.arrive(now, None, &server.0, &server.1), Some(true));
        let (now, Wake::Answered { slot: b, .. }) = serve(&mut vm, now, &server, &mut pager) else { panic!("B is answered") };
        // C takes the last two mbufs at its SYN and finds none for its answer: it sleeps.
        assert_eq!(vm.arrive(now, None, &server.0, &server.1), Some(true));
        assert_eq!(serve(&mut vm, now, &server, &mut pager).1, Wake::Idle);
        assert_eq!(in_use(&vm), (6, 1));
        vm.check().unwrap();
        // A's close frees one mbuf and wakes C, which takes it and sleeps again for the rest,
        // keeping it (sosend's partial copy stays in the socket buffer).
        assert!(vm.close(template_a), "a close alone wakes the starved sender");
        assert_eq!(serve(&mut vm, now, &server, &mut pager).1, Wake::Idle);
        assert_eq!(in_use(&vm), (6, 1), "C holds the mbuf the close freed");
        vm.check().unwrap();
        // B's acknowledgement frees the rest: C is answered, and its packet's mbuf is freed.
        assert!(vm.ack(b).1);
        assert!(matches!(serve(&mut vm, now, &server, &mut pager).1, Wake::Answered { .. }));
        assert_eq!(in_use(&vm), (4, 1), "B's template, C's template and C's answer");
        assert_eq!((vm.stats.served, vm.stats.dropped), (3, 0));
        vm.check().unwrap();
    }
}
