//! The controller for a backend written in Python (the live KVM host): one observe -> decide ->
//! apply -> log loop, the engine's, whichever host it drives. Python calls `tick` every period;
//! the controller calls back the backend's `observe()` and `apply(decision)`.

use memvisor::backend::Backend;
use memvisor::policy::{Decision, HostView};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::convert::{decision_dict, host_view};
use crate::record_dict;

/// A Python object with `observe() -> dict` and `apply(dict) -> str`, seen as a [`Backend`]. The
/// Python exception behind a failure is kept so that it reaches the caller whole.
struct PyBackend<'py> {
    obj: Bound<'py, PyAny>,
    err: Option<PyErr>,
}

impl PyBackend<'_> {
    fn keep(&mut self, e: PyErr) -> String {
        let msg = e.to_string();
        self.err = Some(e);
        msg
    }
}

impl Backend for PyBackend<'_> {
    fn observe(&mut self) -> Result<HostView, String> {
        let r = self.obj.call_method0("observe").and_then(|v| host_view(&v));
        r.map_err(|e| self.keep(e))
    }

    fn apply(&mut self, d: &Decision) -> Result<String, String> {
        let r = decision_dict(self.obj.py(), d).and_then(|e| self.obj.call_method1("apply", (e,))?.extract::<String>());
        r.map_err(|e| self.keep(e))
    }
}

/// The engine's controller running a named policy over a Python backend.
#[pyclass(module = "memvisor._core")]
pub struct Controller {
    inner: memvisor::controller::Controller,
}

#[pymethods]
impl Controller {
    /// A controller for `policy` (one of `policy_names()`); `esx_states` and `idle_tax` (0..1)
    /// are the `esx` policy's settings, as in a scenario's `[host]`.
    #[new]
    #[pyo3(signature = (policy, esx_states = None, idle_tax = None))]
    fn new(policy: &str, esx_states: Option<&str>, idle_tax: Option<f64>) -> PyResult<Self> {
        use memvisor::policy::PolicySpec;
        let esx_states = esx_states.unwrap_or(PolicySpec::DEFAULT_ESX_STATES);
        let idle_tax = idle_tax.unwrap_or(PolicySpec::DEFAULT_IDLE_TAX_PERCENT as f64 / 100.0);
        let spec = PolicySpec::named(policy, esx_states, idle_tax).map_err(PyValueError::new_err)?;
        let p = memvisor::policy::build(&spec).expect("a checked spec builds");
        Ok(Self { inner: memvisor::controller::Controller::new(p) })
    }

    /// The policy's period, s; `None`: it decides once.
    fn period_s(&self) -> Option<f64> {
        self.inner.period_ns().map(|p| p as f64 / 1e9)
    }

    /// The policy's name.
    fn policy(&self) -> &str {
        self.inner.policy_name()
    }

    /// One round over `backend`; returns the decision records it added.
    fn tick<'py>(&mut self, backend: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = backend.py();
        let mut b = PyBackend { obj: backend, err: None };
        let n = match self.inner.tick(&mut b) {
            Ok(n) => n,
            Err(msg) => return Err(b.err.take().unwrap_or_else(|| crate::RunError::new_err(msg))),
        };
        let out = PyList::empty(py);
        let log = self.inner.log();
        for d in &log[log.len() - n..] {
            out.append(record_dict(py, d)?)?;
        }
        Ok(out)
    }
}

/// Names of the policies a controller can run.
#[pyfunction]
pub fn policy_names() -> Vec<&'static str> {
    memvisor::policy::POLICY_NAMES.to_vec()
}
