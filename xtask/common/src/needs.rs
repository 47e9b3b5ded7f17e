//! What root-tier tests need of the kernel, in one place: no test passes by returning early.
//! A test that needs what some kernels lack is named in [`NEEDS`]; the runners (`cargo xtask
//! integration-test` on the host, `cargo xtask vm-test` per guest kernel) skip it by name on
//! such a kernel (`--skip NAME`: counted in libtest's "N filtered out", and the runner says
//! why), and the test fails where it runs without it. A test that needs a boot of its own
//! (tests/tests/lockdown.rs: `lockdown=confidentiality`) is `#[ignore = "why"]` instead, and
//! the VM tier's lockdown boot runs it with `--include-ignored`. `cargo test` checks that no
//! `#[test]` function holds a bare `return` (this module's `no_test_returns_early`).

/// A kernel feature, the first release with it, and the root-tier tests that need it (names
/// as libtest's filters match them: a substring of the path, here the function's name, so
/// that moving a test to another module keeps it skipped).
#[derive(Debug)]
pub struct Need {
    pub what: &'static str,
    pub since: (u32, u32),
    pub tests: &'static [&'static str],
}

/// The first kernel with tcx links (Linux 6.6).
pub const TCX_SINCE: (u32, u32) = (6, 6);

/// What the root-tier tests need that the kernels they run on may lack. Each test fails on a
/// kernel without it; the runners skip it there.
pub const NEEDS: [Need; 2] = [
    // many_ifaces.rs (the bound on tcx links per interface name pattern) and safety.rs (its
    // test program attaches with a tcx link).
    Need {
        what: "tcx links",
        since: TCX_SINCE,
        tests: &[
            "many_veths_get_clsact_and_named_interfaces_keep_tcx",
            "many_veths_a_pod_added_while_following_gets_clsact",
            "many_veths_journeys_cross_clsact_and_tcx_interfaces",
            "many_veths_nothing_is_left_after_exit",
            "many_veths_filters_left_by_sigkill_are_swept_by_the_next_run",
            "many_veths_a_run_that_picks_tcx_still_sweeps_clsact_filters_left",
            "another_program_on_the_same_hook_counts_and_drops_the_same_with_and_without_pktrace",
        ],
    },
    // tracer-user's root-tier unit tests of the netfilter programs (nat/netfilter/tests.rs).
    Need {
        what: "BPF netfilter links",
        since: (6, 4),
        tests: &[
            "links_count_packets_in_a_new_namespace_until_dropped",
            "link_and_load_errors_say_why",
            "the_kernel_object_loads_and_its_brackets_pair_up",
        ],
    },
];

/// The running kernel's release (`/proc/sys/kernel/osrelease`, as `uname -r` prints it).
#[must_use]
pub fn running_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Whether the kernel `release` (`6.1.0-41-cloud-amd64`) is `since` (major, minor) or later;
/// false when it cannot be read.
#[must_use]
pub fn release_at_least(release: &str, since: (u32, u32)) -> bool {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= since
}

/// The harness arguments that skip the tests the kernel `release` cannot run (`--skip NAME`
/// for each test of each of [`NEEDS`] it lacks), said on stderr as `runner`.
#[must_use]
pub fn skip_args(runner: &str, release: &str) -> Vec<String> {
    let mut args = Vec::new();
    for need in NEEDS.iter().filter(|n| !release_at_least(release, n.since)) {
        let (major, minor) = need.since;
        eprintln!(
            "{runner}: kernel {release} has no {} (Linux {major}.{minor}+): skipping the {} \
             tests that need them: {}",
            need.what,
            need.tests.len(),
            need.tests.join(", ")
        );
        args.extend(
            need.tests
                .iter()
                .flat_map(|name| ["--skip".to_owned(), (*name).to_owned()]),
        );
    }
    args
}

#[cfg(test)]
mod tests {
    use std::{fs, path::Path};

    use super::*;

    #[test]
    fn reads_kernel_releases() {
        assert!(!release_at_least("5.10.0-32-cloud-amd64", TCX_SINCE));
        assert!(!release_at_least("6.1.0-41-cloud-arm64", TCX_SINCE));
        assert!(release_at_least("6.6.0", TCX_SINCE));
        assert!(release_at_least("6.12.74+deb12-cloud-amd64", TCX_SINCE));
        assert!(release_at_least("6.18.0-1-amd64\n", TCX_SINCE));
        assert!(!release_at_least("", TCX_SINCE));
        assert!(skip_args("test", "6.12.74+deb12-cloud-amd64").is_empty());
        let tcx = NEEDS[0].tests;
        assert_eq!(skip_args("test", "6.4.0").len(), 2 * tcx.len());
        let args = skip_args("test", "6.1.0-41-cloud-amd64");
        assert_eq!(args.len(), 2 * (tcx.len() + NEEDS[1].tests.len()));
        assert_eq!(args[..2], ["--skip", tcx[0]]);
    }

    /// The `.rs` files under `dir`, recursively.
    fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }

    /// `line` without its string literals' contents and its `//` comment.
    fn code_of(line: &str) -> String {
        let mut code = String::new();
        let (mut in_str, mut escaped) = (false, false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        in_str = false;
                        code.push(c);
                    }
                    _ => escaped = false,
                }
            } else if c == '"' {
                in_str = true;
                code.push(c);
            } else if c == '/' && chars.peek() == Some(&'/') {
                break;
            } else {
                code.push(c);
            }
        }
        code
    }

    /// The `#[test]` functions of `source` (rustfmt's layout: the body ends at the first `}`
    /// line indented as its `fn` line) with a bare `return` in their body: (name, line).
    fn early_returns(source: &str) -> Vec<(String, String)> {
        let lines: Vec<&str> = source.lines().collect();
        let mut found = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim() != "#[test]" {
                i += 1;
                continue;
            }
            let Some(start) = (i + 1..lines.len()).find(|&j| {
                let l = lines[j].trim_start();
                l.starts_with("fn ") || l.starts_with("pub fn ")
            }) else {
                break;
            };
            let head = lines[start].trim_start();
            let indent = lines[start].len() - head.len();
            let name = head
                .trim_start_matches("pub ")
                .trim_start_matches("fn ")
                .split(['(', '<'])
                .next()
                .unwrap_or_default()
                .to_owned();
            let close = format!("{}}}", " ".repeat(indent));
            let end = if head.trim_end().ends_with('}') {
                start
            } else {
                (start + 1..lines.len())
                    .find(|&j| lines[j] == close)
                    .unwrap_or(lines.len())
            };
            for line in lines.get(start + 1..end).unwrap_or_default() {
                let code = code_of(line);
                let code = code.trim();
                let bare = code == "return"
                    || ["return;", "return }", "return,", "return Ok(())"]
                        .iter()
                        .any(|r| code.contains(r));
                if bare {
                    found.push((name.clone(), line.trim().to_owned()));
                }
            }
            i = end + 1;
        }
        found
    }

    #[test]
    fn finds_bare_returns_in_test_bodies() {
        let source = [
            "#[test]",
            "fn skips() {",
            "    if x() {",
            "        return;",
            "    }",
            "}",
            "#[test]",
            "#[ignore = \"why\"]",
            "fn also() {",
            "    let Some(r) = run() else { return };",
            "}",
            "fn helper() {",
            "    return;",
            "}",
            "mod m {",
            "    #[test]",
            "    fn fine() {",
            "        assert!(x()); // return;",
            "    }",
            "    #[test]",
            "    fn empty() {}",
            "    #[test]",
            "    fn matched() -> Result<()> {",
            "        match a {",
            "            _ => return Ok(()),",
            "        }",
            "    }",
            "}",
        ]
        .join("\n");
        let found: Vec<String> = early_returns(&source)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(found, ["skips", "also", "matched"]);
    }

    /// No test of the workspace passes by returning early: a test that needs what a kernel
    /// may lack is skipped by name by the runners ([`NEEDS`]) or `#[ignore]`d, and fails
    /// where it runs without it.
    #[test]
    fn no_test_returns_early() {
        let root = crate::workspace_root();
        let mut files = Vec::new();
        for dir in ["tests", "tracer-user", "tracer-common", "xtask"] {
            sources(&root.join(dir), &mut files);
        }
        assert!(
            files.iter().any(|f| f.ends_with("tests/tests/lockdown.rs")),
            "the root tier's sources were not found under {}",
            root.display()
        );
        let mut found = Vec::new();
        for file in &files {
            let source = fs::read_to_string(file).unwrap_or_default();
            for (name, line) in early_returns(&source) {
                found.push(format!("{}: {name}: {line}", file.display()));
            }
        }
        assert!(
            found.is_empty(),
            "tests that return early (skip by name in xtask::needs or #[ignore = \"why\"], \
             and fail where the condition should hold):\n{}",
            found.join("\n")
        );
    }

    /// Every name in [`NEEDS`] is a test of the workspace (a renamed test would otherwise run,
    /// and fail, on kernels that lack what it needs).
    #[test]
    fn the_tests_named_in_needs_exist() {
        let root = crate::workspace_root();
        let mut files = Vec::new();
        for dir in ["tests", "tracer-user"] {
            sources(&root.join(dir), &mut files);
        }
        let text: String = files
            .iter()
            .map(|f| fs::read_to_string(f).unwrap_or_default())
            .collect();
        for name in NEEDS.iter().flat_map(|n| n.tests) {
            assert!(text.contains(&format!("fn {name}()")), "no test {name}");
        }
    }
}
