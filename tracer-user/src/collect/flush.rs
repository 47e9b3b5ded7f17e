//! Records left staged: the kernel programs write a CPU's records to the ring in batches
//! (tracer-ebpf's `stage`), so a CPU that goes quiet keeps its last records until something
//! makes it write them. [`Flusher`] does: it runs the object's `flush_staged` program on each
//! CPU that holds staged records (`BPF_PROG_TEST_RUN` on that CPU), which the collector asks
//! for on its drain timer (the CPUs gone quiet) and, for every CPU holding some, before it
//! closes idle journeys and at the end of a session.
//!
//! Which CPUs hold some comes from two per-CPU counters the programs keep
//! (`BATCHES_BEGUN`, `BATCHES_ENDED`). On the drain timer a CPU idle since its last batch is
//! not disturbed, and neither is one that wrote a batch since the last look
//! ([`quiet_holders`]): it is busy and writes its next batch by itself soon; if it went
//! quiet, the next look flushes it. A staged record so waits at most two looks.

use std::{io, os::fd::AsFd as _};

use aya::{
    Ebpf,
    programs::{ProgramError, ProgramFd, RawTracePoint},
};

use crate::kernel::sys;

/// The program in the object.
pub const PROGRAM: &str = "flush_staged";

/// Why the flush program cannot be used; then nothing is staged (see the caller).
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error("program {PROGRAM} is missing from the eBPF object")]
    Missing,
    #[error("loading {PROGRAM} failed")]
    Load(#[source] ProgramError),
    #[error("running {PROGRAM} on CPU {cpu} failed (BPF_PROG_TEST_RUN on a CPU needs Linux 5.10)")]
    Run {
        cpu: u32,
        #[source]
        source: io::Error,
    },
}

/// The CPUs to flush: those that began a batch they have not ended (`begun[cpu] >
/// ended[cpu]`) and ended none since the last look (`ended[cpu]` as `last[cpu]` was; a CPU
/// `last` does not know counts as such).
#[must_use]
pub fn quiet_holders(begun: &[u64], ended: &[u64], last: &[u64]) -> Vec<usize> {
    begun
        .iter()
        .zip(ended)
        .enumerate()
        .filter(|&(cpu, (b, e))| b > e && last.get(cpu).is_none_or(|l| l == e))
        .map(|(cpu, _)| cpu)
        .collect()
}

/// The loaded `flush_staged` program (never attached).
#[derive(Debug)]
pub struct Flusher {
    prog: ProgramFd,
    /// Each CPU's `BATCHES_ENDED` at the last look.
    last_ended: Vec<u64>,
    /// Runs that failed for another reason than an offline CPU, and the last such error.
    failed: u64,
    last_error: Option<io::Error>,
}

impl Flusher {
    /// Loads the program and runs it once on the CPU this thread is on, so that a kernel
    /// that cannot run it says so at start-up, not by records that never come.
    ///
    /// # Errors
    /// The program is missing, the verifier refused it, or the kernel cannot run it on a CPU.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, FlushError> {
        let prog: &mut RawTracePoint = ebpf
            .program_mut(PROGRAM)
            .ok_or(FlushError::Missing)?
            .try_into()
            .map_err(FlushError::Load)?;
        prog.load().map_err(FlushError::Load)?;
        let prog = prog
            .fd()
            .map_err(FlushError::Load)?
            .try_clone()
            .map_err(|e| FlushError::Load(ProgramError::IOError(e)))?;
        // SAFETY: sched_getcpu has no preconditions.
        let here = u32::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0);
        sys::prog_test_run_on_cpu(prog.as_fd(), here)
            .map_err(|source| FlushError::Run { cpu: here, source })?;
        Ok(Self {
            prog,
            last_ended: Vec::new(),
            failed: 0,
            last_error: None,
        })
    }

    /// Runs the program on every CPU [`quiet_holders`] names (all that hold staged records
    /// when `all`, at the end of a session); returns how many it ran on. An offline CPU is
    /// skipped (it holds nothing new); other failures are counted ([`Self::failures`]).
    pub fn flush(&mut self, begun: &[u64], ended: &[u64], all: bool) -> usize {
        let last = if all { &[][..] } else { &self.last_ended[..] };
        let cpus = quiet_holders(begun, ended, last);
        self.last_ended.clear();
        self.last_ended.extend_from_slice(ended);
        let mut ran = 0;
        for cpu in cpus {
            let cpu = u32::try_from(cpu).unwrap_or(u32::MAX);
            match sys::prog_test_run_on_cpu(self.prog.as_fd(), cpu) {
                Ok(_) => ran += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(e) => {
                    self.failed += 1;
                    self.last_error = Some(e);
                }
            }
        }
        ran
    }

    /// Runs that failed, and the last error, for the caller to report.
    #[must_use]
    pub fn failures(&self) -> (u64, Option<&io::Error>) {
        (self.failed, self.last_error.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::quiet_holders;

    #[test]
    fn only_cpus_holding_records_and_quiet_since_the_last_look_are_flushed() {
        // CPU 0 holds a batch and ended none since: flushed. CPU 1 holds one but ended one
        // since (busy): left alone. CPU 2 holds none. CPU 3 is new to the last look.
        let (begun, ended, last) = ([5, 9, 4, 1], [4, 8, 4, 0], [4, 7, 3]);
        assert_eq!(quiet_holders(&begun, &ended, &last), [0, 3]);
        // The first look, or the end of a session: every CPU that holds records.
        assert_eq!(quiet_holders(&begun, &ended, &[]), [0, 1, 3]);
        // Nothing staged anywhere: nothing to do.
        assert!(quiet_holders(&[2, 2], &[2, 2], &[1, 1]).is_empty());
    }
}
