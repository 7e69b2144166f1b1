//! `memvisor._core`: the Rust engine as a Python extension module. Thin: it converts scenarios,
//! runs and results; all file and terminal I/O is in the Python package around it.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

create_exception!(_core, ScenarioError, PyValueError, "A scenario file or override is invalid.");
create_exception!(_core, RunError, PyRuntimeError, "A run could not start or could not continue.");

/// A resolved scenario (one variant).
#[pyclass(frozen, module = "memvisor._core")]
struct Scenario {
    inner: memvisor::Scenario,
}

#[pymethods]
impl Scenario {
    /// Scenario name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
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

    /// Columns of the report table.
    #[getter]
    fn report_columns(&self) -> Vec<String> {
        self.inner.report.columns.clone()
    }

    /// The scenario as resolved, every default filled in.
    fn to_toml(&self) -> String {
        self.inner.to_toml()
    }
}

/// Loads a scenario text; returns one Scenario per variant.
#[pyfunction]
#[pyo3(signature = (text, origin, sets = Vec::new()))]
fn load(text: &str, origin: &str, sets: Vec<String>) -> PyResult<Vec<Scenario>> {
    memvisor::scenario::load(text, origin, &sets)
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
}

#[pymethods]
impl Simulation {
    /// Powers on the scenario's VMs (admission control may refuse).
    #[new]
    fn new(scenario: &Scenario) -> PyResult<Self> {
        memvisor::Simulation::new(&scenario.inner).map(|inner| Self { inner }).map_err(RunError::new_err)
    }

    /// Runs until simulated second `t` or the end, without holding the GIL. Returns whether the
    /// run has ended.
    fn run_until(&mut self, py: Python<'_>, t: f64) -> PyResult<bool> {
        let until = if t.is_finite() { (t.max(0.0) * 1e9) as u64 } else { u64::MAX };
        let sim = &mut self.inner;
        py.detach(|| sim.run_until(until)).map_err(RunError::new_err)
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

    /// Results: {"scenario_toml", "summary_json", "timeseries": {column: list}, "decisions": [dict]}.
    fn results<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.results();
        let out = PyDict::new(py);
        out.set_item("scenario_toml", r.scenario_toml)?;
        out.set_item("summary_json", serde_json::to_string_pretty(&r.summary).expect("JSON"))?;
        let ts = PyDict::new(py);
        ts.set_item("time_s", PyList::new(py, &r.series.time_s)?)?;
        ts.set_item("vm", PyList::new(py, &r.series.vm)?)?;
        for (name, col) in memvisor::metrics::columns().iter().zip(&r.series.values) {
            ts.set_item(*name, PyList::new(py, col)?)?;
        }
        out.set_item("timeseries", ts)?;
        let decisions = PyList::empty(py);
        for d in r.decisions {
            let e = PyDict::new(py);
            e.set_item("time_s", d.time_ns as f64 / 1e9)?;
            e.set_item("policy", d.policy)?;
            e.set_item("vm", d.vm)?;
            e.set_item("action", d.action)?;
            e.set_item("reason", d.reason)?;
            decisions.append(e)?;
        }
        out.set_item("decisions", decisions)?;
        Ok(out)
    }
}

/// Numeric columns of the time series, in order.
#[pyfunction]
fn timeseries_columns() -> Vec<&'static str> {
    memvisor::metrics::columns()
}

/// The memvisor engine.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Scenario>()?;
    m.add_class::<Simulation>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(cases, m)?)?;
    m.add_function(wrap_pyfunction!(case_text, m)?)?;
    m.add_function(wrap_pyfunction!(timeseries_columns, m)?)?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    Ok(())
}
