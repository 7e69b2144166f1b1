//! A policy written in Python (`memvisor.Policy`) as an engine [`Policy`]: the simulation calls it
//! like a built-in one, with the same view, and logs its decisions the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use memvisor::policy::{Decision, HostView, Policy};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::convert::{decision, view_dict};

/// The real time a Python policy's `decide` took over a run: a slow policy is what makes a run
/// slow, and the run says so (never part of its results, which do not depend on the machine).
#[derive(Default)]
pub struct Spent {
    /// Calls of `decide`.
    pub calls: AtomicU64,
    /// Their real time, ns.
    pub ns: AtomicU64,
}

/// The Python object, its name and period as read once at the start.
pub struct PyPolicy {
    obj: Py<PyAny>,
    name: String,
    period_ns: Option<u64>,
    error: Option<String>,
    spent: Arc<Spent>,
}

impl PyPolicy {
    /// Wraps `obj`, which must have `name`, `period_s` (seconds, or None) and `decide(view)`; a
    /// policy that lacks one is refused as a scenario error naming what is wrong.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bad = |m: String| crate::ScenarioError::new_err(format!("host.policy: {m}"));
        let attr =
            |a: &str| obj.getattr(a).map_err(|_| bad(format!("a Python policy needs `{a}`: subclass memvisor.Policy, which gives it one")));
        let name: String = attr("name")?.extract().map_err(|_| bad("its `name` must be a string".into()))?;
        if name.trim().is_empty() {
            return Err(bad("its `name` must not be empty (decisions are logged under it)".into()));
        }
        // At least 1 ms, the shortest sample interval: a shorter one would spend the run calling
        // Python (and 1e-12 s rounded to 0 ns would never let time advance). At most what the
        // clock's 64-bit nanoseconds hold (longer would silently mean "once"). Not a boolean,
        // which Python would take for 1 s.
        let must = format!("policy '{name}': period_s must be seconds from 0.001 to 1.8e10, or None");
        let p = attr("period_s")?;
        if p.is_instance_of::<pyo3::types::PyBool>() {
            return Err(bad(format!("{must}, not a boolean")));
        }
        let shown = || p.repr().map(|r| r.to_string()).unwrap_or_default();
        let period: Option<f64> = p.extract().map_err(|_| bad(format!("{must}, got {}", shown())))?;
        if let Some(p) = period
            && !(p >= 1e-3 && p * 1e9 < u64::MAX as f64)
        {
            return Err(bad(format!("{must}, got {}", shown())));
        }
        if !attr("decide")?.is_callable() {
            return Err(bad(format!("policy '{name}': decide must be a method")));
        }
        Ok(Self {
            obj: obj.clone().unbind(),
            name,
            period_ns: period.map(|p| (p * 1e9).round() as u64),
            error: None,
            spent: Arc::default(),
        })
    }

    /// Where the time its `decide` takes is counted.
    pub fn spent(&self) -> Arc<Spent> {
        self.spent.clone()
    }

    fn call(&self, py: Python<'_>, view: &HostView) -> PyResult<Vec<Decision>> {
        let out = self.obj.bind(py).call_method1("decide", (view_dict(py, view)?,))?;
        let list = out.cast::<PyList>().map_err(|_| {
            // What came back, as far as a line shows it.
            let shown: String = out.repr().map(|r| r.to_string()).unwrap_or_default().chars().take(80).collect();
            let kind = out.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            pyo3::exceptions::PyTypeError::new_err(format!("decide must return a list of decisions, not a {kind}: {shown}"))
        })?;
        list.iter().enumerate().map(|(i, d)| decision(&d, &format!("decision {i} of {}", list.len()))).collect()
    }
}

impl Policy for PyPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn period_ns(&self) -> Option<u64> {
        self.period_ns
    }

    fn decide(&mut self, view: &HostView) -> Vec<Decision> {
        let at = view.time_ns as f64 / 1e9;
        let mut took = std::time::Duration::ZERO;
        let r = Python::attach(|py| {
            // Timed once the interpreter is ours: a wait for it is another run's policy's time.
            let t0 = Instant::now();
            let r = self.call(py, view);
            took = t0.elapsed();
            r.map_err(|e| {
                let (place, frames) = raised_at(py, &e);
                format!("policy '{}' failed at {at:.3} s of the run: {place}{e}{frames}", self.name)
            })
        });
        self.spent.calls.fetch_add(1, Ordering::Relaxed);
        self.spent.ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        r.unwrap_or_else(|e| {
            self.error = Some(e);
            Vec::new()
        })
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

/// `file:line: ` of the innermost frame an exception passed through (the policy's own code, when
/// it raised there), or nothing for an error raised in Rust; and, when it passed through more than
/// `decide` itself (a helper, a library), Python's traceback of those frames on the lines after.
fn raised_at(py: Python<'_>, e: &PyErr) -> (String, String) {
    let Some(tb) = e.traceback(py) else { return (String::new(), String::new()) };
    let mut last = tb.clone().into_any();
    let mut frames = 1;
    while let Ok(next) = last.getattr("tb_next")
        && !next.is_none()
    {
        last = next;
        frames += 1;
    }
    let at = || -> PyResult<String> {
        let file: String = last.getattr("tb_frame")?.getattr("f_code")?.getattr("co_filename")?.extract()?;
        let line: u32 = last.getattr("tb_lineno")?.extract()?;
        Ok(format!("{file}:{line}: "))
    };
    let trace = || -> PyResult<String> {
        let lines: Vec<String> = py.import("traceback")?.call_method1("format_tb", (&tb,))?.extract()?;
        Ok(format!("\nTraceback (most recent call last):\n{}", lines.concat().trim_end()))
    };
    (at().unwrap_or_default(), if frames > 1 { trace().unwrap_or_default() } else { String::new() })
}
