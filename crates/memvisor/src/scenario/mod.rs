//! Scenarios: TOML files with units, resolved into fully specified runs (every default filled in,
//! each default citing its source where it is defined). A scenario may define variants, each a set
//! of overrides; `--set key=value` overrides apply on top.
//!
//! Errors name the file, line, column, field, the bad value and what is allowed.

mod cases;
mod overrides;
mod raw;
mod replay;
mod resolve;
mod resolved;

pub use cases::{CASES, case_text};
pub use replay::{guest_pages_for, replay_scenario};
pub use resolve::{DatastoreSpec, HostSpec, ReportSpec, Scenario, VmSpec};

use std::fmt;

use overrides::Overrides;

/// A problem in a scenario, located.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioError {
    /// Where: "file:line:col", "file (variant 'x')" or "--set #n".
    pub location: String,
    /// The field, as a dotted path, when known.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.location, self.message)
        } else {
            write!(f, "{}: {}: {}", self.location, self.field, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Where positions in a scenario's text come from, to turn byte spans into messages.
#[derive(Clone, Debug)]
pub(crate) struct Source<'a> {
    pub origin: &'a str,
    pub text: &'a str,
    pub sets: &'a [String],
}

impl Source<'_> {
    /// "file:line:col" for a span in the file, or the `--set` it came from.
    pub fn locate(&self, span: Option<std::ops::Range<usize>>) -> String {
        match span {
            Some(s) if s.start > self.text.len() => {
                let i = s.start - self.text.len() - 1;
                format!("--set {}", self.sets.get(i).map_or("?", |s| s.as_str()))
            }
            Some(s) => {
                let before = &self.text[..s.start.min(self.text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("{}:{line}:{col}", self.origin)
            }
            None => self.origin.to_string(),
        }
    }

    /// An error at a span.
    pub fn error(&self, span: Option<std::ops::Range<usize>>, field: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError { location: self.locate(span), field: field.to_string(), message: message.into() }
    }
}

/// Loads a scenario: one resolved run per variant (or one if it has none), with `sets`
/// ("key=value" strings, dotted keys) applied on top of every variant.
pub fn load(text: &str, origin: &str, sets: &[String]) -> Result<Vec<Scenario>, ScenarioError> {
    let src = Source { origin, text, sets };
    let doc = toml::de::DeTable::parse(text).map_err(|e| src.error(e.span(), "", e.message().to_string()))?;
    let ov = Overrides::new(&src, doc)?;
    let mut out = Vec::new();
    for (variant, table, warnings) in ov.variants()? {
        let raw: raw::RawScenario = serde::Deserialize::deserialize(toml::de::Deserializer::from(table))
            .map_err(|e| src.error(e.span(), "", e.message().to_string()))?;
        let mut s = resolve::resolve(&src, raw)?;
        s.variant = variant;
        s.warnings = warnings;
        out.push(s);
    }
    Ok(out)
}
