//! The controller for a backend written in Python (the live KVM host): one observe -> decide ->
//! apply -> log loop, the engine's, whichever host it drives. Python calls `tick` every period;
//! the controller calls back the backend's `observe()` and `apply(decision)`.

use memvisor::backend::Backend;
use memvisor::policy::{Action, Decision, HostView, SharingView, VmId, VmView};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

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

fn field<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, what: &str, key: &str) -> PyResult<T> {
    let v = d.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("backend observe(): {what} lacks '{key}'")))?;
    v.extract().map_err(|e| PyValueError::new_err(format!("backend observe(): {what} '{key}': {}", Into::<PyErr>::into(e))))
}

fn vm_view(d: &Bound<'_, PyDict>) -> PyResult<VmView> {
    let name: String = field(d, "a VM", "name")?;
    let w = format!("VM '{name}'");
    let f = |k: &str| field::<u64>(d, &w, k);
    Ok(VmView {
        id: VmId(field(d, &w, "id")?),
        memory: f("memory")?,
        reservation: f("reservation")?,
        limit: f("limit")?,
        shares: f("shares")?,
        overhead: f("overhead")?,
        granted: f("granted")?,
        guest_total: f("guest_total")?,
        guest_free: f("guest_free")?,
        guest_available: f("guest_available")?,
        swap_in: f("swap_in")?,
        swap_out: f("swap_out")?,
        major_faults: f("major_faults")?,
        memory_stall_ns: field(d, &w, "memory_stall_ns")?,
        host_stall_ns: field(d, &w, "host_stall_ns")?,
        committed: f("committed")?,
        balloon_size: f("balloon_size")?,
        balloon_target: f("balloon_target")?,
        balloon_max: f("balloon_max")?,
        swapped: f("swapped")?,
        compressed: f("compressed")?,
        compression_cache: f("compression_cache")?,
        swap_target: f("swap_target")?,
        active_sample: field(d, &w, "active_sample")?,
        active_sample_now: field(d, &w, "active_sample_now")?,
        active_periods: f("active_periods")?,
        name,
    })
}

fn host_view(d: &Bound<'_, PyAny>) -> PyResult<HostView> {
    let d = d.cast::<PyDict>().map_err(|_| PyValueError::new_err("backend observe() must return a dict"))?;
    let f = |k: &str| field::<u64>(d, "the host", k);
    let sharing: Bound<'_, PyDict> = field(d, "the host", "sharing")?;
    let s = |k: &str| field::<u64>(&sharing, "sharing", k);
    let vms: Bound<'_, PyList> = field(d, "the host", "vms")?;
    Ok(HostView {
        time_ns: f("time_ns")?,
        host_memory: f("host_memory")?,
        host_free: f("host_free")?,
        host_available: f("host_available")?,
        hypervisor: f("hypervisor")?,
        sharing: SharingView {
            run: field(&sharing, "sharing", "run")?,
            pages_to_scan: s("pages_to_scan")?,
            sleep_ms: s("sleep_ms")?,
            pages_shared: s("pages_shared")?,
            pages_sharing: s("pages_sharing")?,
        },
        vms: vms
            .iter()
            .map(|v| vm_view(v.cast::<PyDict>().map_err(|_| PyValueError::new_err("backend observe(): each VM must be a dict"))?))
            .collect::<PyResult<_>>()?,
    })
}

/// A decision as the Python backend receives it: `kind` names the action, its value alongside.
fn decision_dict<'py>(py: Python<'py>, d: &Decision) -> PyResult<Bound<'py, PyDict>> {
    let e = PyDict::new(py);
    e.set_item("vm_id", d.vm.map(|v| v.0))?;
    e.set_item("reason", &d.reason)?;
    e.set_item("text", d.action.to_string())?;
    match &d.action {
        Action::SetGrantLimit { bytes } => (e.set_item("kind", "grant_limit")?, e.set_item("bytes", bytes)?),
        Action::SetBalloonTarget { bytes } => (e.set_item("kind", "balloon_target")?, e.set_item("bytes", bytes)?),
        Action::SetSwapTarget { bytes } => (e.set_item("kind", "swap_target")?, e.set_item("bytes", bytes)?),
        Action::SetBlocked { blocked } => (e.set_item("kind", "blocked")?, e.set_item("blocked", blocked)?),
        Action::SetMemoryState { state } => (e.set_item("kind", "memory_state")?, e.set_item("state", state)?),
        Action::SetSharing { run, pages_to_scan, sleep_ms } => {
            e.set_item("kind", "sharing")?;
            e.set_item("run", run)?;
            e.set_item("pages_to_scan", pages_to_scan)?;
            (e.set_item("sleep_ms", sleep_ms)?, ())
        }
    };
    Ok(e)
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
    #[pyo3(signature = (policy, esx_states = "esx3", idle_tax = 0.75))]
    fn new(policy: &str, esx_states: &str, idle_tax: f64) -> PyResult<Self> {
        let spec = memvisor::policy::PolicySpec::named(policy, esx_states, idle_tax).map_err(PyValueError::new_err)?;
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
