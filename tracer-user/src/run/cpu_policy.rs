//! How pktrace's own threads share the node's CPUs with the traffic they trace.
//!
//! Contract: [`yield_to_workload`] moves the calling thread, and every thread it starts after,
//! from the default policy (`SCHED_OTHER`) to `SCHED_BATCH`: the same share of CPU time, but
//! a thread that wakes (the ring's fill, the drain timer) does not preempt the running task; it
//! runs when that task's time slice ends. A tracer that wakes many times a second would
//! otherwise cut into the traced workload's slices on a busy node (BENCHMARKS.md, "TCP
//! retention, pinned and unpinned"). A policy the user chose (`chrt`, a real-time class, or
//! `SCHED_IDLE`) is left as it is, and so is the nice value. Not used with conntrack's reports
//! (`--nat-hook conntrack`): the kernel follows a NATed flow only once pktrace has read them.

/// Switches the calling thread from `SCHED_OTHER` to `SCHED_BATCH`; returns whether it did.
/// A failure leaves the policy as it was: it is a matter of cost, never of what is traced.
pub(super) fn yield_to_workload() -> bool {
    // SAFETY: plain syscalls on the calling thread (pid 0) with a valid, initialised param.
    unsafe {
        if libc::sched_getscheduler(0) != libc::SCHED_OTHER {
            return false;
        }
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &raw const param) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_thread_moves_to_batch_and_a_chosen_policy_stays() {
        // On a thread of its own: the policy is per thread and inherited by its children.
        std::thread::spawn(|| {
            // SAFETY: plain syscalls on the calling thread.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as above; from any non-real-time policy back to the default needs no
            // privilege, so the test does not depend on how it was started.
            let back = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &raw const param) };
            assert_eq!(back, 0);
            assert!(yield_to_workload());
            assert_eq!(policy(), libc::SCHED_BATCH);
            let child = std::thread::spawn(policy).join().unwrap();
            assert_eq!(child, libc::SCHED_BATCH, "threads started after inherit it");
            assert!(
                !yield_to_workload(),
                "a policy other than the default is left alone"
            );
            assert_eq!(policy(), libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
    }
}
