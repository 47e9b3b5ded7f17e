//! One tracing session: resolve → attach → collect → join → explain → output → summary.
//!
//! Start-up is a plan of small steps in `start` (resolve the subject, check privileges, read
//! the kernel's BTF once, load, attach, open the ring, start the explainer), each failing with
//! a [`RunError`]; the loop (`event_loop`) then drives the `session::Session` (join,
//! explain, write, report losses) and `hot::Hot` (interfaces and the followed pod that
//! change while tracing).

mod event_loop;
mod hot;
mod interfaces;
mod session;
mod start;

use std::io;

use crate::{
    attach,
    collect::{self, Collector},
    config::Config,
    interfaces::{clsact::CreatedQdiscs, tc},
    kernel::caps,
    nat, resolve, services,
};

/// Failures of a session; `main` turns them into messages and exit codes.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error(transparent)]
    Service(#[from] services::ServiceError),
    #[error(transparent)]
    Privilege(#[from] caps::PrivilegeError),
    #[error(transparent)]
    Load(#[from] attach::LoadError),
    #[error(transparent)]
    Tc(#[from] tc::TcAttachError),
    #[error(transparent)]
    Nat(#[from] nat::NatError),
    #[error(transparent)]
    Collect(#[from] collect::CollectError),
    #[error("writing --ready-file {path}")]
    ReadyFile {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot create -w {path} (give a file in a directory that exists and is writable, or - \
         for stdout)"
    )]
    Capture {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("--nat-hook conntrack: {0}")]
    Conntrack(String),
    #[error("setting up the event loop")]
    Runtime(#[source] io::Error),
    #[error("writing the output")]
    Output(#[source] io::Error),
}

impl RunError {
    /// True when the user asked for something that cannot exist (exit code 2).
    #[must_use]
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Resolve(e) => e.is_usage(),
            Self::Service(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// Runs a session to its end; the summary is written before returning.
///
/// # Errors
/// The first step of start-up that failed, or the output that could not be written.
pub fn run(cfg: &Config) -> Result<(), RunError> {
    collect::limit_allocator_slack();
    let subject = start::subject(cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let result = rt.block_on(trace(cfg, subject));
    // A pod lookup still under way (a slow API server) must not delay the exit.
    rt.shutdown_background();
    result
}

/// Start-up, the loop, and the end: whatever stopped the loop, what is left is reported and
/// the summary written.
async fn trace(cfg: &Config, subject: start::Subject) -> Result<(), RunError> {
    caps::preflight()?;
    // Before anything is loaded: a file that cannot be written stops here.
    let capture = start::capture_out(cfg)?;
    // Declared before `kernel` so that it drops after it, once our filters are gone.
    let mut created_qdiscs = CreatedQdiscs::default();
    // Subscribed before listing: a link created in between is reported, not missed.
    let monitor = start::link_monitor();
    let chosen = interfaces::choose(cfg.interfaces.as_deref())?;
    let mut kernel = start::load(cfg, &subject)?;
    let tc = start::attach_tc(cfg, &mut kernel, &chosen, &mut created_qdiscs)?;
    let conntrack = start::conntrack(&mut kernel, &subject)?;
    let mut collector = Collector::new(&mut kernel.ebpf)?;
    if let Some(flusher) = kernel.flusher.take() {
        collector.stage_with(flusher);
    }
    let capture = capture.map(|out| {
        let frames = collect::frames::Shared::default();
        collector.keep_frames(std::sync::Arc::clone(&frames));
        (out, frames)
    });
    // Everything is loaded and attached: keep only what the rest of the session uses.
    start::drop_privileges(cfg)?;
    start::announce(&subject, &chosen, &tc, &kernel.nat, kernel.drops.as_ref());
    if let Some(filter) = &cfg.filter {
        crate::diag::line(filter.describe());
    }
    // Before the ready file: a SIGINT right after it must still end with the summary.
    let signals = event_loop::signals()?;
    start::ready_file(cfg)?;

    let mut sink = start::sink(cfg, &subject, capture).map_err(RunError::Output)?;
    let drop_names = kernel.drop_names.take();
    let mut session = start::session(cfg, &subject, &chosen.ifaces, conntrack, drop_names);
    let started = hot::Started {
        tc: tc.attachments,
        monitor,
        ebpf: &mut kernel.ebpf,
        created: &mut created_qdiscs,
    };
    let mut hot = hot::Hot::new(cfg, &subject, &chosen, started)?;
    let result = session
        .event_loop(cfg, &mut collector, sink.as_mut(), signals, &mut hot)
        .await;
    drop(hot);
    let end = session.finish(&mut collector, sink.as_mut());
    drop(kernel.nat);
    drop(kernel.drops);
    result
        .and(end.or_else(ignore_broken_pipe))
        .or_else(ignore_broken_pipe)
        .map_err(RunError::Output)
}

fn ignore_broken_pipe(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(e)
    }
}
