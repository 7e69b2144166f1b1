//! The columns of a Denali host's run (`crate::denali`): its time series rows and what its report
//! may show. A Denali run samples its own figures, not the VM host's (`super::columns`).

/// VMs given their own rows in the time series and summary: the most popular ones [chosen: enough
/// to see the head of a Zipf load, few enough that 10,000 VMs keep the run folder small].
pub const ROW_VMS: usize = 8;

/// Time-series columns of a Denali run, per row (a VM, or all VMs together).
pub const COLUMNS: &[&str] = &[
    "requests_served",
    "requests_dropped",
    "latency_mean_ms",
    "footprint_pages",
    "resident_KiB",
    "page_ins",
    "page_outs",
    "paging_wait_ms",
    "resident_vms",
];

/// Report columns a Denali scenario may ask for.
pub const REPORT_COLUMNS: &[&str] = &[
    "requests_per_s",
    "requests_served",
    "requests_dropped",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "footprint_pages",
    "page_ins_per_s",
    "resident_vms",
    "vms",
    "metadata_MiB",
    "sim_bytes_per_paged_out_vm",
    "sim_events",
];
