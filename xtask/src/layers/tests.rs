//! The checker on small made-up crates (a cycle is found and named, a layered graph passes,
//! what is not an import is ignored), then on every crate of the workspace.

use super::*;
use crate::workspace_root;

fn graph(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect();
    Graph::build(&files)
}

fn edge(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

#[test]
fn a_layered_crate_has_edges_and_no_cycle() {
    let g = graph(&[
        ("lib.rs", "pub mod cli; pub mod config; pub mod run;"),
        ("cli.rs", "pub struct Args;"),
        ("config.rs", "use crate::cli::Args;\npub struct Config;"),
        (
            "run.rs",
            "use crate::{cli, config::Config};\nfn f(_: cli::Args) {}",
        ),
    ]);
    assert_eq!(
        g.edges(),
        [
            edge("config", "cli"),
            edge("run", "cli"),
            edge("run", "config")
        ]
    );
    assert_eq!(g.cycles(), []);
}

#[test]
fn a_two_module_cycle_is_named_with_its_sites() {
    let g = graph(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::X;\npub fn f() {}"),
        ("b.rs", "pub struct X;\n\nfn g() { crate::a::f() }"),
    ]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].to_string(), "a -> b -> a (at a.rs:1, b.rs:3)");
}

#[test]
fn sibling_submodules_form_their_own_layer() {
    let g = graph(&[
        ("lib.rs", "mod explain;"),
        (
            "explain.rs",
            "mod ipset; mod rules; mod eval; pub struct NatRules;",
        ),
        ("explain/ipset.rs", "use super::rules::Rule;"),
        (
            "explain/rules.rs",
            "use crate::explain::ipset::Set;\npub struct Rule;",
        ),
        // Into the parent and out of the folder: no edge inside `explain`.
        (
            "explain/eval.rs",
            "use super::NatRules;\nuse crate::util::glob;",
        ),
        ("util.rs", "pub fn glob() {}"),
    ]);
    assert_eq!(
        g.edges(),
        [
            edge("explain", "util"),
            edge("explain::ipset", "explain::rules"),
            edge("explain::rules", "explain::ipset"),
        ]
    );
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(
        cycles[0].modules,
        ["explain::ipset", "explain::rules", "explain::ipset"]
    );
}

#[test]
fn comments_strings_and_tests_are_not_imports() {
    let g = graph(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "/// See [`crate::b::X`].\n// crate::b::X\nconst S: &str = \"crate::b::X\";\n\
             const R: &str = r#\"\"crate::b\"\"#;\nconst C: char = '\"';\n\n\
             #[cfg(test)]\nmod tests {\n    use crate::b::X;\n}",
        ),
        ("a/more_tests.rs", "use crate::b::X;"),
        ("b.rs", "use crate::a::S;\npub struct X;"),
    ]);
    assert_eq!(g.edges(), [edge("b", "a")]);
}

#[test]
fn nested_use_trees_and_super_chains_resolve() {
    let g = graph(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a/mod.rs", "mod deep;"),
        ("a/deep.rs", "use super::super::c::Z;"),
        ("b.rs", "use crate::{a::{self, deep::Y}, c::{Z, W}};"),
        ("c.rs", ""),
    ]);
    assert_eq!(g.edges(), [edge("a", "c"), edge("b", "a"), edge("b", "c")]);
}

/// Cycles that remain to be broken, as the checker names them (one per knot). The list only
/// shrinks: a new cycle fails, and so does a listed one that is gone (delete its line).
const KNOWN_CYCLES: [&str; 0] = [];

/// The workspace's crates, as the root Cargo.toml's `members` lists them (folders).
fn workspace_members() -> Vec<String> {
    let manifest = fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let list = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .and_then(|l| l.strip_suffix(']'))
        .expect("a one-line `members = [...]` in the workspace's Cargo.toml");
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn every_crate_of_the_workspace_is_checked() {
    let members = workspace_members();
    for krate in [
        "tracer-user",
        "tracer-ebpf",
        "xtask",
        "xtask/common",
        "tests/lab",
    ] {
        assert!(members.iter().any(|m| m == krate), "{members:?}");
    }
}

#[test]
fn the_crates_have_no_new_import_cycle() {
    let root = workspace_root();
    let mut found = Vec::new();
    for krate in workspace_members() {
        let cycles = check_crate(&root.join(&krate).join("src")).unwrap();
        found.extend(cycles.iter().map(|c| {
            let name = format!("{krate}: {}", c.modules.join(" -> "));
            (name, format!("{krate}: {c}"))
        }));
    }
    let new: Vec<&String> = found
        .iter()
        .filter(|(name, _)| !KNOWN_CYCLES.contains(&name.as_str()))
        .map(|(_, full)| full)
        .collect();
    assert!(
        new.is_empty(),
        "import cycles (make the lower module not import the higher one):\n{}",
        new.iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let gone: Vec<&str> = KNOWN_CYCLES
        .iter()
        .copied()
        .filter(|k| !found.iter().any(|(name, _)| name == k))
        .collect();
    assert!(
        gone.is_empty(),
        "broken cycles still listed in KNOWN_CYCLES: {gone:?}"
    );
}

#[test]
fn the_product_graph_is_not_empty() {
    let mut files = Vec::new();
    let src = workspace_root().join("tracer-user/src");
    collect_files(&src, &src, &mut files).unwrap();
    let edges = Graph::build(&files).edges();
    assert!(edges.contains(&edge("run", "attach")), "{edges:?}");
    assert!(edges.len() > 20, "{edges:?}");
}
