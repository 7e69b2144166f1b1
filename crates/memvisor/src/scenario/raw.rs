//! The scenario file as written: every table refuses unknown fields, and every value keeps its
//! position in the file so that errors can name the line.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

/// A quantity written with a unit ("2GiB") or, wrongly, without one (2048): kept as text so the
/// unit parser can say what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct Qty(pub String);

impl<'de> Deserialize<'de> for Qty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Qty;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity with a unit, as a string such as \"2GiB\" or \"8ms\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Qty, E> {
                Ok(Qty(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Qty, E> {
                Ok(Qty(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Qty, E> {
                Ok(Qty(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Qty, E> {
                Ok(Qty(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Spanned<String>,
    pub description: Option<String>,
    pub seed: Option<Spanned<i64>>,
    pub duration: Option<Spanned<Qty>>,
    pub files_from: Option<Spanned<String>>,
    pub host: Spanned<RawHost>,
    pub costs: Option<RawCosts>,
    #[serde(default)]
    pub datastore: Vec<Spanned<RawDatastore>>,
    #[serde(default)]
    pub vm: Vec<Spanned<RawVm>>,
    pub report: Option<RawReport>,
}

/// `[host]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHost {
    pub memory: Spanned<Qty>,
    pub profile: Option<Spanned<String>>,
    pub hypervisor: Option<Spanned<Qty>>,
    pub swap: Option<Spanned<bool>>,
    pub zip_max_percent: Option<Spanned<i64>>,
    pub compressor: Option<Spanned<String>>,
    pub balloon_max_percent: Option<Spanned<i64>>,
    pub sample_period: Option<Spanned<Qty>>,
    pub sample_pages: Option<Spanned<i64>>,
    pub policy: Option<Spanned<String>>,
    pub esx_states: Option<Spanned<String>>,
    pub idle_tax: Option<Spanned<i64>>,
    pub sample_interval: Option<Spanned<Qty>>,
    pub lookahead: Option<Spanned<Qty>>,
    pub page_sharing: Option<Spanned<bool>>,
    pub share_scan_time: Option<Spanned<Qty>>,
    pub share_force_salting: Option<Spanned<i64>>,
    pub large_pages: Option<Spanned<bool>>,
    /// ksmd's tunables by their /sys/kernel/mm/ksm names, and `run`.
    pub ksm: Option<Spanned<BTreeMap<String, Spanned<i64>>>>,
    pub tmem: Option<Spanned<bool>>,
    pub tmem_dedup: Option<Spanned<bool>>,
    pub tmem_compress: Option<Spanned<bool>>,
    pub vm_metadata: Option<Spanned<Qty>>,
    pub cpus: Option<Spanned<i64>>,
    pub dom0_vcpus: Option<Spanned<i64>>,
}

/// `[costs]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCosts {
    pub dram_access: Option<Spanned<Qty>>,
    pub minor_fault: Option<Spanned<Qty>>,
    pub host_back: Option<Spanned<Qty>>,
    pub page_copy: Option<Spanned<Qty>>,
    pub reclaim_scan: Option<Spanned<Qty>>,
    pub reclaim_free: Option<Spanned<Qty>>,
    pub reclaim_pageout: Option<Spanned<Qty>>,
    pub balloon_page: Option<Spanned<Qty>>,
    pub compress: Option<Spanned<Qty>>,
    pub decompress: Option<Spanned<Qty>>,
    pub host_swap_out: Option<Spanned<Qty>>,
    pub blkback_request: Option<Spanned<Qty>>,
}

/// `[[datastore]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDatastore {
    pub name: Spanned<String>,
    pub device: Spanned<String>,
    pub latency: Option<Spanned<Qty>>,
    pub bandwidth: Option<Spanned<Qty>>,
    pub queue_depth: Option<Spanned<i64>>,
    pub seek: Option<Spanned<Qty>>,
    pub cache: Option<Spanned<Qty>>,
    pub disks: Option<Spanned<i64>>,
}

/// `[[vm]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVm {
    pub name: Spanned<String>,
    pub count: Option<Spanned<i64>>,
    pub memory: Spanned<Qty>,
    pub vcpus: Option<Spanned<i64>>,
    pub reservation: Option<Spanned<Qty>>,
    pub limit: Option<Spanned<Qty>>,
    pub shares: Option<Spanned<i64>>,
    pub overhead: Option<Spanned<Qty>>,
    pub os: Option<Spanned<String>>,
    pub datastore: Spanned<String>,
    pub swap: Option<Spanned<Qty>>,
    pub replacement: Option<Spanned<String>>,
    pub kernel_reserved: Option<Spanned<Qty>>,
    pub transparent_hugepage: Option<Spanned<String>>,
    pub cgroup: Option<Spanned<String>>,
    pub balloon: Option<Spanned<String>>,
    pub host_swap_datastore: Option<Spanned<String>>,
    pub sysctl: Option<BTreeMap<Spanned<String>, Spanned<i64>>>,
    pub workload: Option<Vec<Spanned<RawWorkload>>>,
    pub image: Option<Spanned<String>>,
    pub image_common: Option<Spanned<Qty>>,
    pub zero_memory_at: Option<Spanned<Qty>>,
    pub maxmem: Option<Spanned<Qty>>,
    pub cleancache: Option<Spanned<bool>>,
    pub frontswap: Option<Spanned<bool>>,
    pub frontswap_selfshrink: Option<Spanned<bool>>,
}

/// A workload; which fields apply depends on `kind` (checked when resolving). A field of some
/// kinds only goes in `kind_fields` and `kind_specific_fields` (`resolve/workload.rs`) too, or the
/// other kinds accept it unread.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub kind: Spanned<String>,
    pub name: Option<Spanned<String>>,
    pub content: Option<Spanned<String>>,
    pub zero_pages: Option<Spanned<f64>>,
    pub common_pages: Option<Spanned<f64>>,
    pub duplicate_pages: Option<Spanned<f64>>,
    pub program: Option<Spanned<String>>,
    pub captured: Option<Spanned<String>>,
    pub memory_limit: Option<Spanned<Qty>>,
    pub start: Option<Spanned<Qty>>,
    pub instances: Option<Spanned<i64>>,
    pub pages: Option<Spanned<Qty>>,
    pub passes: Option<Spanned<i64>>,
    pub size: Option<Spanned<Qty>>,
    pub block: Option<Spanned<Qty>>,
    pub fsync: Option<Spanned<bool>>,
    pub read: Option<Spanned<bool>>,
    pub footprint: Option<Spanned<Qty>>,
    pub active: Option<Spanned<Qty>>,
    pub period: Option<Spanned<Qty>>,
    pub file: Option<Spanned<String>>,
    pub touches: Option<Spanned<i64>>,
    pub distribution: Option<Spanned<String>>,
    pub seed: Option<Spanned<i64>>,
    pub write: Option<Spanned<bool>>,
    pub loops: Option<Spanned<i64>>,
    pub compute: Option<Spanned<Qty>>,
    pub workers: Option<Spanned<i64>>,
    pub bytes: Option<Spanned<Qty>>,
    pub keep: Option<Spanned<bool>>,
    pub rounds: Option<Spanned<i64>>,
    pub live: Option<Spanned<Qty>>,
    pub object: Option<Spanned<Qty>>,
    pub cycles: Option<Spanned<i64>>,
    pub replace_percent: Option<Spanned<i64>>,
    pub visit: Option<Spanned<Qty>>,
    pub tree: Option<Spanned<String>>,
    pub arch: Option<Spanned<String>>,
    pub config: Option<Spanned<String>>,
    pub jobs: Option<Spanned<i64>>,
    pub builds: Option<Spanned<i64>>,
    pub units: Option<Spanned<i64>>,
    pub pool: Option<Spanned<String>>,
    pub rate: Option<Spanned<f64>>,
    pub clients: Option<Spanned<i64>>,
    pub think: Option<Spanned<Qty>>,
    pub zipf: Option<Spanned<f64>>,
    pub document: Option<Spanned<Qty>>,
    pub rtt: Option<Spanned<Qty>>,
    pub path: Option<Spanned<Qty>>,
    pub close: Option<Spanned<String>>,
    pub msl: Option<Spanned<Qty>>,
    pub mbufs: Option<Spanned<i64>>,
    pub clusters: Option<Spanned<i64>>,
}

/// `[report]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReport {
    pub window: Option<Spanned<Vec<Qty>>>,
    pub columns: Option<Spanned<Vec<String>>>,
}
