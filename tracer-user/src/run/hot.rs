//! What follows the node while the session runs: attachments of interfaces that come and go,
//! and the followed pod's addresses.

use std::{collections::HashSet, net::IpAddr};

use aya::Ebpf;
use tokio::io::unix::AsyncFd;

use super::{
    RunError,
    interfaces::Chosen,
    start::{LINKS_LOST, Subject},
};
use crate::{
    attach,
    config::{Config, Target},
    diag,
    follow::{self, Action, PodWatch},
    interfaces::{
        clsact::CreatedQdiscs,
        links::{Batch, LinkEvent, LinkMonitor},
        tc::{self, Iface, TcAttachments},
    },
    journey::correlate::Correlator,
    resolve,
    rules::Ruleset,
    services::follow::ServiceWatch,
    traced::TracedAddrs,
    util,
};

/// Most link-event datagrams read per wake-up (the rest wait for the next turn of the loop).
const LINK_READS: usize = 64;

pub(super) struct Hot<'a> {
    ebpf: &'a mut Ebpf,
    tc: TcAttachments,
    created: &'a mut CreatedQdiscs,
    pub(super) links: Option<AsyncFd<LinkMonitor>>,
    verbose: bool,
    /// Interfaces an attach failed on (reported once each).
    failed: HashSet<u32>,
    pod: Option<PodWatch>,
    /// The session's traced addresses (see [`TracedAddrs`]).
    traced: TracedAddrs,
    /// With `--svc`: the service, read again when the rules change.
    service: Option<ServiceWatch>,
    /// A lookup of the followed pod under way.
    lookup: Option<tokio::task::JoinHandle<Option<Vec<IpAddr>>>>,
    /// The interface patterns chosen at start (`--interfaces`, or the default for the CNI
    /// found): interfaces that appear later are attached when they match.
    patterns: Vec<String>,
}

/// What [`Hot`] takes over from start-up.
pub(super) struct Started<'a> {
    pub(super) tc: TcAttachments,
    pub(super) monitor: Option<LinkMonitor>,
    pub(super) ebpf: &'a mut Ebpf,
    pub(super) created: &'a mut CreatedQdiscs,
}

impl<'a> Hot<'a> {
    /// Follows the interfaces and, for `--pod`, the pod's addresses.
    pub(super) fn new(
        cfg: &Config,
        subject: &Subject,
        chosen: &Chosen,
        started: Started<'a>,
    ) -> Result<Self, RunError> {
        // SAFETY: the monitor owns its socket, which stays open as long as the AsyncFd holds it.
        let links = started
            .monitor
            .map(|m| unsafe { AsyncFd::register(m) }.map_err(|e| RunError::Runtime(e.into())))
            .transpose()?;
        let pod = match &cfg.target {
            Target::Pod { .. } => {
                Some(PodWatch::new(subject.label.clone(), cfg.state_file.clone()))
            }
            _ => None,
        };
        Ok(Self {
            ebpf: started.ebpf,
            tc: started.tc,
            created: started.created,
            links,
            verbose: cfg.verbose > 0,
            failed: HashSet::new(),
            pod,
            traced: subject.addrs.clone(),
            service: subject.service.clone().map(ServiceWatch::new),
            lookup: None,
            patterns: chosen.choice.patterns.clone(),
        })
    }

    /// Waits for link notifications and returns them (a lost batch becomes a re-listing).
    pub(super) async fn link_events(&mut self) -> Vec<LinkEvent> {
        let Some(links) = &self.links else {
            return std::future::pending().await;
        };
        let mut events = Vec::new();
        let Ok(mut guard) = links.readable().await else {
            return events;
        };
        for _ in 0..LINK_READS {
            match guard.try_io(|fd| fd.get_ref().recv()) {
                Ok(Ok(Batch::Events(evs))) => events.extend(evs),
                Ok(Ok(Batch::Overflow)) => {
                    let attached = self.tc.attached();
                    events.extend(follow::resync(&attached, &tc::list_ifaces()));
                }
                Ok(Err(e)) => {
                    diag::once(
                        LINKS_LOST,
                        format_args!("stopped following interfaces: link events: {e}"),
                    );
                    self.links = None;
                    break;
                }
                Err(_would_block) => break,
            }
        }
        events
    }

    /// Applies link events: attach, rename, detach, forget; journeys last seen on a vanished
    /// interface end in the correlator's queue of completed journeys.
    pub(super) fn apply(&mut self, events: Vec<LinkEvent>, correlator: &mut Correlator) {
        for ev in events {
            if let LinkEvent::Del { index, .. } = ev {
                self.failed.remove(&index);
            }
            match follow::decide(&ev, self.tc.name(ev.index()), &self.patterns) {
                Action::Attach(iface) => self.attach(&iface, correlator),
                Action::Rename { index, name } => {
                    self.tc.rename(index, &name);
                    correlator.set_iface(index, tc::host_if(&name, tc::role_of(index, &name)));
                }
                Action::Detach { index, name } => {
                    self.tc.detach(self.ebpf, index);
                    if self.verbose {
                        diag::line(format_args!(
                            "detached from {}: renamed out of --interfaces",
                            util::safe(&name)
                        ));
                    }
                }
                Action::Gone { index } => {
                    correlator.interface_gone(index);
                    let name = self.tc.forget(self.ebpf, index, self.created);
                    if self.verbose {
                        diag::line(format_args!(
                            "{} is gone",
                            util::safe(name.as_deref().unwrap_or("?"))
                        ));
                    }
                }
                Action::Nothing => {}
            }
        }
    }

    /// Attaches to an interface that appeared (or was renamed into `--interfaces`); a failure
    /// is said once per interface.
    fn attach(&mut self, iface: &Iface, correlator: &mut Correlator) {
        if let Some(pod) = &mut self.pod {
            pod.dirty = true;
        }
        let attached: Vec<String> = self
            .tc
            .attached()
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        let mode = self
            .tc
            .policy
            .mode_for_new(&iface.name, &attached, &self.patterns);
        match self.tc.attach(self.ebpf, iface, mode, self.created) {
            Ok(()) => {
                self.failed.remove(&iface.index);
                correlator.set_iface(
                    iface.index,
                    tc::host_if(&iface.name, tc::role_of(iface.index, &iface.name)),
                );
                if self.verbose {
                    diag::line(format_args!(
                        "attached to {} ({})",
                        util::safe(&iface.name),
                        mode.as_str()
                    ));
                }
            }
            // Gone again already (created and deleted at once): nothing to say.
            Err(_) if !tc::list_ifaces().iter().any(|i| i.index == iface.index) => {}
            Err(e) if self.failed.insert(iface.index) => diag::line(e),
            Err(_) => {}
        }
    }

    /// Reads the followed service again from re-read `rules` and moves the in-kernel filter
    /// to its new addresses; returns them when they changed.
    pub(super) fn follow_service(&mut self, rules: &Ruleset) -> Option<TracedAddrs> {
        let watch = self.service.as_mut()?;
        let change = watch.update(rules, &self.traced)?;
        self.traced = change.now.clone();
        match attach::track_addrs(self.ebpf, &change.changes.added)
            .and_then(|()| attach::untrack_addrs(self.ebpf, &change.changes.removed))
        {
            Ok(()) => diag::line(&change.line),
            Err(e) => diag::line(format_args!(
                "{}, but the kernel filter could not be updated: {e}",
                change.line
            )),
        }
        Some(change.now)
    }

    /// Resolves the followed pod again when its state file changed or a link appeared, and
    /// moves the in-kernel filter to its new addresses. The lookup may ask the container
    /// runtime or the API server (seconds), so it runs off the event loop, one at a time; its
    /// answer is taken on a later tick.
    ///
    /// Returns the new set of traced addresses when the pod's changed.
    pub(super) async fn follow_pod(&mut self, cfg: &Config) -> Option<TracedAddrs> {
        let pod = self.pod.as_mut()?;
        if self
            .lookup
            .as_ref()
            .is_some_and(tokio::task::JoinHandle::is_finished)
        {
            let found = match self.lookup.take() {
                Some(handle) => handle.await.ok().flatten(),
                None => None,
            };
            // Not resolvable for now (deleted, not recreated yet): keep the old addresses.
            let (now, changes) = found.and_then(|ips| self.traced.replaced_by(ips))?;
            let line = pod.moved_line(&now, &changes.removed);
            self.traced = now.clone();
            match attach::track_addrs(self.ebpf, &changes.added)
                .and_then(|()| attach::untrack_addrs(self.ebpf, &changes.removed))
            {
                Ok(()) => diag::line(line),
                Err(e) => diag::line(format_args!(
                    "{line}, but the kernel filter could not be updated: {e}"
                )),
            }
            return Some(now);
        }
        if self.lookup.is_some() || !pod.due() {
            return None;
        }
        let Target::Pod { namespace, name } = &cfg.target else {
            return None;
        };
        let sources = resolve::Sources::for_node(&cfg.state_file, cfg.kubeconfig.as_deref());
        let (namespace, name) = (namespace.clone(), name.clone());
        self.lookup = Some(tokio::task::spawn_blocking(move || {
            resolve::resolve(&sources, &namespace, &name)
                .ok()
                .map(|found| found.pod.ips)
        }));
        None
    }
}
