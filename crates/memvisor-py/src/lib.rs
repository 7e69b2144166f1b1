//! `memvisor._core`: the Rust engine as a Python extension module. Thin: it converts scenarios,
//! runs and results; all file and terminal I/O is in the Python package around it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

mod convert;
mod live;
mod pypolicy;

create_exception!(memvisor._core, ScenarioError, PyValueError, "A scenario file or override is invalid.");
create_exception!(memvisor._core, RunError, PyRuntimeError, "A run could not start or could not continue.");
create_exception!(memvisor._core, TraceError, PyValueError, "A trace file is corrupt, truncated or malformed.");

fn trace_err(e: memvisor::trace::TraceError) -> PyErr {
    TraceError::new_err(e.to_string())
}

/// A page-reference trace in memory.
#[pyclass(frozen, module = "memvisor._core")]
struct Trace {
    inner: Arc<memvisor::trace::Trace>,
}

fn wrap(t: memvisor::trace::Trace) -> Trace {
    Trace { inner: Arc::new(t) }
}

#[pymethods]
impl Trace {
    /// Decodes the native format.
    #[staticmethod]
    fn from_native(data: &[u8]) -> PyResult<Self> {
        memvisor::trace::read_native(data).map(wrap).map_err(trace_err)
    }

    /// Reads valgrind lackey output held in memory.
    #[staticmethod]
    #[pyo3(signature = (data, instructions = false))]
    fn from_lackey(data: &[u8], instructions: bool) -> PyResult<Self> {
        let mut r = memvisor::trace::LackeyReader::new(instructions);
        r.feed(data).map_err(trace_err)?;
        r.finish().map(wrap).map_err(trace_err)
    }

    /// Reads libCacheSim's oracleGeneral format (plain or zstd).
    #[staticmethod]
    fn from_oracle_general(data: &[u8]) -> PyResult<Self> {
        memvisor::trace::read_oracle_general(data).map(wrap).map_err(trace_err)
    }

    /// Reads a libCacheSim-style csv trace (plain or zstd).
    #[staticmethod]
    #[pyo3(signature = (data, obj_id_col = 2, delimiter = ",", has_header = None))]
    fn from_csv(data: &[u8], obj_id_col: usize, delimiter: &str, has_header: Option<bool>) -> PyResult<Self> {
        let d = delimiter.as_bytes();
        if d.len() != 1 {
            return Err(PyValueError::new_err("the csv delimiter must be one ASCII character"));
        }
        let opt = memvisor::trace::CsvOptions { obj_id_col, delimiter: d[0], has_header };
        memvisor::trace::read_csv(data, &opt).map(wrap).map_err(trace_err)
    }

    /// Encodes the native format.
    fn to_native<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &memvisor::trace::write_native(&self.inner))
    }

    /// Encodes libCacheSim's oracleGeneral format, zstd-compressed if `zstd`.
    #[pyo3(signature = (zstd = false))]
    fn to_oracle_general<'py>(&self, py: Python<'py>, zstd: bool) -> Bound<'py, pyo3::types::PyBytes> {
        let bytes =
            if zstd { memvisor::trace::write_oracle_general_zst(&self.inner) } else { memvisor::trace::write_oracle_general(&self.inner) };
        pyo3::types::PyBytes::new(py, &bytes)
    }

    /// References, reads, writes, distinct pages, footprint.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.inner.info();
        let d = PyDict::new(py);
        d.set_item("references", i.references)?;
        d.set_item("reads", i.reads)?;
        d.set_item("writes", i.writes)?;
        d.set_item("distinct_pages", i.distinct_pages)?;
        d.set_item("footprint_bytes", i.footprint_bytes)?;
        Ok(d)
    }

    /// Number of distinct pages.
    #[getter]
    fn n_pages(&self) -> u32 {
        self.inner.n_pages()
    }
}

/// Streams valgrind lackey output into a trace without keeping the text.
#[pyclass(module = "memvisor._core")]
struct LackeyRecorder {
    inner: Option<memvisor::trace::LackeyReader>,
}

#[pymethods]
impl LackeyRecorder {
    #[new]
    #[pyo3(signature = (instructions = false))]
    fn new(instructions: bool) -> Self {
        Self { inner: Some(memvisor::trace::LackeyReader::new(instructions)) }
    }

    /// Feeds the next chunk of output.
    fn feed(&mut self, py: Python<'_>, chunk: &[u8]) -> PyResult<()> {
        let r = self.inner.as_mut().ok_or_else(|| PyValueError::new_err("recorder already finished"))?;
        py.detach(|| r.feed(chunk)).map_err(trace_err)
    }

    /// References so far.
    #[getter]
    fn references(&self) -> usize {
        self.inner.as_ref().map_or(0, |r| r.references())
    }

    /// Ends the stream and returns the trace.
    fn finish(&mut self) -> PyResult<Trace> {
        let r = self.inner.take().ok_or_else(|| PyValueError::new_err("recorder already finished"))?;
        r.finish().map(wrap).map_err(trace_err)
    }
}

/// Parses a size with a unit ("96MiB") into bytes.
#[pyfunction]
fn parse_bytes(s: &str) -> PyResult<u64> {
    memvisor::units::parse_bytes(s).map_err(PyValueError::new_err)
}

/// Parses a duration with a unit ("30s", "250us") into nanoseconds.
#[pyfunction]
fn parse_duration_ns(s: &str) -> PyResult<u64> {
    memvisor::units::parse_duration_ns(s).map_err(PyValueError::new_err)
}

/// A size for people, as the engine prints them ("355.2 MiB", "8 KiB").
#[pyfunction]
fn human_bytes(b: u64) -> String {
    memvisor::units::human_bytes(b)
}

/// Guest pages that leave `frames` frames to a process (exact-lru: exactly; linux: plus the high
/// watermark's free memory).
#[pyfunction]
fn guest_pages_for(frames: u64, mode: &str) -> PyResult<u64> {
    let m = memvisor::guest::Replacement::parse(mode)
        .ok_or_else(|| PyValueError::new_err(format!("mode '{mode}' is not one of: exact-lru, linux")))?;
    Ok(memvisor::scenario::guest_pages_for(frames, m))
}

/// Scenario text replaying a trace file with `frames` frames available to the process.
#[pyfunction]
#[pyo3(signature = (file, distinct_pages, frames, mode = "exact-lru", loops = 1, compute_ns = 0))]
fn replay_scenario(file: &str, distinct_pages: u64, frames: u64, mode: &str, loops: u64, compute_ns: u64) -> PyResult<String> {
    let m = memvisor::guest::Replacement::parse(mode)
        .ok_or_else(|| PyValueError::new_err(format!("mode '{mode}' is not one of: exact-lru, linux")))?;
    Ok(memvisor::scenario::replay_scenario(file, distinct_pages, frames, m, loops, compute_ns))
}

/// A resolved scenario (one variant).
#[pyclass(frozen, module = "memvisor._core")]
struct Scenario {
    inner: memvisor::Scenario,
}

#[pymethods]
impl Scenario {
    /// The policy's name as the scenario gives it (`python:MODULE:CLASS` for a Python policy).
    #[getter]
    fn policy(&self) -> String {
        self.inner.host.policy.name.clone()
    }

    /// Scenario name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// `<Scenario 'name' variant 'v'>`: which run it is, as a list of them prints.
    fn __repr__(&self) -> String {
        match &self.inner.variant {
            Some(v) => format!("<Scenario '{}' variant '{v}'>", self.inner.name),
            None => format!("<Scenario '{}'>", self.inner.name),
        }
    }

    /// Variant name, or None.
    #[getter]
    fn variant(&self) -> Option<&str> {
        self.inner.variant.as_deref()
    }

    /// Fixed length in seconds, or None (runs until its finite workloads finish).
    #[getter]
    fn duration_s(&self) -> Option<f64> {
        self.inner.duration_ns.map(|d| d as f64 / 1e9)
    }

    /// Warnings about how the scenario was put together (a --set replacing a variant's value).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings.clone()
    }

    /// Where the scenario names its policy ("file:line:col", or the `--set` that did).
    #[getter]
    fn policy_at(&self) -> String {
        self.inner.policy_at.0.clone()
    }

    /// Those warnings that hold only under the scenario's own host.policy (a field it ignores).
    #[getter]
    fn policy_warnings(&self) -> Vec<String> {
        self.inner.policy_warnings.clone()
    }

    /// The VMs' names as the runs give them (a group of two is `web-1`, `web-2`).
    #[getter]
    fn vm_names(&self) -> Vec<String> {
        self.inner.vms.iter().map(|v| v.guest.name.clone()).collect()
    }

    /// Columns of the report table.
    #[getter]
    fn report_columns(&self) -> Vec<String> {
        self.inner.report.columns.clone()
    }

    /// The folder its relative files (traces, a Python policy's module) are found in: its
    /// `files_from`, else its file's folder; None for a case or a dict.
    #[getter]
    fn files_from(&self) -> Option<&str> {
        self.inner.files_from.as_deref()
    }

    /// Files the scenario's `trace` workloads replay, as written.
    #[getter]
    fn trace_files(&self) -> Vec<String> {
        self.workload_files(|w| match &w.spec {
            memvisor::workloads::WorkloadSpec::Trace(t) => Some(t.file.clone()),
            _ => None,
        })
    }

    /// The field that names trace `file` (the first, if several do), as `--set` takes it:
    /// `vm.NAME.workload.WORKLOAD.file`.
    fn trace_field(&self, file: &str) -> Option<String> {
        self.inner.vms.iter().find_map(|v| {
            v.guest.workloads.iter().find_map(|w| match &w.spec {
                memvisor::workloads::WorkloadSpec::Trace(t) if t.file == file => {
                    Some(format!("vm.{}.workload.{}.file", v.guest.name, w.name))
                }
                _ => None,
            })
        })
    }

    /// Files the scenario's workloads take captured page contents from (`captured`), as loaded
    /// (absolute paths).
    #[getter]
    fn captured_files(&self) -> Vec<String> {
        self.workload_files(|w| w.mix.captured.as_ref().map(|c| c.path.clone()))
    }

    /// The scenario as resolved, every default filled in.
    fn to_toml(&self) -> String {
        self.inner.to_toml()
    }
}

impl Scenario {
    /// The distinct files `file` finds in the scenario's workloads, sorted.
    fn workload_files(&self, file: impl Fn(&memvisor::workloads::WorkloadEntry) -> Option<String>) -> Vec<String> {
        let mut files: Vec<String> = self.inner.vms.iter().flat_map(|v| &v.guest.workloads).filter_map(file).collect();
        files.sort();
        files.dedup();
        files
    }
}

/// Loads a scenario text; returns one Scenario per variant (of those named in `variants`, if any).
#[pyfunction]
#[pyo3(signature = (text, origin, sets = Vec::new(), variants = Vec::new()))]
fn load(text: &str, origin: &str, sets: Vec<String>, variants: Vec<String>) -> PyResult<Vec<Scenario>> {
    memvisor::scenario::load_variants(text, origin, &sets, &variants)
        .map(|v| v.into_iter().map(|inner| Scenario { inner }).collect())
        .map_err(|e| ScenarioError::new_err(e.to_string()))
}

/// The shipped case studies: (name, description) pairs.
#[pyfunction]
fn cases() -> Vec<(&'static str, &'static str)> {
    memvisor::scenario::CASES.iter().map(|(n, d, _)| (*n, *d)).collect()
}

/// A case study's scenario text, or None.
#[pyfunction]
fn case_text(name: &str) -> Option<&'static str> {
    memvisor::scenario::case_text(name)
}

/// A run.
#[pyclass(module = "memvisor._core")]
struct Simulation {
    inner: memvisor::Simulation,
    /// A Python policy's time in `decide`.
    spent: Option<Arc<pypolicy::Spent>>,
}

#[pymethods]
impl Simulation {
    /// Powers on the scenario's VMs (admission control may refuse). `traces` maps the file names
    /// `trace` workloads use to loaded traces.
    #[new]
    #[pyo3(signature = (scenario, traces = HashMap::new(), policy = None))]
    fn new(scenario: &Scenario, traces: HashMap<String, PyRef<'_, Trace>>, policy: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let traces: HashMap<String, Arc<memvisor::trace::Trace>> = traces.into_iter().map(|(k, v)| (k, v.inner.clone())).collect();
        let source = move |f: &str| traces.get(f).cloned().ok_or_else(|| format!("trace '{f}' was not loaded"));
        let policy = policy.map(|p| pypolicy::PyPolicy::new(&p)).transpose()?;
        let spent = policy.as_ref().map(pypolicy::PyPolicy::spent);
        let policy = policy.map(|p| Box::new(p) as Box<dyn memvisor::policy::Policy>);
        memvisor::Simulation::with_policy(&scenario.inner, &source, policy).map(|inner| Self { inner, spent }).map_err(RunError::new_err)
    }

    /// A Python policy's calls of `decide` so far and the real seconds they took: (0, 0.0) for a
    /// built-in policy.
    #[getter]
    fn policy_time(&self) -> (u64, f64) {
        self.spent.as_ref().map_or((0, 0.0), |s| (s.calls.load(Ordering::Relaxed), s.ns.load(Ordering::Relaxed) as f64 / 1e9))
    }

    /// Runs until simulated second `t` or the end, without holding the GIL. Returns whether the
    /// run has ended.
    fn run_until(&mut self, py: Python<'_>, t: f64) -> PyResult<bool> {
        let until = if t.is_finite() { (t.max(0.0) * 1e9) as u64 } else { u64::MAX };
        let sim = &mut self.inner;
        py.detach(|| sim.run_until(until)).map_err(RunError::new_err)
    }

    /// Sets VM `vm`'s balloon target (bytes) now, by hand as an operator would with QMP
    /// `balloon`, outside the policy: for runs that compare a guest with its simulated twin.
    fn set_balloon_target(&mut self, vm: u32, bytes: u64) -> PyResult<()> {
        let d = memvisor::policy::Decision {
            vm: Some(memvisor::policy::VmId(vm)),
            action: memvisor::policy::Action::SetBalloonTarget { bytes },
            reason: "set by hand".into(),
        };
        self.inner.apply(&d).map_err(RunError::new_err)
    }

    /// Simulated seconds reached.
    #[getter]
    fn now_s(&self) -> f64 {
        self.inner.now() as f64 / 1e9
    }

    /// Whether the run has ended.
    #[getter]
    fn finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// Checks every invariant; raises RunError naming the first violation.
    fn check_invariants(&mut self) -> PyResult<()> {
        self.inner.check_invariants().map_err(RunError::new_err)
    }

    /// Results: {"scenario_toml", "summary_json", "timeseries", "decisions": [dict]}. The time
    /// series is {"time_s": bytes, "vm": [str], "state": [str], "columns": [str], "values":
    /// bytes}: `time_s` is little-endian f64s, `values` the numeric columns' little-endian f64s,
    /// one column after another, 8 bytes a value where lists of Python floats would take 32
    /// (`memvisor.api.series_frame` makes them a DataFrame without a copy).
    fn results<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.results();
        let out = PyDict::new(py);
        out.set_item("scenario_toml", r.scenario_toml)?;
        out.set_item("summary_json", r.summary.to_json())?;
        let ts = PyDict::new(py);
        ts.set_item("time_s", f64_bytes(py, std::slice::from_ref(&r.series.time_s))?)?;
        ts.set_item("vm", PyList::new(py, &r.series.vm)?)?;
        ts.set_item("state", PyList::new(py, &r.series.state)?)?;
        ts.set_item("columns", PyList::new(py, &r.series.columns)?)?;
        ts.set_item("values", f64_bytes(py, &r.series.values)?)?;
        out.set_item("timeseries", ts)?;
        let decisions = PyList::empty(py);
        for d in &r.decisions {
            decisions.append(record_dict(py, d)?)?;
        }
        out.set_item("decisions", decisions)?;
        Ok(out)
    }
}

/// Columns of floats as little-endian bytes (numpy's `<f8`), one column after another.
fn f64_bytes<'py>(py: Python<'py>, cols: &[Vec<f64>]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, cols.iter().map(Vec::len).sum::<usize>() * 8, |buf| {
        for (chunk, v) in buf.chunks_exact_mut(8).zip(cols.iter().flatten()) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
}

/// A logged decision as the run folder's decisions.jsonl has it.
fn record_dict<'py>(py: Python<'py>, d: &memvisor::controller::DecisionRecord) -> PyResult<Bound<'py, PyDict>> {
    let e = PyDict::new(py);
    e.set_item("time_s", d.time_ns as f64 / 1e9)?;
    e.set_item("policy", &d.policy)?;
    e.set_item("vm", &d.vm)?;
    e.set_item("vm_id", d.vm_id.map(|v| v.0))?;
    e.set_item("action", &d.action)?;
    e.set_item("reason", &d.reason)?;
    e.set_item("outcome", &d.outcome)?;
    Ok(e)
}

/// Numeric columns of the time series, in order.
#[pyfunction]
fn timeseries_columns() -> Vec<&'static str> {
    memvisor::metrics::columns()
}

/// The simulated KSM scanner (`memvisor.host.ksm`) over processes' mergeable pages, given as
/// content ids in address order (0 is a zero page), processes in the order KSM met them. `settings`
/// takes /sys/kernel/mm/ksm names (pages_to_scan, sleep_millisecs, max_page_sharing,
/// use_zero_pages, smart_scan; kernel defaults for those missing) and `full_scans`, how many
/// full scans ksmd completes. Returns KSM's counters by name, and `elapsed_ms`, the time ksmd
/// took at its sleep between batches.
#[pyfunction]
fn ksm_scan(processes: Vec<Vec<u64>>, settings: HashMap<String, u64>) -> PyResult<HashMap<&'static str, u64>> {
    let mut s = memvisor::host::ksm::KsmSettings::default();
    let mut full_scans = None;
    for (k, &v) in &settings {
        match k.as_str() {
            "full_scans" => full_scans = Some(v),
            _ => s.set(k, v).map_err(PyValueError::new_err)?,
        }
    }
    let full_scans = full_scans.ok_or_else(|| PyValueError::new_err("ksm_scan: settings must give full_scans"))?;
    let mut ksm = memvisor::host::ksm::Ksm::new(s);
    for &c in processes.iter().flatten() {
        ksm.add_page(c);
    }
    let mut batches = 0u64;
    while ksm.counters().full_scans < full_scans && !processes.iter().all(Vec::is_empty) {
        ksm.wake();
        batches += 1;
    }
    let mut out: HashMap<&'static str, u64> = ksm.counters().entries().into_iter().collect();
    out.insert("elapsed_ms", batches * s.sleep_millisecs as u64);
    Ok(out)
}

/// The 4 KiB a page content identity stands for (`memvisor::content::page_bytes`).
#[pyfunction]
fn page_bytes(id: u64) -> std::borrow::Cow<'static, [u8]> {
    memvisor::content::page_bytes(id).into()
}

/// A content identity (`memvisor::content`): `kind` is "common" (`a` = k), "unique" or
/// "duplicate" (`a` = process, `b` = index); the ranges are checked by the caller.
#[pyfunction]
fn content_id(kind: &str, a: u64, b: u64) -> PyResult<u64> {
    use memvisor::content;
    match kind {
        "common" => Ok(content::common(a)),
        "unique" => Ok(content::unique(a, b)),
        "duplicate" => Ok(content::duplicate(a, b)),
        _ => Err(PyValueError::new_err(format!("content kind '{kind}': one of common, unique, duplicate"))),
    }
}

/// SplitMix64's output function (`memvisor::content::splitmix64`), the generator of page bytes.
#[pyfunction]
fn splitmix64(x: u64) -> u64 {
    memvisor::content::splitmix64(x)
}

/// The memvisor engine.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Scenario>()?;
    m.add_class::<Simulation>()?;
    m.add_class::<Trace>()?;
    m.add_class::<live::Controller>()?;
    m.add_function(wrap_pyfunction!(live::policy_names, m)?)?;
    m.add_class::<LackeyRecorder>()?;
    m.add_function(wrap_pyfunction!(replay_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(guest_pages_for, m)?)?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration_ns, m)?)?;
    m.add_function(wrap_pyfunction!(human_bytes, m)?)?;
    m.add("TraceError", m.py().get_type::<TraceError>())?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(cases, m)?)?;
    m.add_function(wrap_pyfunction!(case_text, m)?)?;
    m.add_function(wrap_pyfunction!(timeseries_columns, m)?)?;
    m.add_function(wrap_pyfunction!(ksm_scan, m)?)?;
    m.add_function(wrap_pyfunction!(page_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(splitmix64, m)?)?;
    m.add_function(wrap_pyfunction!(content_id, m)?)?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    Ok(())
}
