//! The engine's policy interface as Python sees it: a host view is a dict of the `HostView` and
//! `VmView` fields (what `LiveHost.observe()` returns and what a Python policy's `decide` gets), a
//! decision a dict with `vm_id`, `kind`, its value and `reason` (what `LiveHost.apply` gets and
//! what a Python policy returns). Each way is converted here, with errors that name the field.

use memvisor::policy::{Action, Decision, HostView, SharingView, VmId, VmView, memory_state_names};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList};

fn field<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, what: &str, key: &str) -> PyResult<T> {
    let v = d.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("backend observe(): {what} lacks '{key}'")))?;
    v.extract().map_err(|e| PyValueError::new_err(format!("backend observe(): {what} '{key}': {}", Into::<PyErr>::into(e))))
}

fn vm_view(d: &Bound<'_, PyDict>) -> PyResult<VmView> {
    let name: String = field(d, "a VM", "name")?;
    let w = format!("VM '{name}'");
    let f = |k: &str| field::<u64>(d, &w, k);
    // What the policies subtract from `memory` must lie within it.
    let memory = f("memory")?;
    let within = |k: &str| -> PyResult<u64> {
        let x = f(k)?;
        if x > memory {
            return Err(PyValueError::new_err(format!("backend observe(): {w} '{k}' is {x} bytes, more than its memory ({memory} bytes)")));
        }
        Ok(x)
    };
    Ok(VmView {
        id: VmId(field(d, &w, "id")?),
        memory,
        reservation: within("reservation")?,
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
        guest_reserve: field(d, &w, "guest_reserve")?,
        frontswap: field(d, &w, "frontswap")?,
        frontswap_selfshrink: field(d, &w, "frontswap_selfshrink")?,
        balloon_size: within("balloon_size")?,
        balloon_target: within("balloon_target")?,
        balloon_max: f("balloon_max")?,
        swapped: f("swapped")?,
        compressed: f("compressed")?,
        compression_cache: f("compression_cache")?,
        swap_target: f("swap_target")?,
        active_sample: field(d, &w, "active_sample")?,
        active_sample_now: field(d, &w, "active_sample_now")?,
        active_periods: f("active_periods")?,
        large_pages: f("large_pages")?,
        name,
    })
}

pub fn host_view(d: &Bound<'_, PyAny>) -> PyResult<HostView> {
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

/// A value of a decision's field.
enum Value {
    Num(u64),
    Flag(bool),
    Name(&'static str),
}

/// Every decision kind as Python names it, with its value's fields: what `decision_dict` writes
/// and `decision` reads back.
const KINDS: &[(&str, &[&str])] = &[
    ("balloon_target", &["bytes"]),
    ("grant_limit", &["bytes"]),
    ("swap_target", &["bytes"]),
    ("blocked", &["blocked"]),
    ("break_large_pages", &["share_now"]),
    ("shrink_frontswap", &["bytes"]),
    ("sharing", &["run", "pages_to_scan", "sleep_ms"]),
    ("memory_state", &["state"]),
];

/// An action's kind and its fields' values, in `KINDS`' order.
fn kind_and_values(a: &Action) -> (&'static str, Vec<Value>) {
    use Value::{Flag, Name, Num};
    match *a {
        Action::SetBalloonTarget { bytes } => ("balloon_target", vec![Num(bytes)]),
        Action::SetGrantLimit { bytes } => ("grant_limit", vec![Num(bytes)]),
        Action::SetSwapTarget { bytes } => ("swap_target", vec![Num(bytes)]),
        Action::SetBlocked { blocked } => ("blocked", vec![Flag(blocked)]),
        Action::BreakLargePages { share_now } => ("break_large_pages", vec![Flag(share_now)]),
        Action::ShrinkFrontswap { bytes } => ("shrink_frontswap", vec![Num(bytes)]),
        Action::SetSharing { run, pages_to_scan, sleep_ms } => ("sharing", vec![Flag(run), Num(pages_to_scan), Num(sleep_ms)]),
        Action::SetMemoryState { state } => ("memory_state", vec![Name(state)]),
    }
}

/// The fields of a kind's value (`kind` one of `KINDS`).
fn fields_of(kind: &str) -> Option<&'static [&'static str]> {
    KINDS.iter().find(|(k, _)| *k == kind).map(|(_, f)| *f)
}

/// A decision as the Python backend receives it: `kind` names the action, its value alongside.
pub fn decision_dict<'py>(py: Python<'py>, d: &Decision) -> PyResult<Bound<'py, PyDict>> {
    let e = PyDict::new(py);
    e.set_item("vm_id", d.vm.map(|v| v.0))?;
    e.set_item("reason", &d.reason)?;
    e.set_item("text", d.action.to_string())?;
    let (kind, values) = kind_and_values(&d.action);
    e.set_item("kind", kind)?;
    for (k, v) in fields_of(kind).expect("every action's kind is listed").iter().zip(values) {
        match v {
            Value::Num(x) => e.set_item(k, x)?,
            Value::Flag(x) => e.set_item(k, x)?,
            Value::Name(x) => e.set_item(k, x)?,
        }
    }
    Ok(e)
}

/// A host view as a dict (the inverse of [`host_view`]).
pub fn view_dict<'py>(py: Python<'py>, v: &HostView) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("time_ns", v.time_ns)?;
    d.set_item("host_memory", v.host_memory)?;
    d.set_item("host_free", v.host_free)?;
    d.set_item("host_available", v.host_available)?;
    d.set_item("hypervisor", v.hypervisor)?;
    let s = PyDict::new(py);
    s.set_item("run", v.sharing.run)?;
    s.set_item("pages_to_scan", v.sharing.pages_to_scan)?;
    s.set_item("sleep_ms", v.sharing.sleep_ms)?;
    s.set_item("pages_shared", v.sharing.pages_shared)?;
    s.set_item("pages_sharing", v.sharing.pages_sharing)?;
    d.set_item("sharing", s)?;
    let vms = PyList::empty(py);
    for m in &v.vms {
        let e = PyDict::new(py);
        e.set_item("id", m.id.0)?;
        e.set_item("name", &m.name)?;
        for (k, x) in [
            ("memory", m.memory),
            ("reservation", m.reservation),
            ("limit", m.limit),
            ("shares", m.shares),
            ("overhead", m.overhead),
            ("granted", m.granted),
            ("guest_total", m.guest_total),
            ("guest_free", m.guest_free),
            ("guest_available", m.guest_available),
            ("swap_in", m.swap_in),
            ("swap_out", m.swap_out),
            ("major_faults", m.major_faults),
            ("committed", m.committed),
            ("balloon_size", m.balloon_size),
            ("balloon_target", m.balloon_target),
            ("balloon_max", m.balloon_max),
            ("swapped", m.swapped),
            ("compressed", m.compressed),
            ("compression_cache", m.compression_cache),
            ("swap_target", m.swap_target),
            ("active_periods", m.active_periods),
            ("large_pages", m.large_pages),
        ] {
            e.set_item(k, x)?;
        }
        e.set_item("memory_stall_ns", m.memory_stall_ns)?;
        e.set_item("host_stall_ns", m.host_stall_ns)?;
        e.set_item("guest_reserve", m.guest_reserve)?;
        e.set_item("frontswap", m.frontswap)?;
        e.set_item("frontswap_selfshrink", m.frontswap_selfshrink)?;
        e.set_item("active_sample", m.active_sample)?;
        e.set_item("active_sample_now", m.active_sample_now)?;
        vms.append(e)?;
    }
    d.set_item("vms", vms)?;
    Ok(d)
}

/// A decision from its dict (the inverse of [`decision_dict`]); `who` names the source in errors.
pub fn decision(d: &Bound<'_, PyAny>, who: &str) -> PyResult<Decision> {
    let d = d.cast::<PyDict>().map_err(|_| PyValueError::new_err(format!("{who}: each decision must be a dict")))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("{who}: a decision lacks '{k}'")))
    };
    let bad = |k: &str, what: &str| PyValueError::new_err(format!("{who}: '{k}' must be {what}"));
    // Strict types: a bool is not taken for a number (True is 1 to Python).
    let num = |k: &str| -> PyResult<u64> {
        let v = get(k)?;
        if v.is_instance_of::<PyBool>() {
            return Err(bad(k, "a non-negative integer, not a boolean"));
        }
        v.extract().map_err(|_| {
            let shown = v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
            // An integer too large for 64 bits, however large, is an int that is not negative.
            if v.is_instance_of::<PyInt>() && v.ge(0).unwrap_or(false) {
                bad(k, &format!("a non-negative integer below 2^64, not {shown}"))
            } else {
                bad(k, &format!("a non-negative integer, not {shown}"))
            }
        })
    };
    // pyo3 takes bool and numpy.bool_ for a bool, never 0 or 1.
    let boolean = |k: &str| -> PyResult<bool> {
        let v = get(k)?;
        v.extract().map_err(|_| bad(k, &format!("True or False, not {}", v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string()))))
    };
    let string = |k: &str| -> PyResult<String> { get(k)?.extract().map_err(|_| bad(k, "a string")) };
    let kind = string("kind")?;
    let names: Vec<&str> = KINDS.iter().map(|(k, _)| *k).collect();
    let fields = fields_of(&kind)
        .ok_or_else(|| PyValueError::new_err(format!("{who}: unknown decision kind '{kind}' (kinds: {})", names.join(", "))))?;
    // A misspelt field would otherwise be ignored and its decision taken with another's value;
    // named first, as the likelier mistake than the field it stands for being missing.
    for k in d.keys() {
        let k = k.str()?.to_string();
        // `text` is what a logged decision dict carries beside the rest (`decision_dict`).
        if !["vm_id", "kind", "reason", "text"].contains(&k.as_str()) && !fields.contains(&k.as_str()) {
            return Err(PyValueError::new_err(format!(
                "{who}: a '{kind}' decision has no field '{k}' (its fields: vm_id, kind, {}, reason)",
                fields.join(", ")
            )));
        }
    }
    let action = match kind.as_str() {
        "balloon_target" => Action::SetBalloonTarget { bytes: num("bytes")? },
        "grant_limit" => Action::SetGrantLimit { bytes: num("bytes")? },
        "swap_target" => Action::SetSwapTarget { bytes: num("bytes")? },
        "blocked" => Action::SetBlocked { blocked: boolean("blocked")? },
        "break_large_pages" => Action::BreakLargePages { share_now: boolean("share_now")? },
        "shrink_frontswap" => Action::ShrinkFrontswap { bytes: num("bytes")? },
        "sharing" => Action::SetSharing { run: boolean("run")?, pages_to_scan: num("pages_to_scan")?, sleep_ms: num("sleep_ms")? },
        "memory_state" => {
            // `SetMemoryState` holds a static name: one of the ESX tables' states.
            let s = string("state")?;
            let names = memory_state_names();
            let state = names
                .iter()
                .find(|x| **x == s)
                .ok_or_else(|| PyValueError::new_err(format!("{who}: memory state '{s}' is not one of: {}", names.join(", "))))?;
            Action::SetMemoryState { state }
        }
        _ => unreachable!("a kind fields_of knows"),
    };
    let id = get("vm_id")?;
    let vm: Option<u32> = if id.is_none() {
        None
    } else if id.is_instance_of::<PyBool>() {
        return Err(bad("vm_id", "a VM's id (an integer from the view) or None"));
    } else {
        Some(id.extract().map_err(|_| bad("vm_id", "a VM's id (an integer from the view) or None"))?)
    };
    let host_wide = matches!(action, Action::SetSharing { .. } | Action::SetMemoryState { .. });
    match (host_wide, vm) {
        (true, Some(_)) => return Err(PyValueError::new_err(format!("{who}: a '{kind}' decision is the host's: its vm_id must be None"))),
        (false, None) => return Err(PyValueError::new_err(format!("{who}: a '{kind}' decision needs the vm_id of the VM it is for"))),
        _ => {}
    }
    let reason = string("reason")?;
    if reason.trim().is_empty() {
        return Err(PyValueError::new_err(format!("{who}: every decision needs a reason")));
    }
    Ok(Decision { vm: vm.map(VmId), action, reason })
}
