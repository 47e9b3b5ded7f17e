//! Records left staged: the kernel programs write a CPU's records to the ring in batches
//! (tracer-ebpf's `stage`), so a CPU that goes quiet keeps its last records until something
//! makes it write them. [`Flusher`] does: it runs the object's `flush_staged` program on each
//! CPU that holds staged records (`BPF_PROG_TEST_RUN` on that CPU), which the collector asks
//! for on its drain timer and at the end of a session.
//!
//! Which CPUs hold some comes from two per-CPU counters the programs keep
//! (`BATCHES_BEGUN`, `BATCHES_ENDED`): a CPU idle since its last batch is not disturbed.

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

/// The loaded `flush_staged` program (never attached).
#[derive(Debug)]
pub struct Flusher {
    prog: ProgramFd,
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
            failed: 0,
            last_error: None,
        })
    }

    /// Runs the program on every CPU whose batches begun (`begun[cpu]`) are ahead of those
    /// ended (`ended[cpu]`); returns how many it ran on. An offline CPU is skipped (it holds
    /// nothing new); other failures are counted ([`Self::failures`]).
    pub fn flush(&mut self, begun: &[u64], ended: &[u64]) -> usize {
        let mut ran = 0;
        for (cpu, (b, e)) in begun.iter().zip(ended).enumerate() {
            if b <= e {
                continue;
            }
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
