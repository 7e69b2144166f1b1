//! Replay of a recorded page-reference trace: the process maps one page per distinct page of the
//! trace and references them in the recorded order, optionally several times over and with a CPU
//! cost between references.

use std::sync::Arc;

use super::{Op, Pattern, SystemView, Workload};
use crate::trace::Trace;

/// The trace workload as a scenario configures it.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceReplay {
    /// Path of the trace file, as written in the scenario.
    pub file: String,
    /// Times to replay the trace.
    pub loops: u64,
    /// CPU time between two references.
    pub compute_ns: u64,
}

/// A process replaying a loaded trace.
#[derive(Clone, Debug)]
pub struct Replayer {
    spec: TraceReplay,
    trace: Arc<Trace>,
    step: u8,
}

impl Replayer {
    /// A replayer of `trace`.
    pub fn new(spec: TraceReplay, trace: Arc<Trace>) -> Self {
        Self { spec, trace, step: 0 }
    }
}

impl Workload for Replayer {
    fn next_op(&mut self, _sys: &SystemView) -> Op {
        self.step += 1;
        match self.step {
            1 => Op::Map { pages: self.trace.n_pages() },
            2 if !self.trace.refs().is_empty() => Op::Access {
                region: 0,
                pattern: Pattern::Trace { trace: self.trace.clone(), pos: 0, loops: self.spec.loops, compute_ns: self.spec.compute_ns },
            },
            _ => Op::Exit,
        }
    }
}
