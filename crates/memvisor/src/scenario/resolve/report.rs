//! `[report]`: the window and the columns a run's report shows.

use super::{Ctx, ReportSpec};
use crate::scenario::ScenarioError;
use crate::scenario::raw::{Qty, RawScenario};
use crate::units;

pub(super) fn resolve_report(c: &Ctx, raw: &RawScenario, denali: bool) -> Result<ReportSpec, ScenarioError> {
    let mut window_ns = (0, None);
    let mut columns: Vec<String> = if denali {
        ["requests_per_s", "latency_p50_ms", "latency_p99_ms", "footprint_pages", "page_ins_per_s"].map(String::from).to_vec()
    } else {
        // The guest's own paging, then what the host took from it (balloon, host swap) and what
        // that cost its vCPUs: a guest slowed by host reclamation alone pages nothing itself.
        ["runtime_s", "pgmajfault/s", "pswpin_pages/s", "pswpout_pages/s", "MCTLSZ_MiB", "SWCUR_MiB", "host_wait_ms"]
            .map(String::from)
            .to_vec()
    };
    if let Some(r) = &raw.report {
        if let Some(w) = &r.window {
            let ws = w.get_ref();
            if ws.len() != 2 {
                return c.err(w.span(), "report.window", "must be [start, end], e.g. [\"0s\", \"150s\"]");
            }
            let parse = |q: &Qty| units::parse_duration_ns(&q.0).map_err(|m| c.src.error(Some(w.span()), "report.window", m));
            let (a, b) = (parse(&ws[0])?, parse(&ws[1])?);
            if b <= a {
                return c.err(w.span(), "report.window", "the end must come after the start");
            }
            window_ns = (a, Some(b));
        }
        if let Some(cols) = &r.columns {
            if cols.get_ref().is_empty() {
                return c.err(cols.span(), "report.columns", "is empty: name at least one column, or leave it out for the defaults");
            }
            if let Some((_, col)) = cols.get_ref().iter().enumerate().find(|(i, col)| cols.get_ref()[..*i].contains(col)) {
                return c.err(cols.span(), "report.columns", format!("'{col}' is named twice: name each column once"));
            }
            for col in cols.get_ref() {
                if denali && !crate::metrics::denali::REPORT_COLUMNS.contains(&col.as_str()) {
                    return c.err(
                        cols.span(),
                        "report.columns",
                        format!("unknown column '{col}' for a denali host: use {}", crate::metrics::denali::REPORT_COLUMNS.join(", ")),
                    );
                }
                if !denali && !report_column_known(col) {
                    return c.err(
                        cols.span(),
                        "report.columns",
                        format!(
                            "unknown column '{col}': use a counter (e.g. pgpgin_KiB), a rate (pgpgin_KiB/s), \
                             a phase duration (write_s, rewrite_s, read_s), a phase rate (write_KiB/s, rewrite_KiB/s, \
                             read_KiB/s) or runtime_s"
                        ),
                    );
                }
            }
            columns = cols.get_ref().clone();
        }
    }
    Ok(ReportSpec { window_ns, columns })
}

/// The timed phase a report column measures (its duration `write_s` or rate `write_KiB/s`), if any.
pub(super) fn phase_of_column(col: &str) -> Option<&str> {
    let phase = |p: &&str| matches!(*p, "write" | "rewrite" | "read");
    col.strip_suffix("_KiB/s").filter(phase).or_else(|| col.strip_suffix("_s").filter(phase))
}

/// Whether a report column names something the summary provides.
fn report_column_known(col: &str) -> bool {
    let counter = |n: &str| crate::metrics::columns().contains(&n);
    if phase_of_column(col).is_some() || col == "runtime_s" {
        return true;
    }
    col.strip_suffix("/s").map_or_else(|| counter(col), counter)
}
