//! Every crate of the workspace has layered modules: no import cycle between the top-level
//! modules of a crate, nor between sibling submodules of one folder (`explain::ipset` ↔
//! `explain::rules`). Checked by `cargo test` (this module's tests read the `src` of every
//! crate the workspace's Cargo.toml lists in `members`, xtask's own included). Between crates
//! cargo itself refuses a cycle.
//!
//! Hand-written rather than a maintained tool: `cargo modules dependencies --acyclic`
//! (cargo-modules) draws the module graph but is a separate binary built on rust-analyzer's
//! crates (a long build, an install step in `cargo xtask setup`, one pass per crate outside
//! `cargo test`) and counts test code unless told otherwise; cargo-cycles is young (0.x).
//! This check needs no dependency, runs inside `cargo test` in about a second and applies
//! exactly the rule below.
//!
//! A module's imports are the `crate::…` and `super::…` paths in its production code (`use`
//! trees included; comments, strings, test modules and test files left out). A path is cut to
//! the deepest module it names; a path into an ancestor or a descendant of the importing
//! module is no edge (a folder's `mod.rs` and its children share one layer), any other is an
//! edge between the two sibling modules under their common parent.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt, fs,
    path::Path,
};

use anyhow::{Context as _, Result};

/// A module path below the crate root (`["explain", "rules"]`); empty for the root.
type ModPath = Vec<String>;

/// Where an import was seen (for the report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: String,
    pub line: usize,
}

/// Import edges between sibling modules, with the first place each was seen.
#[derive(Debug, Default)]
pub struct Graph {
    edges: BTreeMap<(String, String), Site>,
}

/// One cycle: modules in order, the first repeated at the end, with the site of each edge.
#[derive(Debug, PartialEq, Eq)]
pub struct Cycle {
    pub modules: Vec<String>,
    pub sites: Vec<Site>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.modules.join(" -> "))?;
        let sites: Vec<String> = self
            .sites
            .iter()
            .map(|s| format!("{}:{}", s.file, s.line))
            .collect();
        write!(f, " (at {})", sites.join(", "))
    }
}

/// The cycles in the crate whose sources are under `src` (its `src/bin` left out).
///
/// # Errors
/// A file cannot be read.
pub fn check_crate(src: &Path) -> Result<Vec<Cycle>> {
    let mut files = Vec::new();
    collect_files(src, src, &mut files)?;
    Ok(Graph::build(&files).cycles())
}

#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "Rust sources end in lowercase .rs"
)]
fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let rel = path.strip_prefix(root)?.to_string_lossy().into_owned();
        if path.is_dir() {
            if rel != "bin" {
                collect_files(root, &path, out)?;
            }
        } else if rel.ends_with(".rs") {
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            out.push((rel, text));
        }
    }
    Ok(())
}

/// The module a file defines: `explain/rules.rs` and `explain/rules/mod.rs` are
/// `explain::rules`; `lib.rs` and `main.rs` the root.
fn module_of(file: &str) -> ModPath {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: ModPath = stem.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod") || stem == "lib" || stem == "main" {
        parts.pop();
    }
    parts
}

/// Test files and test-only helpers, as `tools/structure.py` counts them.
fn is_test_file(file: &str) -> bool {
    file.split('/')
        .any(|p| p.contains("test") || p.starts_with("fake_"))
}

impl Graph {
    /// The graph of `files` (path relative to `src`, text).
    #[must_use]
    pub fn build(files: &[(String, String)]) -> Self {
        let production: Vec<&(String, String)> =
            files.iter().filter(|(f, _)| !is_test_file(f)).collect();
        let modules: BTreeSet<ModPath> = production.iter().map(|(f, _)| module_of(f)).collect();
        let mut graph = Self::default();
        for (file, text) in production {
            let from = module_of(file);
            for (line, path) in imports(&production_code(text)) {
                let Some(to) = resolve(&from, &path, &modules) else {
                    continue;
                };
                if let Some((a, b)) = siblings(&from, &to) {
                    let site = Site {
                        file: file.clone(),
                        line,
                    };
                    graph.edges.entry((a, b)).or_insert(site);
                }
            }
        }
        graph
    }

    /// Every edge `from -> to` (module paths joined with `::`).
    #[must_use]
    pub fn edges(&self) -> Vec<(String, String)> {
        self.edges.keys().cloned().collect()
    }

    /// One cycle through each strongly connected set of modules (none: the graph is layered).
    #[must_use]
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (a, b) in self.edges.keys() {
            next.entry(a).or_default().push(b);
        }
        let mut found = Vec::new();
        let mut covered: BTreeSet<String> = BTreeSet::new();
        for start in next.keys() {
            if covered.contains(*start) {
                continue;
            }
            if let Some(path) = shortest_path_back(&next, start) {
                covered.extend(path.iter().cloned());
                let sites = path
                    .windows(2)
                    .map(|w| self.edges[&(w[0].clone(), w[1].clone())].clone())
                    .collect();
                found.push(Cycle {
                    modules: path,
                    sites,
                });
            }
        }
        found
    }
}

/// The shortest walk `start -> … -> start` (breadth first), if any.
fn shortest_path_back(next: &BTreeMap<&str, Vec<&str>>, start: &str) -> Option<Vec<String>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &n in next.get(node).map_or(&[][..], Vec::as_slice) {
            if n == start {
                let mut path = vec![start.to_owned(), node.to_owned()];
                let mut at = node;
                while at != start {
                    at = parent[at];
                    path.push(at.to_owned());
                }
                path.reverse();
                return Some(path);
            }
            if !parent.contains_key(n) {
                parent.insert(n, node);
                queue.push_back(n);
            }
        }
    }
    None
}

/// `path` (as written after `crate::` or `super::`, the keyword first) cut to the deepest
/// known module; `None` for `self::` and the root.
fn resolve(from: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut base, rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("super") => {
            let mut base = from.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        _ => return None,
    };
    for segment in rest {
        base.push(segment.clone());
        if !modules.contains(&base) {
            base.pop();
            break;
        }
    }
    (!base.is_empty()).then_some(base)
}

/// The two siblings an import from `from` to `to` joins, or `None` when one module contains
/// the other.
fn siblings(from: &ModPath, to: &ModPath) -> Option<(String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].join("::"), to[..=common].join("::")))
}

/// A file's text before its test module (`#[cfg(test)]` then `mod …`), with comments and
/// string literals blanked (line breaks kept, so lines still count).
fn production_code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .iter()
        .enumerate()
        .position(|(k, l)| {
            l.trim() == "#[cfg(test)]"
                && lines[k + 1..]
                    .iter()
                    .find(|x| !x.trim().is_empty())
                    .is_some_and(|x| is_mod_line(x))
        })
        .unwrap_or(lines.len());
    blank_comments_and_strings(&lines[..end].join("\n"))
}

fn is_mod_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or("");
    let word = if first.starts_with("pub") {
        words.next().unwrap_or("")
    } else {
        first
    };
    word == "mod"
}

fn blank_comments_and_strings(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote).
            let from = if next == Some('\\') { i + 3 } else { i + 2 };
            i = chars[from..]
                .iter()
                .position(|&x| x == '\'')
                .map_or(chars.len(), |p| from + p + 1);
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            i = skip_raw_string(&chars, i + 1, &mut out);
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Skips a raw string whose hashes start at `i`; returns the index after it (`i` itself, with
/// the `r` kept, when no string follows: `r#ident`).
fn skip_raw_string(chars: &[char], mut i: usize, out: &mut String) -> usize {
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    if chars.get(i + hashes) != Some(&'"') {
        out.push('r');
        return i;
    }
    i += hashes + 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            out.push_str("\"\"");
            return i + 1 + hashes;
        }
        if chars[i] == '\n' {
            out.push('\n');
        }
        i += 1;
    }
    i
}

/// Every `crate::…` and `super::…` path in `code` (use trees expanded), with its line.
fn imports(code: &str) -> Vec<(usize, Vec<String>)> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    for (k, (line, token)) in tokens.iter().enumerate() {
        let starts_path = (token == "crate" || token == "super")
            && tokens.get(k + 1).is_some_and(|(_, t)| t == "::")
            && (k == 0 || tokens[k - 1].1 != "::");
        if starts_path {
            let mut paths = Vec::new();
            use_tree(&tokens, k, Vec::new(), &mut paths);
            out.extend(paths.into_iter().map(|p| (*line, p)));
        }
    }
    out
}

/// Expands the use tree (or plain path) starting at token `k` into `out`.
fn use_tree(
    tokens: &[(usize, String)],
    mut k: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match tokens.get(k).map(|(_, t)| t.as_str()) {
            Some("{") => {
                k += 1;
                while tokens.get(k).is_some_and(|(_, t)| t != "}") {
                    k = use_tree(tokens, k, prefix.clone(), out);
                    if tokens.get(k).is_some_and(|(_, t)| t == ",") {
                        k += 1;
                    }
                }
                return k + 1;
            }
            Some(t) if is_ident(t) => {
                prefix.push(t.to_owned());
                k += 1;
                if tokens.get(k).is_some_and(|(_, t)| t == "::") {
                    k += 1;
                    continue;
                }
                out.push(prefix);
                return k;
            }
            _ => {
                if !prefix.is_empty() {
                    out.push(prefix);
                }
                return k;
            }
        }
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, `::` and single punctuation characters, each with its line (from 1).
fn tokenize(code: &str) -> Vec<(usize, String)> {
    let mut tokens = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_alphanumeric() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push((n + 1, chars[start..i].iter().collect()));
            } else if c == ':' && chars.get(i + 1) == Some(&':') {
                tokens.push((n + 1, "::".to_owned()));
                i += 2;
            } else {
                if !c.is_whitespace() {
                    tokens.push((n + 1, c.to_string()));
                }
                i += 1;
            }
        }
    }
    tokens
}

#[cfg(test)]
mod tests;
