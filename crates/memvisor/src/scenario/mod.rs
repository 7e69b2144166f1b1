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
pub use resolve::{DatastoreSpec, HostSpec, ReportSpec, Scenario, VmSpec, WrittenAt};

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
    /// The folder of the scenario file, when it came from one (not a shipped case, a dict or a
    /// string), for the relative paths it names.
    pub fn file_dir(&self) -> Option<&std::path::Path> {
        if self.origin.starts_with("case:") || self.origin.starts_with('<') {
            return None;
        }
        std::path::Path::new(self.origin).parent()
    }

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
    load_variants(text, origin, sets, &[])
}

/// As [`load`], resolving only the variants named in `only` (every one if it is empty), so that
/// what another variant makes of a `--set` does not stop these. A name that is not one of the
/// variants is an error that lists them.
pub fn load_variants(text: &str, origin: &str, sets: &[String], only: &[String]) -> Result<Vec<Scenario>, ScenarioError> {
    let src = Source { origin, text, sets };
    let doc = toml::de::DeTable::parse(text).map_err(|e| plain_error(&src, e, None))?;
    let ov = Overrides::new(&src, doc)?;
    let names = ov.names();
    let have: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
    let unknown: Vec<&str> = only.iter().map(String::as_str).filter(|o| !have.contains(o)).collect();
    if !unknown.is_empty() {
        let list = if have.is_empty() { "none".to_string() } else { have.join(", ") };
        return Err(src.error(None, "", format!("no variant {} (variants: {list})", unknown.join(", "))));
    }
    // Variant `k`, with the --sets on top, read and resolved; its errors name no variant.
    let build = |k: usize| -> Result<Scenario, ScenarioError> {
        let (variant, table, warnings) = ov.variant(k)?;
        let raw: raw::RawScenario = serde::Deserialize::deserialize(toml::de::Deserializer::from(table)).map_err(|e| {
            // The document was consumed; built again (only on this error path) to name the key.
            let doc = ov.variant(k).ok().map(|v| v.1);
            plain_error(&src, e, doc.as_ref().map(|d| d.get_ref()))
        })?;
        let mut s = resolve::resolve(&src, raw)?;
        s.variant = variant;
        s.warnings.extend(warnings);
        Ok(s)
    };
    let mut out = Vec::new();
    for (k, name) in names.iter().enumerate() {
        if !only.is_empty() && !name.as_ref().is_some_and(|n| only.contains(n)) {
            continue;
        }
        match build(k) {
            Ok(s) => out.push(s),
            // A problem of this variant alone says which variant it is; one every variant has
            // (a bad --set, a bad base value) does not point at one of them. A lone variant is
            // told apart from the base without it (`build` past the last variant).
            Err(mut e) => {
                if let Some(n) = name {
                    let others: Vec<usize> =
                        if names.len() > 1 { (0..names.len()).filter(|&j| j != k).collect() } else { vec![names.len()] };
                    if !others.into_iter().all(|j| build(j).err().as_ref() == Some(&e)) {
                        e.location = format!("{} (variant '{n}')", e.location);
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// The keys a scenario file has at its top level.
/// Why `name` cannot name a run folder (a scenario's or a variant's), if it cannot: it must stay
/// one folder inside the runs folder, so no separators, no leading dot (nor `.` or `..`), and short
/// enough for any file system.
pub(crate) fn folder_name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() || name.contains(['/', '\\', '\0']) || name.starts_with('.') || name.len() > 100 {
        Some("must be a name of 1 to 100 bytes without '/' or '\\', not starting with '.' (it names a run folder)")
    } else {
        None
    }
}

const TOP_LEVEL: [&str; 10] = ["name", "description", "seed", "duration", "files_from", "host", "costs", "datastore", "vm", "report"];

/// The fields of serde's "expected one of `a`, `b`, ..." list that `name` most likely misspells:
/// those closest to it, if at most one edit in four characters away (at least one edit; two
/// letters swapped count as one, the commonest typo), as "`a`" or "`a` or `b`".
fn nearest_field(name: &str, msg: &str) -> Option<String> {
    if !msg.contains("expected one of ") {
        return None;
    }
    let near: Vec<(usize, &str)> =
        listed_fields(msg).into_iter().map(|c| (strsim::osa_distance(name, c), c)).filter(|&(d, c)| d <= (c.len() / 4).max(1)).collect();
    let best = near.iter().map(|&(d, _)| d).min()?;
    let names: Vec<String> = near.iter().filter(|&&(d, _)| d == best).map(|&(_, c)| format!("`{c}`")).collect();
    Some(names.join(" or "))
}

/// The fields serde's message about an unknown one lists ("expected `a`", "expected `a` or
/// `b`", "expected one of `a`, `b`, ...").
fn listed_fields(msg: &str) -> Vec<&str> {
    msg.split_once(", expected ").map_or(Vec::new(), |(_, list)| list.split('`').skip(1).step_by(2).collect())
}

/// The fields a table of type `T` may hold, as serde lists them for an unknown one.
fn fields_of<T: serde::de::DeserializeOwned>() -> Vec<String> {
    let msg = toml::from_str::<T>("\"\\u0001\" = 0").err().map(|e| e.message().to_string()).unwrap_or_default();
    listed_fields(&msg).into_iter().map(str::to_string).collect()
}

/// The tables (`[host]`, `[[vm]]`, ...) that have the field `name` found unknown at the top level
/// (serde's message lists the top level's fields), as "[host]" or "[host] or [[vm]]": a field
/// written above its table's header, or with the header left out.
fn top_level_slip(name: &str, msg: &str) -> Option<String> {
    if !msg.contains("`files_from`") {
        return None;
    }
    let tables = [
        ("[host]", fields_of::<raw::RawHost>()),
        ("[costs]", fields_of::<raw::RawCosts>()),
        ("[[datastore]]", fields_of::<raw::RawDatastore>()),
        ("[[vm]]", fields_of::<raw::RawVm>()),
        ("[report]", fields_of::<raw::RawReport>()),
        ("a [[vm]]'s workload", fields_of::<raw::RawWorkload>()),
    ];
    let have: Vec<&str> = tables.iter().filter(|(_, f)| f.iter().any(|f| f == name)).map(|&(t, _)| t).collect();
    (!have.is_empty()).then(|| have.join(" or "))
}

/// The dotted path (as `--set` takes it) of the key or value at `span` in `doc`: an entry of an
/// array of tables by its `name`, else its `kind`, else its index. Searched through the whole
/// document, since a table opened by a header spans only its header.
fn path_at(doc: &toml::de::DeTable, span: &std::ops::Range<usize>) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    fn label(t: &DeTable, i: usize) -> String {
        let named = ["name", "kind"].iter().find_map(|f| match t.get(*f).map(|v| v.get_ref()) {
            Some(DeValue::String(s)) => Some(s.to_string()),
            _ => None,
        });
        named.unwrap_or_else(|| i.to_string())
    }
    fn find(t: &DeTable, span: &std::ops::Range<usize>) -> Option<Vec<String>> {
        let inside = |s: std::ops::Range<usize>| s.start <= span.start && span.end <= s.end;
        for (k, v) in t.iter() {
            let key = k.get_ref().to_string();
            let below = match v.get_ref() {
                DeValue::Table(t) => find(t, span),
                DeValue::Array(items) => items.iter().enumerate().find_map(|(i, it)| match it.get_ref() {
                    DeValue::Table(t) => find(t, span).map(|p| [vec![label(t, i)], p].concat()),
                    _ => inside(it.span()).then(Vec::new),
                }),
                _ => None,
            };
            if let Some(p) = below {
                return Some([vec![key], p].concat());
            }
            if inside(k.span()) || inside(v.span()) {
                return Some(vec![key]);
            }
        }
        None
    }
    find(doc, span).map(|p| p.join("."))
}

/// A TOML or serde error in the user's words: the key it is about, "an integer" rather than
/// "i64", "a table" rather than the name of a Rust type, and a hint when a top-level key was
/// written under a table header (TOML puts everything after `[host]` into the host table).
fn plain_error(src: &Source, e: toml::de::Error, doc: Option<&toml::de::DeTable>) -> ScenarioError {
    let mut msg = e.message().to_string();
    for (rust, plain) in
        [("i64", "an integer"), ("u64", "an integer"), ("u32", "an integer"), ("f64", "a number"), ("a sequence", "an array")]
    {
        msg = msg.replace(&format!("expected {rust}"), &format!("expected {plain}"));
    }
    if let Some(at) = msg.find("expected struct Raw") {
        msg.replace_range(at.., "expected a table");
    }
    // What was found, in TOML's words too (serde says sequence and map).
    for (serde, plain) in [("invalid type: sequence,", "invalid type: array,"), ("invalid type: map,", "invalid type: table,")] {
        if let Some(rest) = msg.strip_prefix(serde) {
            msg = format!("{plain}{rest}");
        }
    }
    // An integer past 64 bits reaches serde as i128 or u64, which no field takes: say the range.
    if let Some(n) = msg
        .strip_prefix("invalid type: integer `")
        .or_else(|| msg.strip_prefix("invalid value: integer `"))
        .and_then(|m| m.split('`').next())
        .and_then(|n| n.parse::<i128>().ok())
        .filter(|&n| i64::try_from(n).is_err())
    {
        msg = format!("{n} is out of range: integers here are at most {}", i64::MAX);
    }
    let span = e.span();
    // The key the value belongs to, from the text before it on its line (`key = value`).
    let key = span.as_ref().filter(|s| s.end <= src.text.len()).and_then(|s| {
        let line_start = src.text[..s.start].rfind('\n').map_or(0, |i| i + 1);
        if msg == "duplicate key" {
            return Some(src.text[s.clone()].trim().to_string());
        }
        let before = src.text[line_start..s.start].trim_end().strip_suffix('=')?;
        let key = before.trim_end().rsplit(|c: char| c == '{' || c == ',' || c.is_whitespace()).next()?;
        (!key.is_empty()).then(|| key.trim_matches('"').to_string())
    });
    if let Some(name) = msg.strip_prefix("unknown field `").and_then(|m| m.split('`').next()).map(str::to_string) {
        if TOP_LEVEL.contains(&name.as_str()) {
            msg.push_str(&format!(
                "; '{name}' is a top-level key: write it above the first [table] header, since everything after a header belongs to that table"
            ));
        } else if let Some(tables) = top_level_slip(&name, &msg) {
            msg.push_str(&format!("; `{name}` belongs in {tables}"));
        } else if let Some(near) = nearest_field(&name, &msg) {
            // A misspelling: the one name meant says more than the list of every field the table
            // may hold (a workload table lists the fields of every kind).
            msg = format!("unknown field `{name}`; did you mean {near}?");
        }
    }
    // The whole path where the document can tell it (an error inside a `--set` is located there).
    let path = doc.zip(span.as_ref()).filter(|(_, s)| s.end <= src.text.len()).and_then(|(d, s)| path_at(d, s));
    src.error(span, path.or(key).as_deref().unwrap_or(""), msg)
}
