//! A rule source the node uses that cannot be read is one stderr line naming the tool and
//! what is lost, once however often the rules are re-read, and the other sources go on
//! naming rules. The node's legacy iptables backend is made to hold a nat table; pktrace runs
//! with a PATH where `iptables-legacy-save` is missing, then failing.

use std::{
    fs,
    os::unix::fs::{PermissionsExt as _, symlink},
    path::{Path, PathBuf},
    thread::sleep,
    time::Duration,
};

use tests::{LabGuard, trace::Pktrace};
use xtask::lab::{self, NODE_NS, UBUNTU, in_ns};

/// Long enough for the poller to re-read the rules twice (every 2 s with a legacy table).
const TRACE_FOR: Duration = Duration::from_millis(5500);
const TOOL: &str = "iptables-legacy-save";

/// A directory holding every program of the system's bin directories but `TOOL`, plus
/// `extra` (name, shell script); removed on drop.
struct Path_(PathBuf);

impl Path_ {
    fn without_tool(tag: &str, extra: Option<&str>) -> Self {
        let dir = std::env::temp_dir().join(format!("pktrace-path-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("path dir");
        for bin in [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ] {
            for entry in fs::read_dir(bin).into_iter().flatten().flatten() {
                let name = entry.file_name();
                if name != TOOL && !dir.join(&name).exists() {
                    let _ = symlink(entry.path(), dir.join(&name));
                }
            }
        }
        if let Some(script) = extra {
            let path = dir.join(TOOL);
            fs::write(&path, script).expect("script");
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Path_ {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// pktrace's stderr while the ubuntu pod reaches the internet, and whether its SNAT step still
/// named ip-masq-agent's rule (read by iptables-nft-save).
fn trace_with_path(path: &Path) -> (String, bool) {
    let env = [("PATH", path.to_str().expect("utf-8 path"))];
    let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "-d", "30"], &env);
    lab::client_tcp(&UBUNTU.netns(), "203.0.113.80:80").expect("internet from ubuntu");
    sleep(TRACE_FOR);
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let named = trace.journeys().iter().any(|j| {
        tests::trace::nat_steps(j).iter().any(|s| {
            s.point == tracer_user::output::json::contract::Point::Snat
                && s.rule.as_deref() == Some("IP-MASQ-AGENT")
        })
    });
    (trace.stderr, named)
}

#[test]
#[expect(
    clippy::similar_names,
    reason = "`names` and `named`: the tables present and the table stderr named"
)]
fn a_lost_rule_source_is_said_once_and_the_others_go_on() {
    let _lab = LabGuard::new();
    // Listing the legacy nat table creates it: the kernel now runs (an empty) one.
    let ok = in_ns(NODE_NS, "iptables-legacy", ["-t", "nat", "-S"])
        .output()
        .expect("iptables-legacy");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let names = in_ns(NODE_NS, "cat", ["/proc/net/ip_tables_names"])
        .output()
        .expect("cat");
    assert!(
        String::from_utf8_lossy(&names.stdout)
            .lines()
            .any(|l| l == "nat")
    );

    let missing = Path_::without_tool("missing", None);
    let (stderr, named) = trace_with_path(missing.path());
    let want = "pktrace: iptables-legacy-save: not installed; the legacy iptables nat table's \
                rules (the kernel holds one) will not be named";
    assert_eq!(stderr.lines().filter(|l| *l == want).count(), 1, "{stderr}");
    assert_eq!(stderr.matches(TOOL).count(), 1, "said once: {stderr}");
    assert!(
        named,
        "iptables-nft-save's rules still name the SNAT: {stderr}"
    );
    // nft is not installed here and the kernel holds no native nftables table: not said.
    assert!(!stderr.contains("pktrace: nft:"), "{stderr}");

    let failing = Path_::without_tool(
        "failing",
        Some(
            "#!/bin/sh\necho \"iptables-legacy-save: can't initialize: Permission denied\" >&2\nexit 1\n",
        ),
    );
    let (stderr, named) = trace_with_path(failing.path());
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pktrace: iptables-legacy-save:"))
        .collect();
    assert_eq!(failed.len(), 1, "{stderr}");
    assert!(
        failed[0].starts_with("pktrace: iptables-legacy-save: `iptables-legacy-save -t nat` failed (exit status: 1): iptables-legacy-save: can't initialize: Permission denied; the legacy iptables nat table's rules"),
        "{stderr}"
    );
    assert!(named, "{stderr}");
}
