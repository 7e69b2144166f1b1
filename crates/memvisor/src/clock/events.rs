//! The discrete-event queue. Time is in simulated nanoseconds; ties break by insertion order, so a
//! scenario and seed always replay the same way.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Something that happens at a simulated instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Something for one guest's actors.
    Guest {
        /// Guest (VM) index.
        guest: u32,
        /// What.
        ev: GuestEvent,
    },
    /// The host's reclaim daemon (host swap and compression) takes its next step.
    HostReclaim,
    /// A host swap I/O request completed.
    HostIoDone {
        /// VM index.
        vm: u32,
        /// Request number.
        io: u32,
    },
    /// A guest's disk request completed at the disk: dom0's block backend handles the completion,
    /// then the guest learns of it.
    BlkbackDone {
        /// Guest (VM) index.
        guest: u32,
        /// The guest's request number, or `NONE` for a write nothing waits for.
        bio: u32,
        /// Ring requests it took (`blkback.rs`).
        requests: u32,
    },
    /// The host's active-memory sampler ends a period and starts the next.
    HostSample,
    /// The host's page-sharing scanner wakes.
    HostShareScan,
    /// The memory policy runs.
    PolicyTick,
    /// Counters are sampled.
    Sample,
    /// Counters are captured at a boundary of the report window.
    Window,
}

/// An event for a guest's actors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestEvent {
    /// A vCPU runs its current process (or picks one).
    Vcpu {
        /// vCPU index.
        vcpu: u32,
    },
    /// A block request completed.
    IoDone {
        /// Request number in the guest's table.
        bio: u32,
    },
    /// kswapd runs.
    Kswapd,
    /// The writeback flusher runs (periodic or kicked).
    Flusher,
    /// A sleeping or not-yet-started process becomes runnable.
    Wake {
        /// Process index.
        pid: u32,
    },
    /// The balloon driver's work runs.
    Balloon,
    /// Windows: the working-set manager's once-a-second run.
    WorkingSetManager,
    /// The guest zeroes every page it has not used (Windows at boot).
    ZeroMemory,
}

#[derive(Debug)]
struct Entry<E> {
    time: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: invert so the earliest (then first inserted) comes out first.
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// The queue of future events (the VMM host's [`Event`]s unless another world's are named).
#[derive(Debug)]
pub struct EventQueue<E = Event> {
    /// The earliest event, when it was pushed earlier than everything in `heap`: the common step
    /// (a request's completion scheduled, then taken next) then never touches the heap.
    front: Option<Entry<E>>,
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self { front: None, heap: BinaryHeap::new(), seq: 0 }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules an event.
    pub fn push(&mut self, time: u64, event: E) {
        self.seq += 1;
        let e = Entry { time, seq: self.seq, event };
        // A later sequence number loses ties, so only a strictly earlier time goes in front.
        let first = match &self.front {
            Some(f) => time < f.time,
            None => self.heap.peek().is_none_or(|h| time < h.time),
        };
        if !first {
            self.heap.push(e);
        } else if let Some(f) = self.front.replace(e) {
            self.heap.push(f);
        }
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.front.take().or_else(|| self.heap.pop()).map(|e| (e.time, e.event))
    }

    /// Removes and returns the earliest event if `pred` accepts it.
    pub fn pop_if(&mut self, pred: impl FnOnce(&E) -> bool) -> Option<(u64, E)> {
        if pred(&self.peek()?.event) { self.pop() } else { None }
    }

    fn peek(&self) -> Option<&Entry<E>> {
        self.front.as_ref().or_else(|| self.heap.peek())
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        self.peek().map(|e| e.time)
    }

    /// Every pending event, in no particular order (for invariant checks).
    pub fn iter(&self) -> impl Iterator<Item = &E> {
        self.front.iter().chain(self.heap.iter()).map(|e| &e.event)
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.heap.len() + self.front.is_some() as usize
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.front.is_none() && self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::new();
        q.push(5, Event::Sample);
        q.push(3, Event::PolicyTick);
        q.push(5, Event::Guest { guest: 0, ev: GuestEvent::Kswapd });
        assert_eq!(q.pop(), Some((3, Event::PolicyTick)));
        assert_eq!(q.pop(), Some((5, Event::Sample)));
        assert_eq!(q.pop(), Some((5, Event::Guest { guest: 0, ev: GuestEvent::Kswapd })));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn any_order_of_pushes_and_pops_comes_out_sorted_by_time_then_insertion() {
        // Against a plain sorted list, over random interleavings with many equal times (the front
        // slot must lose ties to earlier insertions and give way to earlier times).
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut q = EventQueue::new();
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut now = 0;
        for n in 0..20_000u64 {
            let r = crate::workloads::xorshift64star(&mut state);
            if r.is_multiple_of(2) {
                let got = q.pop();
                let want = (!model.is_empty()).then(|| model.remove(0));
                assert_eq!(got, want, "pop {n}");
                if let Some((t, _)) = got {
                    now = t;
                }
            } else {
                let t = now + (r >> 8) % 4;
                q.push(t, n);
                let at = model.partition_point(|&(mt, _)| mt <= t);
                model.insert(at, (t, n));
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.peek_time(), model.first().map(|&(t, _)| t));
        }
    }
}
