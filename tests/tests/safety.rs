//! Issue 6: pktrace must not make a sick node worse. Each test proves one guarantee of the
//! README's "Safety" section in the lab: SIGKILL at random points leaves nothing behind,
//! another program on the same hook keeps its counts and drops, a flood that overruns the ring
//! buffer keeps the node forwarding with bounded memory and reported losses, and after
//! attaching pktrace holds only the capabilities it needs, listens nowhere, and refuses
//! clearly when it may not run.

/// Named so that `cargo xtask integration-test -- safety` selects these tests.
mod safety {

    use std::{
        collections::BTreeSet,
        fs,
        io::ErrorKind,
        net::{SocketAddr, TcpStream, UdpSocket},
        os::fd::AsRawFd as _,
        process::Stdio,
        sync::{
            Arc, OnceLock,
            atomic::{AtomicBool, AtomicU64, Ordering},
        },
        thread::{self, sleep},
        time::{Duration, Instant},
    };

    use tests::{
        LabGuard,
        leftovers::{
            kernel_has_tcx, our_filters, ours_loaded_after_settling, require_tcx, tagged_pid,
            tc_snapshot,
        },
        pktrace_bin,
        rawbpf::{CountingProgram, enter_netns, ifindex, in_netns},
        trace::{Pktrace, Trace},
    };
    use tracer_user::output::json::contract::{EvictedFlowsLine, Line, LossLine, Point};
    use xtask::lab::{self, NODE_NS, UBUNTU, in_ns, topology::VNET_HOST};

    const FORCE_CLSACT: (&str, &str) = ("PKTRACE_FORCE_CLSACT", "1");
    /// tcx everywhere, whatever pktrace's default would choose for the lab's interfaces.
    const FORCE_TCX: (&str, &str) = ("PKTRACE_FORCE_TCX", "1");
    /// The VNet host, reached from the pod without NAT.
    const VNET_IP: &str = "10.13.1.4";

    // ---------------------------------------------------------------------------------------------
    // What the kernel holds of ours.

    /// A clsact qdisc someone else created; removed on drop.
    struct ForeignQdisc(&'static str);

    impl ForeignQdisc {
        fn add(iface: &'static str) -> Self {
            let ok = in_ns(NODE_NS, "tc", ["qdisc", "add", "dev", iface, "clsact"])
                .status()
                .expect("tc");
            assert!(
                ok.success(),
                "could not pre-create a clsact qdisc on {iface}"
            );
            Self(iface)
        }
    }

    impl Drop for ForeignQdisc {
        fn drop(&mut self) {
            let _ = in_ns(NODE_NS, "tc", ["qdisc", "del", "dev", self.0, "clsact"]).status();
        }
    }

    /// xorshift64*: random points that a seed reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
        }
    }

    #[expect(
        clippy::cast_possible_truncation,
        reason = "a seed: the low 64 bits of the clock's nanoseconds are enough"
    )]
    fn seed() -> u64 {
        std::env::var("PKTRACE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            })
    }

    // ---------------------------------------------------------------------------------------------
    // 1. Never leave anything behind.

    /// Kills per attachment mode.
    const KILLS: usize = 20;
    /// The whole random-kill test must end within this.
    const KILL_TEST_LIMIT: Duration = Duration::from_mins(10);

    #[derive(Clone, Copy, Debug)]
    enum Phase {
        Attach,
        Traffic,
        Detach,
    }

    /// What one kill left: our filters (with the PID they must carry), the next pktrace's
    /// output (clsact only: it sweeps them), then what the kernel held of ours.
    struct Kill {
        /// `mode kill i (phase, seed)`, for messages.
        what: String,
        pid: u32,
        filters: Vec<(String, u32)>,
        next: Option<Trace>,
        loaded: Vec<String>,
        tc: String,
        records: Vec<String>,
    }

    /// What the random kills left: the tc state before them, each kill's leftovers, and the
    /// tc state after them all.
    struct Kills {
        before: String,
        each: Vec<Kill>,
        after_all: String,
    }

    /// The kills, run once for this module's `sigkill_at_random_points_` tests (they run one at
    /// a time; each also runs alone). The lab is down again once it is built.
    fn kills() -> &'static Kills {
        static KILLS_RUN: OnceLock<Kills> = OnceLock::new();
        KILLS_RUN.get_or_init(kill_at_random_points)
    }

    fn kill_at_random_points() -> Kills {
        let _lab = LabGuard::new();
        let seed = seed();
        eprintln!("random kill points: seed {seed} (set PKTRACE_TEST_SEED={seed} to repeat)");
        let mut rng = Rng(seed);
        let started = Instant::now();
        // The previous test's programs may still be on their way out (RCU).
        let loaded = ours_loaded_after_settling();
        assert!(
            loaded.is_empty(),
            "programs of ours loaded before the test: {loaded:?}"
        );
        // A clsact qdisc that is not ours: it must outlive every pktrace, killed or not.
        let foreign = ForeignQdisc::add("azure0");
        let before = tc_snapshot();
        let modes: &[bool] = if kernel_has_tcx() {
            &[false, true]
        } else {
            &[true]
        };
        let mut kills = Vec::new();
        for &clsact in modes {
            kill_in_mode(clsact, &mut rng, seed, started, &mut kills);
        }
        let after_all = tc_snapshot();
        drop(foreign);
        eprintln!("kill test took {:?}", started.elapsed());
        Kills {
            before,
            each: kills,
            after_all,
        }
    }

    /// [`KILLS`] kills of pktrace attaching by clsact (or tcx), each at a random point.
    fn kill_in_mode(
        clsact: bool,
        rng: &mut Rng,
        seed: u64,
        started: Instant,
        kills: &mut Vec<Kill>,
    ) {
        let env: &[(&str, &str)] = if clsact {
            &[FORCE_CLSACT]
        } else {
            &[FORCE_TCX]
        };
        let mode = if clsact { "clsact" } else { "tcx" };
        // How long attaching takes here, so that kills during attach land inside it.
        let t = Instant::now();
        let probe = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], env);
        let attach_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(1000);
        assert!(probe.stop().status.success());
        let (mut left_filters, mut per_phase) = (0, [0; 3]);
        for i in 0..KILLS {
            assert!(
                started.elapsed() < KILL_TEST_LIMIT,
                "the kill test took over {KILL_TEST_LIMIT:?}"
            );
            let phase = [Phase::Attach, Phase::Traffic, Phase::Detach]
                [usize::try_from(rng.below(3)).unwrap_or(0)];
            per_phase[phase as usize] += 1;
            let (pid, delay, ready) = kill_once(phase, env, attach_ms, rng);
            eprintln!("{mode} kill {i}: {phase:?} after {delay:?} (attached: {ready})");
            // Filters outlive a killed process; the next pktrace sweeps them (and the qdiscs
            // the dead one created).
            let filters = if clsact { our_filters() } else { Vec::new() };
            left_filters += filters.len();
            let next = clsact
                .then(|| Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], env).stop());
            kills.push(Kill {
                what: format!("{mode} kill {i} ({phase:?}, seed {seed})"),
                pid,
                filters,
                next,
                loaded: ours_loaded_after_settling(),
                tc: tc_snapshot(),
                records: fs::read_dir("/run/pktrace")
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
        eprintln!(
            "{mode}: {KILLS} kills (attach/traffic/detach: {per_phase:?}); tagged filters left by \
             killed processes and swept by the next start: {left_filters}"
        );
    }

    /// Starts pktrace, kills it in `phase` after a random delay; returns its PID, the delay and
    /// whether it had attached.
    fn kill_once(
        phase: Phase,
        env: &[(&str, &str)],
        attach_ms: u64,
        rng: &mut Rng,
    ) -> (u32, Duration, bool) {
        let mut pk = Pktrace::spawn_with_env(&["--pod", "ubuntu", "--follow"], env);
        let mut traffic = None;
        let delay = match phase {
            Phase::Attach => Duration::from_millis(rng.below(attach_ms + attach_ms / 5)),
            Phase::Traffic => {
                pk.wait_until_ready();
                traffic = Some(
                    in_ns(
                        &UBUNTU.netns(),
                        "ping",
                        ["-q", "-c", "200", "-i", "0.005", VNET_IP],
                    )
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("ping"),
                );
                Duration::from_millis(50 + rng.below(500))
            }
            Phase::Detach => {
                pk.wait_until_ready();
                pk.signal(libc::SIGINT);
                Duration::from_micros(rng.below(30_000))
            }
        };
        sleep(delay);
        let pid = u32::try_from(pk.pid()).unwrap_or(0);
        let ready = pk.is_ready();
        let _ = pk.kill_now();
        if let Some(mut t) = traffic {
            let _ = t.kill();
            let _ = t.wait();
        }
        (pid, delay, ready)
    }

    #[test]
    fn sigkill_at_random_points_leaves_no_program_or_link() {
        for k in &kills().each {
            assert!(
                k.loaded.is_empty(),
                "{}: left behind: {:?}",
                k.what,
                k.loaded
            );
        }
    }

    #[test]
    fn sigkill_at_random_points_leaves_tc_qdiscs_and_filters_as_before() {
        let run = kills();
        for k in &run.each {
            assert_eq!(k.tc, run.before, "{}: tc qdiscs/filters changed", k.what);
        }
    }

    #[test]
    fn sigkill_at_random_points_leaves_no_qdisc_record() {
        for k in &kills().each {
            assert!(
                k.records.is_empty(),
                "{}: qdisc records left: {:?}",
                k.what,
                k.records
            );
        }
    }

    /// Filters outlive a killed process (clsact); each must carry the dead PID, and the next
    /// pktrace sweeps them and says so.
    #[test]
    fn sigkill_at_random_points_leaves_filters_tagged_with_the_dead_pid_that_the_next_run_sweeps() {
        for k in &kills().each {
            for (line, handle) in &k.filters {
                assert_eq!(
                    tagged_pid(*handle),
                    Some(k.pid),
                    "{}: a filter not tagged with the dead pid {}: {line}",
                    k.what,
                    k.pid
                );
            }
            let Some(trace) = &k.next else { continue };
            assert!(trace.status.success(), "{}: {}", k.what, trace.dump());
            if !k.filters.is_empty() {
                assert!(
                    trace.stderr.contains("removed"),
                    "{}: no sweep reported: {}",
                    k.what,
                    trace.stderr
                );
            }
        }
    }

    #[test]
    fn sigkill_at_random_points_never_removes_a_foreign_qdisc() {
        assert!(
            kills().after_all.contains("qdisc clsact ffff: dev azure0"),
            "the foreign qdisc was removed"
        );
    }

    // ---------------------------------------------------------------------------------------------
    // 2. Never change a packet's fate, also with another program on the same hook.

    const ECHOES: u64 = 20;
    const CONNECTS: u64 = 10;
    /// A port nobody listens on at the VNet host: refused without the dropper, silent with it.
    const DROPPED_PORT: u16 = 8081;

    /// What one round of traffic did: the other program's counters (echo requests, SYNs to :80,
    /// SYNs to the dropped port) and the fates the sockets saw.
    #[derive(Debug, PartialEq, Eq)]
    struct Round {
        counted: [u64; 3],
        echo_replies: u64,
        connected: u64,
        refused: u64,
        timed_out: u64,
    }

    fn traffic_round(prog: &CountingProgram) -> Round {
        let before = prog.counts();
        let out = in_ns(
            &UBUNTU.netns(),
            "ping",
            [
                "-q",
                "-c",
                &ECHOES.to_string(),
                "-i",
                "0.02",
                "-W",
                "1",
                VNET_IP,
            ],
        )
        .output()
        .expect("ping");
        let text = String::from_utf8_lossy(&out.stdout);
        let echo_replies = text
            .split(',')
            .find_map(|p| {
                p.trim()
                    .strip_suffix(" received")
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0);
        let (connected, refused, timed_out) = in_netns(&UBUNTU.netns(), || {
            let (mut c, mut r, mut t) = (0, 0, 0);
            let ok: SocketAddr = format!("{VNET_IP}:{}", VNET_HOST.tcp_port)
                .parse()
                .expect("addr");
            let dropped: SocketAddr = format!("{VNET_IP}:{DROPPED_PORT}").parse().expect("addr");
            for _ in 0..CONNECTS {
                if TcpStream::connect_timeout(&ok, Duration::from_secs(2)).is_ok() {
                    c += 1;
                }
                // Shorter than the first SYN retransmission (1 s): one SYN per attempt.
                match TcpStream::connect_timeout(&dropped, Duration::from_millis(300)) {
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => r += 1,
                    Err(e)
                        if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock =>
                    {
                        t += 1;
                    }
                    other => panic!("connect to the dropped port: {other:?}"),
                }
            }
            (c, r, t)
        });
        let after = prog.counts();
        Round {
            counted: [0, 1, 2].map(|i| after[i] - before[i]),
            echo_replies,
            connected,
            refused,
            timed_out,
        }
    }

    #[test]
    fn another_program_on_the_same_hook_counts_and_drops_the_same_with_and_without_pktrace() {
        // The test program attaches with a tcx link: the runners skip this test on a kernel
        // without tcx (xtask::needs::NEEDS).
        require_tcx();
        let _lab = LabGuard::new();
        for drop in [false, true] {
            let prog = CountingProgram::load(VNET_HOST.tcp_port, DROPPED_PORT, drop);
            // On the pod's host veth ingress: every packet the pod sends passes here.
            let _link = in_netns(NODE_NS, || prog.attach_tcx_ingress(ifindex(UBUNTU.host_if)))
                .expect("tcx attach");
            let without = traffic_round(&prog);
            let want = Round {
                counted: [ECHOES, CONNECTS, CONNECTS],
                echo_replies: ECHOES,
                connected: CONNECTS,
                refused: if drop { 0 } else { CONNECTS },
                timed_out: if drop { CONNECTS } else { 0 },
            };
            assert_eq!(without, want, "without pktrace (dropper: {drop})");
            for env in [&[FORCE_TCX][..], &[FORCE_CLSACT][..]] {
                // pktrace attaches at the head of the same hook, before the test program.
                let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], env);
                let with = traffic_round(&prog);
                let trace = pk.stop();
                assert!(trace.status.success(), "{}", trace.dump());
                assert_eq!(
                    with, without,
                    "with pktrace ({env:?}, dropper: {drop}): fates or counts changed"
                );
                let pings = trace.starting(&UBUNTU.ip.to_string(), VNET_IP).len() as u64;
                assert_eq!(
                    pings,
                    ECHOES,
                    "pktrace saw the echo requests ({env:?})\n{}",
                    trace.dump()
                );
                eprintln!("dropper {drop}, pktrace {env:?}: {with:?} (same as without)");
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // 3. Floods.

    /// Packets per second the flood aims at, and for how long.
    const FLOOD_PPS: u64 = 40_000;
    const FLOOD_SECS: u64 = 4;
    const FLOOD_PORT: u16 = 9;
    /// The ring buffer for the flood: 16 KiB holds ~200 events, far less than 20 ms of flood.
    const SMALL_RING: &str = "16384";
    /// The join table for the flood: a ring-full cuts about one journey per drain (its last
    /// events are lost), and cut journeys stay open for the idle time-out (1 s): tens at once,
    /// more than this table holds.
    const SMALL_JOIN: &str = "8";
    /// RSS may grow by at most this during the flood. The collector keeps no per-packet state
    /// beyond the join table (capped: `PKTRACE_JOIN_MAX` journeys here, 8 MiB by default) and the
    /// attribution cache (4,096 entries), and the ring buffer's pages are mapped before the flood;
    /// so the flood's size must not show in the RSS. 16 MiB is room for allocator slack.
    const RSS_GROWTH_LIMIT_KB: u64 = 16 * 1024;

    /// Sends `FLOOD_PPS` UDP packets per second from the pod to the VNet host for `FLOOD_SECS`;
    /// returns (sent, delivered, achieved rate).
    #[expect(
        clippy::similar_names,
        reason = "`received` and `receiver`: the count and the thread that counts"
    )]
    #[expect(clippy::cast_possible_truncation, reason = "`size_of::<c_int>()` is 4")]
    fn flood() -> (u64, u64, u64) {
        let received = Arc::new(AtomicU64::new(0));
        let (bound, done) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let receiver = {
            let (received, bound, done) = (received.clone(), bound.clone(), done.clone());
            thread::spawn(move || {
                enter_netns(VNET_HOST.netns);
                let sock = UdpSocket::bind(("0.0.0.0", FLOOD_PORT)).expect("bind");
                let size: libc::c_int = 32 << 20;
                // SAFETY: setsockopt with a valid int option on our socket (FORCE: we are root).
                unsafe {
                    libc::setsockopt(
                        sock.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_RCVBUFFORCE,
                        (&raw const size).cast(),
                        size_of::<libc::c_int>() as u32,
                    );
                }
                sock.set_read_timeout(Some(Duration::from_millis(200)))
                    .expect("timeout");
                bound.store(true, Ordering::SeqCst);
                let mut buf = [0u8; 2048];
                let mut idle_since = None;
                loop {
                    if sock.recv(&mut buf).is_ok() {
                        received.fetch_add(1, Ordering::Relaxed);
                        idle_since = None;
                    } else if done.load(Ordering::SeqCst) {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(1) {
                            break;
                        }
                    }
                }
            })
        };
        while !bound.load(Ordering::SeqCst) {
            sleep(Duration::from_millis(10));
        }
        let (sent, elapsed) = in_netns(&UBUNTU.netns(), || {
            let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
            sock.connect((VNET_IP, FLOOD_PORT)).expect("connect");
            let payload = [0x5au8; 64];
            let (start, total) = (Instant::now(), FLOOD_PPS * FLOOD_SECS);
            let mut sent = 0u64;
            while sent < total && start.elapsed() < Duration::from_secs(FLOOD_SECS * 3) {
                // Paced: never ahead of the schedule.
                let due =
                    u64::try_from(start.elapsed().as_micros()).unwrap_or(0) * FLOOD_PPS / 1_000_000;
                if sent >= due {
                    std::hint::spin_loop();
                    continue;
                }
                if sock.send(&payload).is_ok() {
                    sent += 1;
                }
            }
            (sent, start.elapsed())
        });
        done.store(true, Ordering::SeqCst);
        receiver.join().expect("receiver");
        let rate = sent * 1000 / u64::try_from(elapsed.as_millis()).unwrap_or(1).max(1);
        (sent, received.load(Ordering::Relaxed), rate)
    }

    /// The largest RSS of a process, sampled every 50 ms on a thread of its own until stopped.
    struct PeakRss {
        sampling: Arc<AtomicBool>,
        sampler: thread::JoinHandle<u64>,
    }

    impl PeakRss {
        fn start(pid: i32) -> Self {
            let sampling = Arc::new(AtomicBool::new(true));
            let flag = sampling.clone();
            let sampler = thread::spawn(move || {
                let mut max = 0;
                while flag.load(Ordering::SeqCst) {
                    max = max.max(rss_kb(pid));
                    sleep(Duration::from_millis(50));
                }
                max
            });
            Self { sampling, sampler }
        }

        /// The largest RSS seen, KiB.
        fn stop(self) -> u64 {
            self.sampling.store(false, Ordering::SeqCst);
            self.sampler.join().expect("sampler")
        }
    }

    /// `VmRSS` of a process in KiB.
    fn rss_kb(pid: i32) -> u64 {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// The complete lines of the contract in `text`.
    fn json_lines(text: &str) -> Vec<Line> {
        text.lines().filter_map(|l| Line::parse(l).ok()).collect()
    }

    #[test]
    #[expect(
        clippy::similar_names,
        reason = "`lost` and `loss`: the summary's count and the loss line it is checked against"
    )]
    fn a_flood_that_overruns_the_ring_buffer_keeps_forwarding_bounded_and_reported() {
        let _lab = LabGuard::new();
        let (base_sent, base_got, base_rate) = flood();
        let pk = Pktrace::start_with_env(
            &["--pod", "ubuntu", "--follow"],
            &[
                ("PKTRACE_RING_BYTES", SMALL_RING),
                ("PKTRACE_JOIN_MAX", SMALL_JOIN),
            ],
        );
        let pid = pk.pid();
        let rss_before = rss_kb(pid);
        let sampler = PeakRss::start(pid);
        let (sent, got, rate) = flood();
        // Live reports, read while pktrace still runs.
        sleep(Duration::from_millis(500));
        let live = json_lines(&pk.stdout_so_far());
        let rss_max = sampler.stop();
        let trace = pk.stop();
        assert!(trace.status.success(), "{}", trace.dump());
        let summary = trace.summary();
        let (lost, evicted) = (summary.lost_events, summary.evicted_journeys);
        eprintln!(
            "flood without pktrace: {base_got}/{base_sent} delivered at {base_rate} pps; with: \
             {got}/{sent} at {rate} pps; lost events {lost}, journeys {}, evicted journeys {evicted}; \
             RSS {rss_before} KiB after attach, max {rss_max} KiB during the flood",
            summary.journeys
        );
        // The node keeps forwarding: as many packets arrive as without pktrace (1 % slack for the
        // receiver's own scheduling on a shared machine).
        assert!(
            got * 100 >= sent * 99 * base_got / base_sent.max(1),
            "forwarding suffered: {got}/{sent} vs {base_got}/{base_sent}"
        );
        // Losses are shown live and in the summary.
        let live_loss: Vec<&LossLine> = live
            .iter()
            .filter_map(|l| match l {
                Line::Loss(loss) => Some(loss),
                _ => None,
            })
            .collect();
        assert!(!live_loss.is_empty(), "no live loss line during the flood");
        assert!(
            lost > 0,
            "the flood should have overrun a {SMALL_RING}-byte ring"
        );
        let live_total = live_loss.iter().map(|l| l.lost_total).max().unwrap_or(0);
        assert!(
            live_total > 0 && live_total <= lost,
            "live total {live_total}, summary {lost}"
        );
        // The join table is bounded and says when it evicts.
        let live_evicted: Vec<&Line> = live
            .iter()
            .filter(|l| matches!(l, Line::Evicted(_)))
            .collect();
        assert!(
            evicted > 0 && !live_evicted.is_empty(),
            "no eviction reported with a {SMALL_JOIN}-journey table"
        );
        // Memory does not follow the flood.
        assert!(
            rss_max <= rss_before + RSS_GROWTH_LIMIT_KB,
            "RSS grew from {rss_before} KiB to {rss_max} KiB during the flood"
        );
    }

    /// How long the node-local stream of the join-table test runs.
    const LOCAL_STREAM: Duration = Duration::from_secs(3);
    /// The join table's default byte limit (`PKTRACE_JOIN_BYTES` unset), in KiB.
    const JOIN_BYTES_KB: u64 = 8 * 1024;
    /// Room beyond that limit for the allocator's slack and the journeys on their way out.
    const JOIN_SLACK_KB: u64 = 4 * 1024;

    /// Streams TCP from pod `ubuntu` to a listener on the node's own address for
    /// [`LOCAL_STREAM`]; returns the bytes the node received.
    fn stream_to_the_node() -> u64 {
        let (ready, received) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let server = {
            let (ready, received) = (ready.clone(), received.clone());
            thread::spawn(move || {
                enter_netns(NODE_NS);
                let listener = std::net::TcpListener::bind((lab::topology::NODE_IP, 5299))
                    .expect("bind on the node");
                ready.store(true, Ordering::SeqCst);
                let (mut conn, _) = listener.accept().expect("accept");
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n) = std::io::Read::read(&mut conn, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    received.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
        };
        while !ready.load(Ordering::SeqCst) {
            sleep(Duration::from_millis(10));
        }
        in_netns(&UBUNTU.netns(), || {
            let mut conn = TcpStream::connect((lab::topology::NODE_IP, 5299)).expect("connect");
            let chunk = vec![0x5au8; 1 << 16];
            let start = Instant::now();
            while start.elapsed() < LOCAL_STREAM {
                std::io::Write::write_all(&mut conn, &chunk).expect("write");
            }
        });
        server.join().expect("server");
        received.load(Ordering::Relaxed)
    }

    #[test]
    fn packets_delivered_to_the_node_keep_the_join_table_within_its_bytes_and_reported() {
        let _lab = LabGuard::new();
        let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "--follow"], &[]);
        let pid = pk.pid();
        // After a first journey: what attaching and the first output cost is in.
        let _ = lab::client_tcp(&UBUNTU.netns(), "203.0.113.80:80");
        sleep(Duration::from_millis(300));
        let rss_before = rss_kb(pid);
        let sampler = PeakRss::start(pid);
        let bytes = stream_to_the_node();
        // Past the idle time-out (1 s) and a housekeeping tick: every journey is out.
        sleep(Duration::from_millis(1500));
        let live = json_lines(&pk.stdout_so_far());
        let rss_max = sampler.stop();
        let trace = pk.stop();
        assert!(trace.status.success(), "{}", trace.dump());
        let summary = trace.summary();
        eprintln!(
            "{bytes} bytes to the node; journeys {}, evicted {}, lost events {}; RSS \
             {rss_before} KiB before the stream, max {rss_max} KiB",
            summary.journeys, summary.evicted_journeys, summary.lost_events
        );
        // Each segment the node took in is a journey that never leaves: more than the table
        // holds (about 6,900) within the time-out, so the oldest are closed early, and said.
        let live_total = live
            .iter()
            .filter_map(|l| match l {
                Line::Evicted(e) => Some(e.journeys_total),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        assert!(
            summary.evicted_journeys > 0 && live_total > 0,
            "no journey closed early (summary {}, live {live_total})",
            summary.evicted_journeys
        );
        assert!(live_total <= summary.evicted_journeys);
        // Closed early, not lost: every journey is written.
        let written = trace
            .contract
            .iter()
            .filter(|l| matches!(l, Line::Journey(_)))
            .count() as u64;
        assert_eq!(written, summary.journeys);
        assert!(
            rss_max <= rss_before + JOIN_BYTES_KB + JOIN_SLACK_KB,
            "RSS grew from {rss_before} KiB to {rss_max} KiB: more than the join table's bytes"
        );
    }

    /// The `evicted_flows` lines among `lines`.
    fn evicted_flows(lines: &[Line]) -> Vec<&EvictedFlowsLine> {
        lines
            .iter()
            .filter_map(|l| match l {
                Line::EvictedFlows(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// Entries of the followed-flows table for the flow-table test: two flows (a flow is two
    /// entries, one per direction).
    const SMALL_FLOW_TABLE: u64 = 4;
    /// Connections to the internet host in that test; each is masqueraded to the node's
    /// address, which pktrace follows by adding both directions of the translated flow.
    const MASQUERADED_CONNECTIONS: u64 = 12;

    #[test]
    fn a_full_flow_table_says_how_many_followed_flows_it_evicted() {
        let _lab = LabGuard::new();
        let pk = Pktrace::start_with_env(
            &["--pod", "ubuntu"],
            &[("PKTRACE_FLOW_TABLE", &SMALL_FLOW_TABLE.to_string())],
        );
        let mut ok = 0;
        for _ in 0..MASQUERADED_CONNECTIONS {
            if lab::client_tcp(&UBUNTU.netns(), "203.0.113.80:80").is_ok() {
                ok += 1;
            }
        }
        // Past a housekeeping tick (250 ms): the live report is out.
        sleep(Duration::from_millis(600));
        let live = json_lines(&pk.stdout_so_far());
        let trace = pk.stop();
        assert!(trace.status.success(), "{}", trace.dump());
        let summary = trace.summary();
        let evicted = summary.evicted_flows;
        let reports = evicted_flows(&trace.contract);
        let live_total = evicted_flows(&live)
            .iter()
            .map(|l| l.flows_total)
            .max()
            .unwrap_or(0);
        eprintln!(
            "flow table of {SMALL_FLOW_TABLE}: {ok}/{MASQUERADED_CONNECTIONS} masqueraded \
             connections, {live_total} evictions reported live, {evicted} in the summary, {} \
             report lines",
            reports.len()
        );
        assert_eq!(
            ok, MASQUERADED_CONNECTIONS,
            "connections to the internet host failed"
        );
        // Each connection added two entries; at most SMALL_FLOW_TABLE can still be there.
        let at_least = 2 * ok - SMALL_FLOW_TABLE;
        assert!(
            live_total >= at_least,
            "live: {live_total} evictions reported, at least {at_least} happened"
        );
        assert!(
            evicted >= live_total,
            "summary {evicted} below the live total {live_total}"
        );
        // The reports add up to the summary's total.
        let reported: u64 = reports.iter().map(|l| l.flows).sum();
        assert_eq!(reported, evicted, "{}", trace.dump());
        // With the default table, the same traffic evicts nothing.
        let pk = Pktrace::start(&["--pod", "ubuntu"]);
        for _ in 0..MASQUERADED_CONNECTIONS {
            let _ = lab::client_tcp(&UBUNTU.netns(), "203.0.113.80:80");
        }
        let trace = pk.stop();
        assert!(trace.status.success(), "{}", trace.dump());
        assert_eq!(trace.summary().evicted_flows, 0, "{}", trace.dump());
        assert!(
            evicted_flows(&trace.contract).is_empty(),
            "{}",
            trace.dump()
        );
    }

    // ---------------------------------------------------------------------------------------------
    // 6. Least privilege.

    /// `CAP_NET_ADMIN` (12), `CAP_NET_RAW` (13), `CAP_BPF` (39): what pktrace keeps after attaching here
    /// (on the node's own root: no chroot to /proc/1/root needed).
    const KEPT: u64 = (1 << 12) | (1 << 13) | (1 << 39);

    fn cap_line(status: &str, name: &str) -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    }

    /// Socket inodes that listen in `pid`'s network namespace: TCP in LISTEN, every bound UDP
    /// socket, unix sockets with `__SO_ACCEPTCON`.
    fn listening_inodes(pid: i32) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (file, inode_col) in [
            ("tcp", 9),
            ("tcp6", 9),
            ("udp", 9),
            ("udp6", 9),
            ("unix", 6),
        ] {
            let text = fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let cols: Vec<&str> = line.split_whitespace().collect();
                let listening = match file {
                    "tcp" | "tcp6" => cols.get(3) == Some(&"0A"),
                    "udp" | "udp6" => true,
                    _ => cols
                        .get(3)
                        .and_then(|f| u32::from_str_radix(f, 16).ok())
                        .is_some_and(|f| f & 0x10000 != 0),
                };
                if let (true, Some(inode)) = (listening, cols.get(inode_col)) {
                    out.insert((*inode).to_owned());
                }
            }
        }
        out
    }

    /// The socket inodes `pid` holds.
    fn socket_inodes(pid: i32) -> BTreeSet<String> {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("fd dir")
            .flatten()
            .filter_map(|e| fs::read_link(e.path()).ok())
            .filter_map(|l| {
                l.to_string_lossy()
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')
                    .map(str::to_owned)
            })
            .collect()
    }

    #[test]
    fn after_attaching_pktrace_keeps_only_what_it_needs_and_listens_nowhere() {
        let _lab = LabGuard::new();
        let pk = Pktrace::start(&["--pod", "ubuntu", "--follow", "-v"]);
        let pid = pk.pid();
        let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let sets =
            ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"].map(|n| cap_line(&status, n));
        assert_eq!(
            sets,
            [0, KEPT, KEPT, KEPT, 0],
            "inheritable, permitted, effective, bounding, ambient"
        );
        let sockets = socket_inodes(pid);
        let listening = listening_inodes(pid);
        assert!(
            sockets.is_disjoint(&listening),
            "pktrace listens: {:?}",
            sockets.intersection(&listening).collect::<Vec<_>>()
        );
        // With what it kept it still works, and its children (iptables-save) still read the rules.
        lab::client_tcp(&UBUNTU.netns(), "10.0.159.58:80").expect("traffic");
        let trace = pk.stop();
        assert!(trace.status.success(), "{}", trace.dump());
        assert!(
            trace
                .stderr
                .contains("pktrace: dropped capabilities: CAP_CHOWN,"),
            "{}",
            trace.stderr
        );
        for kept in ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF"] {
            assert!(
                trace.stderr.contains(&format!("pktrace: kept {kept}: ")),
                "{kept} not reported: {}",
                trace.stderr
            );
        }
        let dnat_rules: Vec<Option<&str>> = trace
            .journeys()
            .into_iter()
            .flat_map(|j| &j.steps)
            .filter(|s| s.point == Point::Dnat)
            .map(|s| s.rule.as_deref())
            .collect();
        assert!(
            !dnat_rules.is_empty()
                && dnat_rules
                    .iter()
                    .all(|r| r.is_some_and(|r| r.starts_with("KUBE-SEP-"))),
            "DNAT steps without their rule (iptables-save after the drop?): {dnat_rules:?}\n{}",
            trace.dump()
        );
        eprintln!(
            "{} sockets, none listening; kept CapEff {:#x}; stderr:\n{}",
            sockets.len(),
            sets[2],
            trace.stderr
        );
    }

    /// One refusal: what is missing, the command pktrace runs under, its environment, the message.
    type Refusal<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

    #[test]
    #[expect(
        clippy::similar_names,
        reason = "`args` and `argv`: pktrace's arguments and the whole command line around them"
    )]
    fn refused_permissions_give_a_one_line_reason_and_exit_1() {
        let _lab = LabGuard::new();
        let bin = pktrace_bin().display().to_string();
        let args = ["--pod-ip", "10.13.76.46", "-d", "1s"];
        let cases: [Refusal; 2] = [
            (
                "not root",
                vec![
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--inh-caps=-all",
                ],
                vec![],
                "not root and missing CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN: run as root",
            ),
            // Root, but neither CAP_BPF nor CAP_SYS_ADMIN (which also grants eBPF).
            (
                "no CAP_BPF",
                vec!["setpriv", "--bounding-set=-bpf,-sys_admin"],
                vec![],
                "missing CAP_BPF: ",
            ),
        ];
        for (what, wrapper, env, want) in cases {
            let mut argv: Vec<&str> = wrapper.clone();
            argv.push(&bin);
            argv.extend(args);
            let out = in_ns(NODE_NS, argv[0], &argv[1..])
                .envs(env)
                .output()
                .expect("run");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            assert!(
                err.starts_with(&format!("pktrace: {want}")),
                "{what}: {err}"
            );
            assert_eq!(
                err.lines().count(),
                1,
                "{what}: one line, not a stack trace: {err}"
            );
            eprintln!("{what}: exit 1: {}", err.trim_end());
        }
    }
}
