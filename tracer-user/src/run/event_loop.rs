//! The loop: waits on the ring buffer, conntrack's socket, link events, the timers and the
//! signals, and hands each to the session or to [`Hot`].

use std::{io, time::Duration};

use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{Signal, SignalKind, signal},
    time::{Instant, Interval, MissedTickBehavior, interval, sleep_until},
};

use super::{RunError, hot::Hot, session::Session};
use crate::{collect::Collector, config::Config, output::Sink};

/// How often the collector drains the ring buffer when the kernel did not wake it.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// How often kernel counters are read (loss reports) and idle journeys closed.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(250);

/// SIGINT and SIGTERM, which end the loop.
pub(super) type Signals = (Signal, Signal);

/// Subscribes to SIGINT and SIGTERM.
pub(super) fn signals() -> Result<Signals, RunError> {
    Ok((
        signal(SignalKind::interrupt()).map_err(RunError::Runtime)?,
        signal(SignalKind::terminate()).map_err(RunError::Runtime)?,
    ))
}

fn ticker(every: Duration) -> Interval {
    let mut t = interval(every);
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    t
}

impl Session {
    /// Runs until a signal, `-d` or `-c` ends the session (or the output fails).
    pub(super) async fn event_loop(
        &mut self,
        cfg: &Config,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
        (mut sigint, mut sigterm): Signals,
        hot: &mut Hot<'_>,
    ) -> io::Result<()> {
        // SAFETY: the ring buffer's fd stays open and the same for as long as `collector`,
        // which outlives this AsyncFd.
        let mut ring =
            unsafe { AsyncFd::register_with_interest(RawRing(collector), Interest::READABLE) }
                .map_err(io::Error::from)?;
        let ct_fd = self.conntrack_fd()?;
        let (mut drain, mut chores) = (ticker(DRAIN_EVERY), ticker(HOUSEKEEPING_EVERY));
        let deadline = cfg.limits.duration.map(|d| Instant::now() + d);
        let stop_at =
            sleep_until(deadline.unwrap_or_else(|| Instant::now() + Duration::from_hours(8760)));
        tokio::pin!(stop_at);
        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    // Cleared before the drain: the kernel's wakeups are edge-triggered, and
                    // one that comes while draining must not be cleared with this one.
                    guard.clear_ready();
                    self.drain(guard.get_inner_mut().0, sink)?;
                }
                _ = drain.tick() => {
                    // What CPUs quiet since the last tick left staged comes out with this drain.
                    ring.get_mut().0.flush_staged(false);
                    self.drain(ring.get_mut().0, sink)?;
                }
                guard = readable(ct_fd.as_ref()) => {
                    // Read at once: the kernel follows a NATed flow only once this is done.
                    guard?.clear_ready();
                    self.poll_conntrack(ring.get_mut().0)?;
                }
                _ = chores.tick() => {
                    self.housekeeping(ring.get_mut().0, sink)?;
                    self.follow_pod(cfg, hot).await;
                    self.follow_service(hot);
                }
                events = hot.link_events(), if hot.links.is_some() => {
                    // Journeys must be up to date before one is closed for its interface.
                    self.catch_up(ring.get_mut().0, sink)?;
                    hot.apply(events, &mut self.correlator);
                    self.output(sink)?;
                }
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                () = &mut stop_at, if deadline.is_some() => break,
            }
            if self.limit_reached() {
                break;
            }
        }
        Ok(())
    }

    /// Conntrack's socket for tokio's readiness, with `--nat-hook conntrack`.
    fn conntrack_fd(&self) -> io::Result<Option<AsyncFd<Fd>>> {
        self.conntrack
            .as_ref()
            // SAFETY: the socket is owned by `self.conntrack`, which outlives the AsyncFd (it
            // lives in `event_loop` only).
            .map(|c| unsafe { AsyncFd::register_with_interest(Fd(c.fd()), Interest::READABLE) })
            .transpose()
            .map_err(io::Error::from)
    }

    /// Moves the traced addresses when the followed pod's changed: the kernel's filter,
    /// conntrack's filter and the explainer's sources, from the one new set.
    async fn follow_pod(&mut self, cfg: &Config, hot: &mut Hot<'_>) {
        let Some(addrs) = hot.follow_pod(cfg).await else {
            return;
        };
        if let Some(ct) = self.conntrack.as_mut() {
            ct.set_traced(addrs.clone());
        }
        // Attribution replays the pod's packets from its new addresses.
        self.explainer.set_sources(addrs);
    }

    /// Moves the traced addresses when the followed service's changed in re-read rules.
    fn follow_service(&mut self, hot: &mut Hot<'_>) {
        let Some(rules) = self.rules_changed.take() else {
            return;
        };
        let Some(addrs) = hot.follow_service(&rules) else {
            return;
        };
        if let Some(ct) = self.conntrack.as_mut() {
            ct.set_traced(addrs.clone());
        }
        self.explainer.set_sources(addrs);
    }
}

/// Waits until `fd` is readable; never, without one.
async fn readable(
    fd: Option<&AsyncFd<Fd>>,
) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, Fd>> {
    match fd {
        Some(fd) => fd.readable().await,
        None => std::future::pending().await,
    }
}

/// A descriptor owned elsewhere, for readiness only.
struct Fd(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for Fd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// The collector as a raw fd for tokio's readiness.
struct RawRing<'a>(&'a mut Collector);

impl std::os::fd::AsRawFd for RawRing<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}
