//! Batches: the kernel programs write a CPU's records to the ring a batch at a time, and what
//! a quiet CPU left staged is written out by the collector's next drain tick. So a lone
//! packet, far too few records to fill a batch, is printed while the trace goes on, not at
//! its end; and with batching off (`PKTRACE_BATCH_BYTES=0`) the same packet gives the same
//! journey.

use std::{
    process::Stdio,
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{LabGuard, trace::Pktrace};
use tracer_user::output::json::contract::JourneyLine;
use xtask::lab::{UBUNTU, in_ns};

/// A backend pod of the lab, on the same bridge as the traced pod.
const BACKEND: &str = "10.13.76.26";

/// Well over the 20 ms drain tick that flushes the CPUs, well under the session's end.
const PRINTED_WITHIN: Duration = Duration::from_secs(1);

fn is_echo_to_backend(j: &JourneyLine) -> bool {
    j.proto == "icmp"
        && j.steps
            .first()
            .is_some_and(|s| s.src == UBUNTU.ip.to_string() && s.dst == BACKEND)
}

/// Sends one echo request from the traced pod and waits for its journey to be printed;
/// returns how long that took, or `None` after three seconds.
fn one_echo_printed_after(pk: &Pktrace) -> Option<Duration> {
    let sent = Instant::now();
    let status = in_ns(&UBUNTU.netns(), "ping", ["-c1", "-W1", BACKEND])
        .stdout(Stdio::null())
        .status()
        .expect("running ping");
    assert!(status.success(), "ping {BACKEND} from the traced pod");
    while sent.elapsed() < Duration::from_secs(3) {
        if pk.journeys_so_far().iter().any(is_echo_to_backend) {
            return Some(sent.elapsed());
        }
        sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_lone_packets_journey_is_printed_while_the_trace_goes_on() {
    let _lab = LabGuard::new();
    for (env, what) in [
        (&[][..], "batched"),
        (&[("PKTRACE_BATCH_BYTES", "0")][..], "written alone"),
    ] {
        let mut pk = Pktrace::start_with_env(&["--pod", "ubuntu"], env);
        let after = one_echo_printed_after(&pk);
        assert!(pk.is_running(), "{what}: pktrace still traces");
        let trace = pk.stop();
        assert!(trace.status.success(), "{what}: {}", trace.dump());
        let after = after.unwrap_or_else(|| panic!("{what}: not printed:\n{}", trace.dump()));
        assert!(
            after < PRINTED_WITHIN,
            "{what}: printed {after:?} after the echo"
        );
        let echo: Vec<_> = trace
            .journeys()
            .into_iter()
            .filter(|j| is_echo_to_backend(j))
            .collect();
        assert_eq!(echo.len(), 1, "{what}: one journey:\n{}", trace.dump());
        assert_eq!(trace.summary().lost_events, 0, "{what}");
        assert_eq!(trace.summary().bad_records, 0, "{what}");
    }
}
