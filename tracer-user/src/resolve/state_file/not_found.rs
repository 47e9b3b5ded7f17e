//! A pod that is not there: the pods of its namespace, close names ("did you mean") and other
//! namespaces holding that name, for the state file and crictl alike.

use std::fmt::Write as _;

use super::PodTarget;
use crate::util::safe;

/// Names listed in an error message before "… and N more".
const LIST_MAX: usize = 12;

/// What the "pod not found" message needs.
#[derive(Debug)]
pub struct NotFound {
    /// Where the pods were listed: the state file's path, or `crictl`.
    pub source: String,
    pub namespace: String,
    pub name: String,
    /// Pods of that namespace on this node, sorted.
    pub in_namespace: Vec<String>,
    /// Close names ("did you mean").
    pub suggestions: Vec<String>,
    /// Other namespaces holding a pod of exactly that name.
    pub other_namespaces: Vec<String>,
}

/// The message of a pod that is not there: the pods of its namespace, close names ("did you
/// mean") and other namespaces holding that name.
#[must_use]
pub fn not_found_message(nf: &NotFound) -> String {
    let mut m = format!(
        "pod '{}' not found in namespace '{}' on this node (according to {})",
        safe(&nf.name),
        safe(&nf.namespace),
        nf.source
    );
    if !nf.suggestions.is_empty() {
        let names: Vec<String> = nf
            .suggestions
            .iter()
            .map(|s| format!("'{}'", safe(s)))
            .collect();
        let _ = write!(m, "; did you mean {}?", names.join(" or "));
    }
    if !nf.other_namespaces.is_empty() {
        let ns: Vec<String> = nf.other_namespaces.iter().map(|s| safe(s)).collect();
        let _ = write!(
            m,
            "; a pod '{}' exists in namespace {} (use -n {})",
            safe(&nf.name),
            ns.join(", "),
            ns[0]
        );
    }
    if nf.in_namespace.is_empty() {
        let _ = write!(
            m,
            "; this node has no pods in namespace '{}'",
            safe(&nf.namespace)
        );
    } else {
        let _ = write!(
            m,
            "; pods in '{}' here: {}",
            safe(&nf.namespace),
            list(&nf.in_namespace)
        );
    }
    m.push_str("; pktrace only sees pods scheduled on this node (kubectl get pod -o wide)");
    m
}

/// `a, b, c … and 4 more`, names escaped.
fn list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(LIST_MAX).map(|n| safe(n)).collect();
    let mut s = shown.join(", ");
    if names.len() > LIST_MAX {
        let _ = write!(s, " … and {} more", names.len() - LIST_MAX);
    }
    s
}

/// What to say about pod `namespace/name` missing from `all` (the pods `source` lists).
#[must_use]
pub fn not_found(source: &str, all: &[PodTarget], namespace: &str, name: &str) -> NotFound {
    let in_namespace: Vec<String> = all
        .iter()
        .filter(|p| p.namespace == namespace)
        .map(|p| p.name.clone())
        .collect();
    let mut other_namespaces: Vec<String> = all
        .iter()
        .filter(|p| p.name == name && p.namespace != namespace)
        .map(|p| p.namespace.clone())
        .collect();
    other_namespaces.dedup();
    NotFound {
        source: source.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        suggestions: suggest(name, &in_namespace),
        in_namespace,
        other_namespaces,
    }
}

/// Names within edit distance 2 of `name` (the closest ones), else the names starting with
/// it (`whereami` → the `whereami-…` pods of a deployment).
fn suggest(name: &str, candidates: &[String]) -> Vec<String> {
    let scored: Vec<(usize, &String)> = candidates
        .iter()
        .filter_map(|c| Some((distance_within(name, c, 2)?, c)))
        .collect();
    if let Some(best) = scored.iter().map(|(d, _)| *d).min() {
        return scored
            .into_iter()
            .filter(|(d, _)| *d == best)
            .map(|(_, c)| c.clone())
            .collect();
    }
    if name.is_empty() {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|c| c.starts_with(name))
        .take(LIST_MAX)
        .cloned()
        .collect()
}

/// Levenshtein distance between `a` and `b` when it is at most `max` (names whose lengths
/// differ by more are not compared: a hostile state file's long names cost nothing).
pub(super) fn distance_within(a: &str, b: &str, max: usize) -> Option<usize> {
    if a.chars().count().abs_diff(b.chars().count()) > max {
        return None;
    }
    Some(strsim::levenshtein(a, b)).filter(|&d| d <= max)
}
