//! Batches: the kernel programs write a CPU's records to the ring a batch at a time, and what
//! a quiet CPU left staged is written out within two of the collector's drain ticks. So a lone
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

/// Well over the two 20 ms drain ticks a quiet CPU's records wait at most, well under the
/// session's end.
const PRINTED_WITHIN: Duration = Duration::from_secs(1);

fn is_echo_to_backend(j: &JourneyLine) -> bool {
    j.proto == "icmp"
        && j.steps
            .first()
            .is_some_and(|s| s.src == UBUNTU.ip.to_string() && s.dst == BACKEND)
}

/// The CPUs a process may run on, `0..n`.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// One echo request from the traced pod, its sender on CPU `cpu`: the request, the reply the
/// backend's kernel sends from the same softirq, and its delivery all run on that CPU.
fn echo_on(cpu: usize) {
    let status = in_ns(
        &UBUNTU.netns(),
        "taskset",
        ["-c", &cpu.to_string(), "ping", "-c1", "-W1", BACKEND],
    )
    .stdout(Stdio::null())
    .status()
    .expect("running taskset ping");
    assert!(
        status.success(),
        "ping {BACKEND} from the traced pod on CPU {cpu}"
    );
}

/// Sends one echo request on every CPU and waits for all their journeys (each CPU's staged
/// records come out, the flush reaching the other CPUs by IPI), then one more on CPU 0, and
/// returns how long its journey took to be printed, or `None` after three seconds.
fn one_echo_printed_after(pk: &Pktrace) -> Option<Duration> {
    for cpu in 0..cpus() {
        echo_on(cpu);
    }
    let warm = Instant::now();
    while pk
        .journeys_so_far()
        .iter()
        .filter(|j| is_echo_to_backend(j))
        .count()
        < cpus()
    {
        assert!(
            warm.elapsed() < Duration::from_secs(3),
            "the warm-up echoes"
        );
        sleep(Duration::from_millis(10));
    }
    let before = pk
        .journeys_so_far()
        .iter()
        .filter(|j| is_echo_to_backend(j))
        .count();
    let sent = Instant::now();
    echo_on(0);
    while sent.elapsed() < Duration::from_secs(3) {
        if pk
            .journeys_so_far()
            .iter()
            .filter(|j| is_echo_to_backend(j))
            .count()
            > before
        {
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
        assert_eq!(
            echo.len(),
            cpus() + 1,
            "{what}: one journey each:\n{}",
            trace.dump()
        );
        assert_eq!(trace.summary().lost_events, 0, "{what}");
        assert_eq!(trace.summary().bad_records, 0, "{what}");
    }
}
