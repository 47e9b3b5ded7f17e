//! Running pktrace in the lab's node namespace and reading what it printed, plus the oracles:
//! the node's conntrack table and what the lab's servers saw.

use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_user::output::json::contract::{JourneyLine, Line, Point, StepLine, SummaryLine};
use xtask::lab::{NODE_NS, STATE_FILE, in_ns};

use crate::pktrace_bin;

/// Environment variable naming the `--nat-hook` every pktrace of the tests uses (unset: auto).
pub const NAT_HOOK_ENV: &str = "PKTRACE_TEST_NAT_HOOK";

/// True when the tests run with `--nat-hook conntrack`: NAT steps come from conntrack's events,
/// untimed (`latency_ns` null), and a connection's first packet is followed only up to its NAT
/// (README "What each hook needs").
#[must_use]
pub fn conntrack_hook() -> bool {
    std::env::var(NAT_HOOK_ENV).is_ok_and(|h| h == "conntrack")
}

/// How long [`tcp_request`] holds a connection open after the reply with `--nat-hook
/// conntrack`: half of [`EARLY_WITHIN_NS`], the most the tests allow pktrace to take to read
/// conntrack's report.
pub const CONNTRACK_HOLD: Duration = Duration::from_millis(500);

/// One TCP request from namespace `ns` to `addr` for a test that checks a connection's path.
/// With `--nat-hook conntrack` the connection is held open [`CONNTRACK_HOLD`] after the reply,
/// so that its last packets (the client's FIN and its answer) come after pktrace has read
/// conntrack's report and are seen whole: on a loaded machine the whole exchange (under a
/// millisecond in the lab) can otherwise be over before pktrace is scheduled.
///
/// # Errors
/// If the request fails ([`xtask::lab::client_tcp`]).
pub fn tcp_request(ns: &str, addr: &str) -> anyhow::Result<String> {
    if conntrack_hook() {
        xtask::lab::client_tcp_holding(ns, addr, CONNTRACK_HOLD)
    } else {
        xtask::lab::client_tcp(ns, addr)
    }
}

/// Environment variable choosing how every pktrace of the tests enters the lab namespace:
/// `nsenter` or `ip-netns-exec` (unset: `ip netns exec`).
pub const ENTRY_ENV: &str = "PKTRACE_TEST_ENTRY";

/// How pktrace enters the lab namespace it traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `ip netns exec NS`: also mounts a /sys of NS.
    IpNetnsExec,
    /// `nsenter --net=/run/netns/NS`: keeps the caller's mounts, so /sys shows another
    /// namespace (as on a node where pktrace runs in a pod's or the host's view).
    Nsenter,
}

/// Both ways of entering a namespace.
pub const ENTRIES: [Entry; 2] = [Entry::IpNetnsExec, Entry::Nsenter];

impl Entry {
    /// The entry [`ENTRY_ENV`] chooses.
    ///
    /// # Panics
    /// If it names no entry.
    #[must_use]
    pub fn from_env() -> Self {
        match std::env::var(ENTRY_ENV).as_deref() {
            Err(_) | Ok("" | "ip-netns-exec") => Self::IpNetnsExec,
            Ok("nsenter") => Self::Nsenter,
            Ok(other) => panic!("{ENTRY_ENV}={other}: use nsenter or ip-netns-exec"),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::IpNetnsExec => "ip-netns-exec",
            Self::Nsenter => "nsenter",
        }
    }

    /// `program args` in namespace `ns`, entered this way.
    #[must_use]
    pub fn command(
        self,
        ns: &str,
        program: impl AsRef<std::ffi::OsStr>,
        args: &[String],
    ) -> Command {
        match self {
            Self::IpNetnsExec => in_ns(ns, program, args),
            Self::Nsenter => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net=/run/netns/{ns}"))
                    .arg("--")
                    .arg(program)
                    .args(args);
                cmd
            }
        }
    }
}

/// How long pktrace may take to attach.
const READY_TIMEOUT: Duration = Duration::from_mins(1);
/// How long pktrace may take to exit after SIGINT.
const EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// A pktrace process in a lab namespace (`pkt-node` unless started with
/// [`Pktrace::start_in`]); killed (SIGKILL) on drop if still running.
pub struct Pktrace {
    child: Option<Child>,
    dir: PathBuf,
}

/// What a finished pktrace printed.
#[derive(Debug)]
pub struct Trace {
    pub status: ExitStatus,
    /// Every line as JSON.
    pub lines: Vec<Value>,
    /// The same lines as the JSON lines contract reads them (`tracer_user`'s own types).
    pub contract: Vec<Line>,
    pub stderr: String,
}

impl Pktrace {
    /// Starts `pktrace ARGS -o json --ready-file …` (no `-o json` when ARGS has `-o`) in the
    /// node namespace and waits until it has attached every hook. `--state-file` is the lab's
    /// unless given.
    #[must_use]
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// [`Pktrace::start`] with extra environment variables.
    #[must_use]
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut me = Self::spawn_with_env(args, env);
        me.wait_until_ready();
        me
    }

    /// [`Pktrace::start`] in another lab namespace (e.g. a second node's).
    #[must_use]
    pub fn start_in(ns: &str, args: &[&str]) -> Self {
        let mut me = Self::spawn_in(Entry::from_env(), ns, args, &[]);
        me.wait_until_ready();
        me
    }

    /// [`Pktrace::start_with_env`] entering the node namespace by `entry` (whatever
    /// [`ENTRY_ENV`] says).
    #[must_use]
    pub fn start_entered(entry: Entry, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut me = Self::spawn_in(entry, NODE_NS, args, env);
        me.wait_until_ready();
        me
    }

    /// Starts pktrace like [`Pktrace::start_with_env`] without waiting for it to attach.
    #[must_use]
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_in(Entry::from_env(), NODE_NS, args, env)
    }

    fn spawn_in(entry: Entry, ns: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempdir();
        let ready = dir.join("ready");
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        if !args.contains(&"--state-file") {
            full.extend(["--state-file".into(), STATE_FILE.into()]);
        }
        // The VM tier runs the same tests once per NAT hook.
        if let Ok(hook) = std::env::var(NAT_HOOK_ENV)
            && !args.contains(&"--nat-hook")
        {
            full.extend(["--nat-hook".into(), hook]);
        }
        // JSON unless the test asked for another output (read with `stop_raw`).
        if !args.contains(&"-o") {
            full.extend(["-o".into(), "json".into()]);
        }
        full.extend(["--ready-file".into(), ready.display().to_string()]);
        let mut cmd = entry.command(ns, pktrace_bin(), &full);
        cmd.envs(env.iter().copied());
        cmd.stdout(file(&dir, "stdout"))
            .stderr(file(&dir, "stderr"))
            .stdin(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting pktrace {full:?}: {e}"));
        Self {
            child: Some(child),
            dir,
        }
    }

    /// True once pktrace has attached every hook (its ready file exists).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.dir.join("ready").exists()
    }

    /// What pktrace has printed on stdout so far.
    #[must_use]
    pub fn stdout_so_far(&self) -> String {
        fs::read_to_string(self.dir.join("stdout")).unwrap_or_default()
    }

    /// Waits until pktrace has attached every hook; panics if it exits first or takes too long.
    ///
    /// # Panics
    /// If pktrace exits before it is ready, or is not ready within `READY_TIMEOUT`.
    pub fn wait_until_ready(&mut self) {
        let ready = self.dir.join("ready");
        let start = Instant::now();
        while !ready.exists() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "pktrace exited before it was ready ({status}):\n{}",
                    self.stderr()
                );
            }
            assert!(
                start.elapsed() < READY_TIMEOUT,
                "pktrace not ready after {READY_TIMEOUT:?}:\n{}",
                self.stderr()
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// pktrace's process id (as seen from the root namespace: `ip netns exec` and `nsenter`
    /// exec).
    #[must_use]
    pub fn pid(&self) -> i32 {
        self.child
            .as_ref()
            .map_or(0, |c| i32::try_from(c.id()).unwrap_or(0))
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// What the running pktrace printed on stderr so far.
    #[must_use]
    pub fn stderr_so_far(&self) -> String {
        self.stderr()
    }

    /// The complete `journey` lines the running pktrace printed so far, typed (lines that are
    /// not yet complete, or not of the contract, are left out).
    #[must_use]
    pub fn journeys_so_far(&self) -> Vec<JourneyLine> {
        let out = fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        let complete = out.rfind('\n').map_or("", |end| &out[..end]);
        complete
            .lines()
            .filter_map(|l| match Line::parse(l) {
                Ok(Line::Journey(j)) => Some(j),
                _ => None,
            })
            .collect()
    }

    /// Whether the process still runs.
    #[must_use]
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Sends `signal` and waits for the exit; returns what was printed.
    ///
    /// # Panics
    /// If pktrace does not exit within `EXIT_TIMEOUT` of the signal, or stdout is not the JSON
    /// lines contract ([`Trace::from_output`]).
    #[must_use]
    pub fn stop_with(mut self, signal: i32) -> Trace {
        let status = self.stop_status(signal);
        self.finish(status)
    }

    /// SIGINT and wait, for a pktrace started with its own `-o` (not JSON): the exit status
    /// and stdout as printed.
    ///
    /// # Panics
    /// If pktrace does not exit within `EXIT_TIMEOUT` of the signal.
    #[must_use]
    pub fn stop_raw(mut self) -> (ExitStatus, String) {
        let status = self.stop_status(libc::SIGINT);
        (status, self.stdout_so_far())
    }

    fn stop_status(&mut self, signal: i32) -> ExitStatus {
        // Let the collector's timer drain the last events and close idle journeys.
        sleep(Duration::from_millis(300));
        let mut child = self.child.take().expect("running");
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(i32::try_from(child.id()).unwrap_or(0), signal) };
        let start = Instant::now();
        loop {
            if let Some(s) = child.try_wait().expect("wait") {
                return s;
            }
            if start.elapsed() > EXIT_TIMEOUT {
                let _ = child.kill();
                panic!(
                    "pktrace did not exit {EXIT_TIMEOUT:?} after signal {signal}:\n{}",
                    self.stderr()
                );
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGKILL at once (no grace period) and reaps the process.
    ///
    /// # Panics
    /// If waiting for the killed process fails.
    #[must_use]
    pub fn kill_now(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        child.wait().expect("wait")
    }

    /// Sends `signal` without waiting for the exit.
    pub fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: plain kill(2) on our own child.
            unsafe { libc::kill(i32::try_from(child.id()).unwrap_or(0), signal) };
        }
    }

    /// SIGINT (Ctrl-C) and wait.
    #[must_use]
    pub fn stop(self) -> Trace {
        self.stop_with(libc::SIGINT)
    }

    /// Waits for pktrace to exit by itself (`-c`, `-d`).
    ///
    /// # Panics
    /// If pktrace still runs after `limit`, or stdout is not the JSON lines contract
    /// ([`Trace::from_output`]).
    #[must_use]
    pub fn wait(mut self, limit: Duration) -> Trace {
        let mut child = self.child.take().expect("running");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                panic!("pktrace still running after {limit:?}:\n{}", self.stderr());
            }
            sleep(Duration::from_millis(20));
        };
        self.finish(status)
    }

    fn finish(&self, status: ExitStatus) -> Trace {
        let out = fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        Trace::from_output(status, &out, self.stderr())
    }
}

impl Drop for Pktrace {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn tempdir() -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pktrace-test-{}-{n}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn file(dir: &std::path::Path, name: &str) -> fs::File {
    fs::File::create(dir.join(name)).expect("output file")
}

impl Trace {
    /// What pktrace printed on stdout, every line of which must be JSON and read as the JSON
    /// lines contract (line types the contract does not know are allowed).
    ///
    /// # Panics
    /// If a stdout line is not JSON, or not a line of the contract.
    #[must_use]
    pub fn from_output(status: ExitStatus, stdout: &str, stderr: String) -> Self {
        let lines = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        let contract = stdout
            .lines()
            .map(|l| {
                Line::parse(l).unwrap_or_else(|e| panic!("not a line of the contract ({e}): {l}"))
            })
            .collect();
        Self {
            status,
            lines,
            contract,
            stderr,
        }
    }

    /// The `journey` lines.
    #[must_use]
    pub fn journeys(&self) -> Vec<&JourneyLine> {
        self.contract
            .iter()
            .filter_map(|c| match c {
                Line::Journey(j) => Some(j),
                _ => None,
            })
            .collect()
    }

    /// The summary line; it must be the last line.
    ///
    /// # Panics
    /// If the last line is not the summary.
    #[must_use]
    pub fn summary(&self) -> &SummaryLine {
        match self.contract.last() {
            Some(Line::Summary(s)) => s,
            other => panic!(
                "the summary must come last, not {other:?}; stderr:\n{}",
                self.stderr
            ),
        }
    }

    /// Journeys whose first step saw the packet as `src` → `dst`.
    #[must_use]
    pub fn starting(&self, src: &str, dst: &str) -> Vec<&JourneyLine> {
        self.journeys()
            .into_iter()
            .filter(|j| j.steps[0].src == src && j.steps[0].dst == dst)
            .collect()
    }

    /// The journeys that start with a NAT step rewriting `src` → `dst` (with `--nat-hook
    /// conntrack`: a reply that came back before pktrace had read conntrack's report, seen only
    /// from where it carries a traced address again).
    #[must_use]
    pub fn starting_at_nat(&self, src: &str, dst: &str) -> Vec<&JourneyLine> {
        self.journeys()
            .into_iter()
            .filter(|j| {
                let s = &j.steps[0];
                s.point.is_nat()
                    && s.orig_src.as_deref() == Some(src)
                    && s.orig_dst.as_deref() == Some(dst)
            })
            .collect()
    }

    /// Everything for a failure message.
    #[must_use]
    pub fn dump(&self) -> String {
        let lines: Vec<String> = self.lines.iter().map(Value::to_string).collect();
        format!(
            "status {}\nstderr:\n{}\nstdout:\n{}",
            self.status,
            self.stderr,
            lines.join("\n")
        )
    }
}

/// A step's point as the contract writes it.
#[must_use]
pub const fn point_name(point: Point) -> &'static str {
    match point {
        Point::Ingress => "ingress",
        Point::Egress => "egress",
        Point::Dnat => "dnat",
        Point::Snat => "snat",
        Point::Drop => "drop",
    }
}

/// A tc step's interface (`None` for NAT steps and for an interface gone before its name
/// could be read).
#[must_use]
pub fn iface(step: &StepLine) -> Option<&str> {
    step.iface.as_ref()?.as_deref()
}

/// A step as (point, iface or "-", reply).
#[must_use]
pub fn shape(journey: &JourneyLine) -> Vec<(String, String, bool)> {
    journey
        .steps
        .iter()
        .map(|s| {
            (
                point_name(s.point).to_owned(),
                iface(s).unwrap_or("-").to_owned(),
                s.reply.unwrap_or(false),
            )
        })
        .collect()
}

/// The NAT steps of a journey.
#[must_use]
pub fn nat_steps(journey: &JourneyLine) -> Vec<&StepLine> {
    journey.steps.iter().filter(|s| s.point.is_nat()).collect()
}

/// The NAT steps of a journey as (point, reply).
fn nat_shape(journey: &JourneyLine) -> Vec<(String, bool)> {
    nat_steps(journey)
        .iter()
        .map(|s| (point_name(s.point).to_owned(), s.reply.unwrap_or(false)))
        .collect()
}

/// One conntrack entry: the original and reply tuples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtEntry {
    pub proto: String,
    pub orig_src: String,
    pub orig_dst: String,
    pub orig_sport: String,
    pub orig_dport: String,
    pub reply_src: String,
    pub reply_dst: String,
    pub reply_sport: String,
    pub reply_dport: String,
}

impl CtEntry {
    /// `ip:port` (IPv6: `[ip]:port`), or `ip` for ICMP, as the JSON lines write endpoints.
    fn endpoint(&self, ip: &str, port: &str) -> String {
        if self.proto == "icmp" || self.proto == "icmpv6" {
            ip.to_owned()
        } else if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        }
    }
    #[must_use]
    pub fn orig_src_ep(&self) -> String {
        self.endpoint(&self.orig_src, &self.orig_sport)
    }
    #[must_use]
    pub fn orig_dst_ep(&self) -> String {
        self.endpoint(&self.orig_dst, &self.orig_dport)
    }
    #[must_use]
    pub fn reply_src_ep(&self) -> String {
        self.endpoint(&self.reply_src, &self.reply_sport)
    }
    #[must_use]
    pub fn reply_dst_ep(&self) -> String {
        self.endpoint(&self.reply_dst, &self.reply_dport)
    }
}

/// The node's conntrack table (`conntrack -L` in `pkt-node`).
///
/// # Panics
/// If `conntrack -L` cannot be run in the node's namespace.
#[must_use]
pub fn conntrack() -> Vec<CtEntry> {
    conntrack_of("ipv4")
}

/// The node's conntrack table of `family` (`conntrack -L -f ipv4|ipv6` in `pkt-node`).
///
/// # Panics
/// If `conntrack -L` cannot be run in the node's namespace.
#[must_use]
pub fn conntrack_of(family: &str) -> Vec<CtEntry> {
    let out = Command::new("ip")
        .args(["netns", "exec", NODE_NS, "conntrack", "-L", "-f", family])
        .stderr(Stdio::null())
        .output()
        .expect("conntrack -L");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(parse_ct_line)
        .collect()
}

/// Parses one `conntrack -L` line.
#[must_use]
pub fn parse_ct_line(line: &str) -> Option<CtEntry> {
    let mut e = CtEntry {
        proto: line.split_whitespace().next()?.to_owned(),
        ..CtEntry::default()
    };
    let (mut src, mut dst, mut sport, mut dport) = (0, 0, 0, 0);
    for word in line.split_whitespace() {
        let Some((k, v)) = word.split_once('=') else {
            continue;
        };
        let v = v.to_owned();
        match k {
            "src" => {
                if src == 0 {
                    e.orig_src = v;
                } else {
                    e.reply_src = v;
                }
                src += 1;
            }
            "dst" => {
                if dst == 0 {
                    e.orig_dst = v;
                } else {
                    e.reply_dst = v;
                }
                dst += 1;
            }
            "sport" | "id" => {
                if sport == 0 {
                    e.orig_sport.clone_from(&v);
                } else {
                    e.reply_sport.clone_from(&v);
                }
                if k == "id" {
                    if dport == 0 {
                        e.orig_dport = v;
                    } else {
                        e.reply_dport = v;
                    }
                    dport += 1;
                }
                sport += 1;
            }
            "dport" => {
                if dport == 0 {
                    e.orig_dport = v;
                } else {
                    e.reply_dport = v;
                }
                dport += 1;
            }
            _ => {}
        }
    }
    (src == 2 && dst == 2).then_some(e)
}

/// The conntrack entry whose original direction is `src_ip` → `dst` (`ip:port`, or `ip` for
/// ICMP); panics with the table when there is none.
///
/// # Panics
/// If the table has no such entry.
#[must_use]
pub fn ct_entry(src_ip: &str, dst: &str) -> CtEntry {
    let family = if src_ip.contains(':') { "ipv6" } else { "ipv4" };
    let all = conntrack_of(family);
    all.iter()
        .find(|e| e.orig_src == src_ip && (e.orig_dst_ep() == dst))
        .cloned()
        .unwrap_or_else(|| panic!("no conntrack entry {src_ip} -> {dst} in {all:#?}"))
}

/// With `--nat-hook conntrack`, the packets of a connection that NAT takes away from the traced
/// addresses (MASQUERADE) are followed in the kernel only once pktrace has read conntrack's
/// report of the connection, which comes after its first packet has left (README "What each
/// hook needs"): the journeys of the packets before that end with their NAT steps (built from
/// the report), and replies before that start with them. Splits `journeys` (one direction of
/// one connection) into those early ones and the whole ones, and checks that the early ones
/// came first, within [`EARLY_WITHIN_NS`] of the first, and that at least one whole one
/// follows. How many are early depends on how soon pktrace reads the report (in the lab the
/// first round trip takes tens of microseconds: one to three packets each way).
///
/// # Panics
/// If the early journeys do not come first, within [`EARLY_WITHIN_NS`] of the first, or no
/// whole journey follows them.
#[must_use]
pub fn split_early<'a>(
    journeys: &[&'a JourneyLine],
) -> (Vec<&'a JourneyLine>, Vec<&'a JourneyLine>) {
    let is_nat = |s: &StepLine| s.point.is_nat();
    let (early, whole): (Vec<&JourneyLine>, Vec<&JourneyLine>) = by_start(journeys)
        .into_iter()
        .partition(|j| j.steps.first().is_some_and(is_nat) || j.steps.last().is_some_and(is_nat));
    let dump = || {
        journeys
            .iter()
            .map(|j| format!("{j:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        !whole.is_empty(),
        "no whole journey once conntrack's report was read:\n{}",
        dump()
    );
    let start = |j: &JourneyLine| j.start_ktime_ns.unwrap_or(0);
    let first_whole = whole.iter().map(|j| start(j)).min().unwrap_or(0);
    assert!(
        early.iter().all(|j| start(j) < first_whole),
        "an early journey after a whole one:\n{}",
        dump()
    );
    let first = journeys.iter().map(|j| start(j)).min().unwrap_or(0);
    assert!(
        early.iter().all(|j| start(j) - first < EARLY_WITHIN_NS),
        "an early journey {EARLY_WITHIN_NS} ns after the first packet:\n{}",
        dump()
    );
    (early, whole)
}

/// How long after a connection's first packet pktrace may take to read conntrack's report of
/// it and follow the connection (`--nat-hook conntrack`; it reads it at once, in well under a
/// millisecond when idle: this bounds a loaded machine).
pub const EARLY_WITHIN_NS: u64 = 1_000_000_000;

/// Checks the journeys of one direction of a connection NAT takes away from the traced
/// addresses (MASQUERADE): each goes from `first` through `nat` to `last` ([`assert_path`]),
/// except, with `--nat-hook conntrack`, the earliest ones ([`split_early`]), which must still
/// have the NAT steps `nat`.
///
/// # Panics
/// If a journey does not take that path ([`assert_path`]) or an early one lacks the NAT steps.
pub fn assert_masqueraded(
    journeys: &[&JourneyLine],
    (first, last): (&str, &str),
    nat: &[(&str, bool)],
    middle: &[&str],
) {
    let (early, whole) = if conntrack_hook() {
        split_early(journeys)
    } else {
        (Vec::new(), journeys.to_vec())
    };
    for j in whole {
        assert_path(j, first, nat, last, middle);
    }
    let want: Vec<(String, bool)> = nat.iter().map(|(p, r)| ((*p).to_owned(), *r)).collect();
    for j in early {
        assert_eq!(nat_shape(j), want, "NAT steps of an early journey: {j:?}");
    }
}

/// The journeys in the order their packets entered the node.
#[must_use]
pub fn by_start<'a>(journeys: &[&'a JourneyLine]) -> Vec<&'a JourneyLine> {
    let mut out = journeys.to_vec();
    out.sort_by_key(|j| j.start_ktime_ns.unwrap_or(0));
    out
}

/// Checks the first step, the NAT steps and that each step saw the packet the one before left;
/// the steps before `end` are on `middle` interfaces.
fn check_path(j: &JourneyLine, first: &str, nat: &[(&str, bool)], middle: &[&str], end: usize) {
    let steps = &j.steps;
    assert_eq!(
        (steps[0].point, iface(&steps[0])),
        (Point::Ingress, Some(first)),
        "{j:?}"
    );
    let want_nat: Vec<(String, bool)> = nat.iter().map(|(p, r)| ((*p).to_owned(), *r)).collect();
    assert_eq!(nat_shape(j), want_nat, "NAT steps of {j:?}");
    let mut current = (steps[0].src.as_str(), steps[0].dst.as_str());
    for (i, s) in steps.iter().enumerate().skip(1) {
        if s.point.is_nat() {
            assert_eq!(
                (
                    s.orig_src.as_deref().unwrap_or(""),
                    s.orig_dst.as_deref().unwrap_or("")
                ),
                current,
                "NAT step {i} rewrote another packet: {j:?}"
            );
            current = (s.src.as_str(), s.dst.as_str());
        } else {
            assert_eq!(
                (s.src.as_str(), s.dst.as_str()),
                current,
                "step {i} saw another packet: {j:?}"
            );
            let iface = iface(s).unwrap_or("");
            if i + 1 < end {
                assert!(
                    middle.contains(&iface),
                    "unexpected interface {iface} at step {i}: {j:?}"
                );
            }
        }
    }
}

/// Checks one journey's path: it enters on `first` (ingress), leaves on `last` (egress), its
/// NAT steps are exactly `nat` (point, reply) in that order, every other step is a tc step on
/// one of `middle`, and each step's packet follows from the step before (a NAT step rewrites
/// exactly the packet the previous step saw). Which middle interfaces appear depends on the
/// kernel path (with `br_netfilter` a DNAT to a pod on the same bridge is bridged, not routed).
///
/// # Panics
/// If the journey does not take that path.
pub fn assert_path(
    j: &JourneyLine,
    first: &str,
    nat: &[(&str, bool)],
    last: &str,
    middle: &[&str],
) {
    let steps = &j.steps;
    assert!(steps.len() >= 2, "too short: {j:?}");
    let end = &steps[steps.len() - 1];
    assert_eq!(
        (end.point, iface(end)),
        (Point::Egress, Some(last)),
        "{j:?}"
    );
    check_path(j, first, nat, middle, steps.len());
}
