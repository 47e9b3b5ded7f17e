//! The static binary that ships (`cargo xtask dist`, `x86_64` musl) runs in the lab
//! like the development build: `--pod ubuntu` traces a TCP connection to the ClusterIP with
//! its DNAT step. Prints its size and start-up time (start → ready file) for
//! docs/TESTING.md ("The release binary").

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{
    LabGuard, dist_bin, pktrace_bin,
    trace::{Trace, assert_path, ct_entry, nat_steps},
};
use tracer_user::output::json::contract::Line;
use xtask::lab::{self, NODE_NS, PODS, STATE_FILE, UBUNTU, in_ns};

const POD_VETH: &str = "azv47c3ee9d512";
const CLUSTER_IP: &str = "10.0.159.58:80";

#[test]
fn dist_binary_is_static_and_reports_its_build() {
    let bin = dist_bin();
    let bytes = fs::read(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(
        xtask::dist::is_static_elf(&bytes).unwrap(),
        "{} needs a dynamic loader",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .expect("pktrace --version");
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{version}");
    let hash = version
        .split("eBPF object sha256:")
        .nth(1)
        .unwrap_or("")
        .trim_end_matches([')', '\n']);
    assert!(version.starts_with("pktrace 0.1.0 (commit "), "{version}");
    assert!(
        hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{version}"
    );
    assert_ne!(
        hash, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "an empty eBPF object"
    );
}

/// A started pktrace: the child, its files, how long it took to be ready.
struct Started {
    child: std::process::Child,
    dir: PathBuf,
    startup: Duration,
}

impl Started {
    fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// SIGINT, wait, and what it printed.
    fn stop(mut self) -> Trace {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGINT) };
        let status = self.child.wait().expect("wait");
        let out = fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        let trace = Trace::from_output(status, &out, self.stderr());
        fs::remove_dir_all(&self.dir).ok();
        trace
    }
}

/// Starts `bin --pod ubuntu --follow -o json` in the node namespace and times exec → ready
/// file.
fn start(bin: &Path, run: usize) -> Started {
    let dir = std::env::temp_dir().join(format!("pktrace-dist-{}-{run}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let ready = dir.join("ready");
    let args = [
        "--pod",
        "ubuntu",
        "--follow",
        "--state-file",
        STATE_FILE,
        "-o",
        "json",
    ];
    let begin = Instant::now();
    let child = in_ns(
        NODE_NS,
        bin,
        args.iter()
            .copied()
            .chain(["--ready-file", ready.to_str().unwrap()]),
    )
    .stdout(fs::File::create(dir.join("stdout")).unwrap())
    .stderr(fs::File::create(dir.join("stderr")).unwrap())
    .stdin(Stdio::null())
    .spawn()
    .expect("starting the dist binary");
    let mut started = Started {
        child,
        dir,
        startup: Duration::ZERO,
    };
    while !ready.exists() {
        if let Some(status) = started.child.try_wait().unwrap() {
            panic!(
                "pktrace exited before it was ready ({status}):\n{}",
                started.stderr()
            );
        }
        assert!(
            begin.elapsed() < Duration::from_mins(1),
            "not ready after 60 s:\n{}",
            started.stderr()
        );
        sleep(Duration::from_millis(2));
    }
    started.startup = begin.elapsed();
    started
}

#[test]
fn dist_binary_traces_pod_ubuntu_to_the_cluster_ip_with_its_dnat() {
    let bin = dist_bin();
    let size = fs::metadata(&bin).map_or(0, |m| m.len());
    let _lab = LabGuard::new();
    // Start-up three times (the last one traces), and the development (glibc) build three
    // times for comparison; docs/TESTING.md quotes the medians.
    let mut times = Vec::new();
    for run in 0..2 {
        let s = start(&bin, run);
        times.push(s.startup);
        assert!(s.stop().status.success());
    }
    let mut glibc = Vec::new();
    for run in 3..6 {
        let s = start(&pktrace_bin(), run);
        glibc.push(s.startup);
        assert!(s.stop().status.success());
    }
    let pk = start(&bin, 2);
    times.push(pk.startup);
    for t in [&mut times, &mut glibc] {
        t.sort();
    }
    eprintln!(
        "dist: {} ({size} bytes), start-up (exec → ready file) median {:?} ({:?}–{:?}); \
         glibc build {} median {:?} ({:?}–{:?})",
        bin.display(),
        times[1],
        times[0],
        times[2],
        pktrace_bin().display(),
        glibc[1],
        glibc[0],
        glibc[2]
    );

    let seen =
        lab::client_tcp(&UBUNTU.netns(), CLUSTER_IP).unwrap_or_else(|e| panic!("tcp: {e:#}"));
    sleep(Duration::from_millis(300));
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());

    let ct = ct_entry("10.13.76.46", CLUSTER_IP);
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the backend saw the pod"
    );
    let backend_veth = PODS
        .iter()
        .find(|p| p.ip.to_string() == ct.reply_src)
        .map(|p| p.host_if)
        .expect("the backend is a lab pod");
    let orig = trace.starting(&ct.orig_src_ep(), CLUSTER_IP);
    assert!(
        !orig.is_empty(),
        "no journey from the pod\n{}",
        trace.dump()
    );
    for j in &orig {
        assert_path(j, POD_VETH, &[("dnat", false)], backend_veth, &["azure0"]);
        let dnat = &nat_steps(j)[0];
        assert_eq!(dnat.orig_dst.as_deref(), Some(CLUSTER_IP), "{j:?}");
        assert_eq!(
            dnat.dst,
            ct.reply_src_ep(),
            "DNAT to conntrack's backend: {j:?}"
        );
        // What `pktrace merge` joins nodes by.
        assert!(j.start_ktime_ns.is_some_and(|t| t > 0), "{j:?}");
        assert!(j.steps.iter().all(|s| s.ip_id.is_some()), "{j:?}");
    }
    merge_reads_real_output(&bin, &trace);
}

/// `pktrace merge` takes this real output (one node: nothing to link) and keeps every journey.
fn merge_reads_real_output(bin: &Path, trace: &Trace) {
    let file = std::env::temp_dir().join(format!("pktrace-dist-{}.jsonl", std::process::id()));
    let text: Vec<String> = trace.lines.iter().map(ToString::to_string).collect();
    fs::write(&file, text.join("\n")).unwrap();
    let out = Command::new(bin)
        .arg("merge")
        .arg(format!("lab={}", file.display()))
        .output()
        .unwrap();
    fs::remove_file(&file).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Line> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| Line::parse(l).expect(l))
        .collect();
    let (merge, journeys) = lines.split_last().expect("output");
    let Line::Merge(merge) = merge else {
        panic!("the last line is not the merge line: {merge:?}")
    };
    assert_eq!(
        merge.journeys_in,
        trace.journeys().len() as u64,
        "{merge:?}"
    );
    assert_eq!(journeys.len(), trace.journeys().len());
    assert!(journeys.iter().all(|j| match j {
        Line::Journey(j) => j.steps.iter().all(|s| s.node.as_deref() == Some("lab")),
        _ => false,
    }));
}
