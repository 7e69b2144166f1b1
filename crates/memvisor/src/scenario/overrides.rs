//! Overrides on the parsed document: a scenario's `[[variant]]` tables and `--set key=value`
//! options both name a value by a dotted path (`vm.kali.workload.stress.instances`, where a `vm`
//! is picked by name and a workload by kind, name or index) and replace it before the document is
//! read into a scenario. Overridden values keep a position: the variant's line, or the `--set`.

use std::borrow::Cow;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::{ScenarioError, Source};

/// A document to read, with the name of the variant it is for and warnings about it.
type VariantDoc<'a> = (Option<String>, Spanned<DeTable<'a>>, Vec<String>);

/// Whether two dotted paths name the same value or one lies inside the other.
fn overlaps(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| x.len() > y.len() && x.starts_with(y) && x.as_bytes()[y.len()] == b'.';
    a == b || inside(a, b) || inside(b, a)
}

/// One override: dotted path, new value.
struct Set<'a> {
    path: String,
    value: Spanned<DeValue<'a>>,
}

/// The base document and the overrides to apply to it.
pub(super) struct Overrides<'a, 's> {
    src: &'s Source<'a>,
    base: Spanned<DeTable<'a>>,
    variants: Vec<(String, Vec<Set<'a>>)>,
    sets: Vec<Set<'a>>,
}

fn kind_of(v: &DeValue) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Gives a value (and everything inside it) one span.
fn respan<'a>(v: DeValue<'a>, span: &Range<usize>) -> Spanned<DeValue<'a>> {
    let v = match v {
        DeValue::Array(items) => {
            let mut a = DeArray::new();
            for it in items.iter() {
                a.push(respan(it.get_ref().clone(), span));
            }
            DeValue::Array(a)
        }
        DeValue::Table(t) => {
            let mut n = DeTable::new();
            for (k, val) in t.iter() {
                n.insert(Spanned::new(span.clone(), k.get_ref().clone()), respan(val.get_ref().clone(), span));
            }
            DeValue::Table(n)
        }
        other => other,
    };
    Spanned::new(span.clone(), v)
}

/// Flattens a `set` table into (dotted path, value) leaves.
fn flatten<'a>(prefix: &str, t: &DeTable<'a>, out: &mut Vec<Set<'a>>) {
    for (k, v) in t.iter() {
        let path = if prefix.is_empty() { k.get_ref().to_string() } else { format!("{prefix}.{}", k.get_ref()) };
        match v.get_ref() {
            DeValue::Table(inner) => flatten(&path, inner, out),
            _ => out.push(Set { path, value: v.clone() }),
        }
    }
}

fn str_field<'v>(t: &'v DeTable, key: &str) -> Option<&'v str> {
    match t.get(key).map(|v| v.get_ref()) {
        Some(DeValue::String(s)) => Some(s),
        _ => None,
    }
}

/// `workload = { ... }` (one table) and `[[vm.workload]]` (an array of tables) mean the same:
/// turn the first into the second, so the reader sees one shape.
fn normalize_workloads(root: &mut DeTable) {
    let Some(DeValue::Array(vms)) = root.get_mut("vm").map(|v| v.get_mut()) else { return };
    for vm in vms.as_mut() {
        let DeValue::Table(t) = vm.get_mut() else { continue };
        if let Some(w) = t.get_mut("workload")
            && matches!(w.get_ref(), DeValue::Table(_))
        {
            let span = w.span();
            let mut arr = DeArray::new();
            arr.push(w.clone());
            *w = Spanned::new(span, DeValue::Array(arr));
        }
    }
}

impl<'a, 's> Overrides<'a, 's> {
    /// Takes the `[[variant]]` tables out of the document and parses the `--set` options.
    pub fn new(src: &'s Source<'a>, mut base: Spanned<DeTable<'a>>) -> Result<Self, ScenarioError> {
        // One shape before any override, so a single workload is picked by index as well as by
        // kind or name.
        normalize_workloads(base.get_mut());
        let mut variants = Vec::new();
        if let Some(v) = base.get_mut().remove("variant") {
            let span = v.span();
            let DeValue::Array(items) = v.into_inner() else {
                return Err(src.error(Some(span), "variant", "must be an array of tables ([[variant]])"));
            };
            for item in items.iter() {
                let span = item.span();
                let DeValue::Table(t) = item.get_ref() else {
                    return Err(src.error(Some(span), "variant", "each variant must be a table with 'name' and 'set'"));
                };
                for (k, v) in t.iter() {
                    if !matches!(k.get_ref().as_ref(), "name" | "set") {
                        return Err(src.error(
                            Some(v.span()),
                            "variant",
                            format!("unknown field '{}', expected 'name' or 'set'", k.get_ref()),
                        ));
                    }
                }
                let name = str_field(t, "name")
                    .ok_or_else(|| src.error(Some(span.clone()), "variant.name", "each variant needs a name (a string)"))?
                    .to_string();
                if let Some(why) = super::folder_name_problem(&name) {
                    return Err(src.error(Some(span), "variant.name", format!("'{name}' {why}")));
                }
                // A case's run folder holds its variants' folders beside these two files
                // (python/memvisor/runfolder.py).
                if ["summary.json", "report.html"].contains(&name.as_str()) {
                    return Err(src.error(
                        Some(span),
                        "variant.name",
                        format!("'{name}' is a file of the run folder, beside the variants' folders: name the variant otherwise"),
                    ));
                }
                if variants.iter().any(|(n, _)| *n == name) {
                    return Err(src.error(Some(span), "variant.name", format!("two variants are named '{name}'")));
                }
                let Some(DeValue::Table(set)) = t.get("set").map(|v| v.get_ref()) else {
                    return Err(src.error(Some(span), "variant.set", format!("variant '{name}' needs a 'set' table of overrides")));
                };
                let mut sets = Vec::new();
                flatten("", set, &mut sets);
                variants.push((name, sets));
            }
        }
        let mut sets = Vec::new();
        for (i, s) in src.sets.iter().enumerate() {
            let span = src.text.len() + 1 + i..src.text.len() + 2 + i;
            let (path, value) = s
                .split_once('=')
                .ok_or_else(|| src.error(Some(span.clone()), "", "an override must look like key=value (e.g. host.memory=4GiB)"))?;
            let value = value.trim();
            let parsed = match DeValue::parse(value) {
                Ok(v) => v.into_inner(),
                Err(_) => DeValue::String(Cow::Borrowed(value)),
            };
            sets.push(Set { path: path.trim().to_string(), value: respan(parsed, &span) });
        }
        Ok(Self { src, base, variants, sets })
    }

    /// The variants' names, in order; one `None` for a scenario without variants.
    pub fn names(&self) -> Vec<Option<String>> {
        if self.variants.is_empty() { vec![None] } else { self.variants.iter().map(|(n, _)| Some(n.clone())).collect() }
    }

    /// The document of variant `k` (of [`Self::names`]; past the last, the base alone) with the
    /// `--set`s on top. Its errors do not name the variant: the caller knows whether other
    /// variants share them.
    pub fn variant(&self, k: usize) -> Result<VariantDoc<'a>, ScenarioError> {
        let (name, vsets): (Option<String>, &[Set<'a>]) = match self.variants.get(k) {
            Some((n, s)) => (Some(n.clone()), s.as_slice()),
            None => (None, &[]),
        };
        let mut doc = self.base.clone();
        // Where each override landed, by position (`vm.0.workload.1.size`), so that one value
        // named two ways (by a workload's kind and by its index) is still one value.
        let mut landed: Vec<(String, &Set<'a>)> = Vec::new();
        for s in vsets.iter().chain(&self.sets) {
            landed.push((self.apply(doc.get_mut(), s)?, s));
        }
        let (by_variant, by_set) = landed.split_at(vsets.len());
        // Two --set of one value would leave the answer to their order: refuse.
        for (k, (at, s)) in by_set.iter().enumerate() {
            if let Some(j) = by_set[..k].iter().position(|(a, _)| overlaps(a, at)) {
                let why = format!("also set by --set {}; give each value once", self.src.sets[j]);
                return Err(self.src.error(Some(s.value.span()), &s.path, why));
            }
        }
        normalize_workloads(doc.get_mut());
        // A --set wins over the variant; say so, since it may undo what tells variants apart.
        let mut warnings = Vec::new();
        if let Some(n) = &name {
            for (at, s) in by_set {
                for (_, v) in by_variant.iter().filter(|(a, _)| overlaps(a, at)) {
                    warnings.push(format!("--set {} replaces what variant '{n}' sets for {}", s.path, v.path));
                }
            }
        }
        Ok((name, doc, warnings))
    }

    /// Applies one override; returns where it landed, with array entries by position.
    fn apply(&self, root: &mut DeTable<'a>, set: &Set<'a>) -> Result<String, ScenarioError> {
        let span = set.value.span();
        let err = |m: String| self.src.error(Some(span.clone()), &set.path, m);
        let segs: Vec<&str> = set.path.split('.').collect();
        let mut table = root;
        let mut landed: Vec<String> = Vec::new();
        let mut i = 0;
        while i < segs.len() {
            let seg = segs[i];
            let last = i + 1 == segs.len();
            // A sysctl name contains dots: the rest of the path is the key.
            let key = if i > 0 && segs[i - 1] == "sysctl" { segs[i..].join(".") } else { seg.to_string() };
            let last = last || key.contains('.');
            landed.push(key.clone());
            if last {
                table.insert(Spanned::new(span.clone(), Cow::Owned(key)), set.value.clone());
                return Ok(landed.join("."));
            }
            if !table.contains_key(seg) {
                table.insert(
                    Spanned::new(span.clone(), Cow::Owned(seg.to_string())),
                    Spanned::new(span.clone(), DeValue::Table(DeTable::new())),
                );
            }
            let next = table.get_mut(seg).expect("present");
            table = match next.get_mut() {
                DeValue::Table(t) => t,
                DeValue::Array(items) => {
                    i += 1;
                    let sel = segs[i];
                    let names: Vec<String> = items
                        .iter()
                        .filter_map(|it| match it.get_ref() {
                            DeValue::Table(t) => str_field(t, "name").or(str_field(t, "kind")).map(str::to_string),
                            _ => None,
                        })
                        .collect();
                    // An entry is picked by its name (a workload's kind when it has none), then by
                    // kind, then by index: a VM named "1" is that VM, not the second. A selector
                    // that fits several entries is refused rather than landing on the first.
                    let fits = |by_name: bool| -> Vec<usize> {
                        let fit = |it: &Spanned<DeValue>| match it.get_ref() {
                            DeValue::Table(t) if by_name => str_field(t, "name").or(str_field(t, "kind")) == Some(sel),
                            DeValue::Table(t) => str_field(t, "kind") == Some(sel),
                            _ => false,
                        };
                        items.iter().enumerate().filter(|(_, it)| fit(it)).map(|(k, _)| k).collect()
                    };
                    let mut fit = fits(true);
                    if fit.is_empty() {
                        fit = fits(false);
                    }
                    if fit.len() > 1 {
                        let at: Vec<String> = fit.iter().map(usize::to_string).collect();
                        return Err(err(format!(
                            "'{sel}' fits {} '{seg}' entries (indices {}): pick one by index",
                            fit.len(),
                            at.join(", ")
                        )));
                    }
                    let pos = fit.first().copied().or_else(|| sel.parse::<usize>().ok().filter(|&k| k < items.len()));
                    // A VM's only workload may also be addressed without naming it
                    // (`vm.g.workload.size`), as before a single table became an array; a name
                    // followed by more of the path (`workload.stress.instances`) is a selector, and
                    // one that names no entry is a mistake, not a field.
                    let field = i + 1 == segs.len()
                        || matches!(items.first().map(|it| it.get_ref()), Some(DeValue::Table(t)) if t.get(sel).is_some());
                    let only = seg == "workload" && items.len() == 1 && sel.parse::<usize>().is_err() && field;
                    let pos = match pos {
                        Some(pos) => pos,
                        None if only => {
                            i -= 1;
                            0
                        }
                        None => {
                            let n = items.len();
                            let by_index = if n == 1 { "index 0".to_string() } else { format!("indices 0 to {}", n - 1) };
                            return Err(err(format!("no '{seg}' entry named '{sel}' (have: {}; or by {by_index})", names.join(", "))));
                        }
                    };
                    if i + 1 == segs.len() {
                        return Err(err(format!("'{seg}.{sel}' is a whole table; set one of its fields")));
                    }
                    landed.push(pos.to_string());
                    match items.as_mut()[pos].get_mut() {
                        DeValue::Table(t) => t,
                        other => return Err(err(format!("'{seg}' holds {}, not tables", kind_of(other)))),
                    }
                }
                other => return Err(err(format!("'{seg}' is {}, it has no field '{}'", kind_of(other), segs[i + 1]))),
            };
            i += 1;
        }
        Ok(landed.join("."))
    }
}
