//! Attribution during a tracing session: answers cached per connection, and the rules
//! re-read when they change (kube-proxy resyncs, ip-masq-agent, Calico) without a restart.
//!
//! A background thread re-runs the save commands every [`POLL_EVERY`] and compares a
//! fingerprint of the parsed rules (counters excluded); when it changes, the new rules are
//! handed over and the cache is dropped at the collector's next housekeeping tick. The
//! collector never waits for a tool.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, TryRecvError},
    },
    thread,
    time::{Duration, Instant},
};

use tracer_common::Tuple;

use super::{
    Attribute, PacketCtx, genid,
    ruleset::{fingerprint, legacy_in_use},
};
use crate::{
    explain::Ruleset,
    journey::{Attribution, Journey, Point},
};

/// How often the rules are re-read.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
/// How often the poller looks whether it should stop.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// Most cached attributions (one per distinct connection and direction).
const CACHE: usize = 4096;

/// The NAT steps of a journey (point, reply, before, after), and for a journey without SNAT
/// its first tuple and the interface it left by.
type Key = (
    Vec<(Point, bool, Tuple, Tuple)>,
    Option<(Tuple, Option<String>)>,
);
/// The attribution of each NAT step, then of the last egress step.
type Answers = (Vec<Option<Attribution>>, Option<Attribution>);

/// Rules that changed, and what reading them cost.
pub struct Update {
    pub rules: Arc<Ruleset>,
    pub read_cost: Duration,
    /// When the poller saw the change.
    pub seen: Instant,
}

/// Attribution for one session.
pub struct Explainer {
    rules: Option<Arc<Ruleset>>,
    cache: HashMap<Key, Answers>,
    ctx: PacketCtx,
    updates: Option<(Receiver<Update>, Arc<AtomicBool>)>,
}

impl Explainer {
    /// Reads the rules (reporting on stderr what cannot be read, once) and starts the poller.
    #[must_use]
    pub fn start(local_addrs: Vec<IpAddr>, sources: Vec<IpAddr>) -> Self {
        // Before the read: a change during it shows as a new generation next time.
        let generation = genid::current();
        let rules = match Ruleset::load() {
            Ok(rules) => {
                for note in &rules.notes {
                    eprintln!("pktrace: {note}");
                }
                Some(Arc::new(rules))
            }
            Err(e) => {
                eprintln!("pktrace: NAT steps will not name their rules: {e}");
                None
            }
        };
        let mut me = Self::with_rules(rules, local_addrs, sources);
        if let Some(rules) = &me.rules {
            let seen = Seen {
                generation,
                ipsets: ipset_print(rules.uses_ipsets()),
            };
            me.updates = Some(spawn_poller(fingerprint(rules), seen, rules.uses_ipsets()));
        }
        me
    }

    /// An explainer over fixed rules (tests, replays).
    #[must_use]
    pub fn with_rules(
        rules: Option<Arc<Ruleset>>,
        local_addrs: Vec<IpAddr>,
        sources: Vec<IpAddr>,
    ) -> Self {
        Self {
            rules,
            cache: HashMap::new(),
            ctx: PacketCtx {
                mark: 0,
                local_addrs,
                out_iface: None,
                sources,
            },
            updates: None,
        }
    }

    /// Takes rules the poller found changed; returns the update for reporting.
    pub fn refresh(&mut self) -> Option<Update> {
        let (rx, _) = self.updates.as_ref()?;
        let mut last = None;
        loop {
            match rx.try_recv() {
                Ok(update) => last = Some(update),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.updates = None;
                    break;
                }
            }
        }
        let update = last?;
        self.swap(Arc::clone(&update.rules));
        Some(update)
    }

    /// Uses `rules` from now on and forgets every cached answer.
    pub fn swap(&mut self, rules: Arc<Ruleset>) {
        self.rules = Some(rules);
        self.cache.clear();
    }

    /// Names the rule of each NAT step, and why a journey that leaves unchanged was not
    /// SNATed. The journey is replayed from its first packet (mark 0 as it arrives), so
    /// marks set on the way (KUBE-MARK-MASQ) count for the SNAT decision.
    ///
    /// Every packet of a connection takes the same NAT steps, so the answer is cached per
    /// sequence of translations (the replay dominated the collector's time under load).
    pub fn explain(&mut self, j: &mut Journey) {
        let Some(rules) = &self.rules else { return };
        let nat: Vec<_> = j
            .steps
            .iter()
            .filter(|s| s.point.is_nat())
            .map(|s| (s.point, s.reply, s.orig.unwrap_or_default(), s.tuple))
            .collect();
        let egress = j.steps.iter().rfind(|s| s.point == Point::Egress);
        let plain = nat
            .iter()
            .all(|(p, reply, _, _)| *p == Point::Dnat && !reply);
        let leaving = match (plain, j.steps.first(), egress) {
            (true, Some(first), Some(e)) => Some((first.tuple, e.iface.clone())),
            _ => None,
        };
        if nat.is_empty() && leaving.is_none() {
            return;
        }
        let key: Key = (nat, leaving);
        if let Some((steps, egress)) = self.cache.get(&key) {
            let nat = j.steps.iter_mut().filter(|s| s.point.is_nat());
            for (step, attribution) in nat.zip(steps) {
                step.attribution.clone_from(attribution);
            }
            if let Some(e) = j.steps.iter_mut().rfind(|s| s.point == Point::Egress) {
                e.attribution.clone_from(egress);
            }
            return;
        }
        rules.attribute_journey(j, &self.ctx);
        if self.cache.len() >= CACHE {
            self.cache.clear();
        }
        let steps = j
            .steps
            .iter()
            .filter(|s| s.point.is_nat())
            .map(|s| s.attribution.clone())
            .collect();
        let egress = j
            .steps
            .iter()
            .rfind(|s| s.point == Point::Egress)
            .and_then(|s| s.attribution.clone());
        self.cache.insert(key, (steps, egress));
    }
}

impl Drop for Explainer {
    fn drop(&mut self) {
        if let Some((_, stop)) = &self.updates {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// What says cheaply whether the rules may have changed: the nftables generation (bumped
/// by iptables-nft and nft alike) and a hash of the ipsets the rules test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    generation: Option<u32>,
    ipsets: Option<u64>,
}

/// A hash of `ipset save`, when the rules test ipsets.
fn ipset_print(uses_ipsets: bool) -> Option<u64> {
    if !uses_ipsets {
        return None;
    }
    let out = super::source::run("ipset", &["save"]).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&out.stdout, &mut h);
    Some(std::hash::Hasher::finish(&h))
}

/// Re-reads the rules when they may have changed (checked every [`POLL_EVERY`]: the
/// generation and ipsets cheaply; a full read when those changed, when there is no
/// generation to ask, or when iptables-legacy holds nat rules) until told to stop or nobody
/// listens.
fn spawn_poller(first: u64, seen: Seen, uses_ipsets: bool) -> (Receiver<Update>, Arc<AtomicBool>) {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = Arc::clone(&stop);
    let spawned = thread::Builder::new()
        .name("pktrace-rules".into())
        .spawn(move || {
            let (mut known, mut seen, mut uses_ipsets) = (first, seen, uses_ipsets);
            'poll: loop {
                let wake = Instant::now() + POLL_EVERY;
                while Instant::now() < wake {
                    if stop_flag.load(Ordering::Relaxed) {
                        break 'poll;
                    }
                    thread::sleep(STOP_CHECK);
                }
                let started = Instant::now();
                let now = Seen {
                    generation: genid::current(),
                    ipsets: ipset_print(uses_ipsets),
                };
                let quiet = now == seen && now.generation.is_some() && !legacy_in_use();
                seen = now;
                if quiet {
                    continue;
                }
                let Ok(rules) = Ruleset::load() else { continue };
                uses_ipsets = rules.uses_ipsets();
                let print = fingerprint(&rules);
                if print == known {
                    continue;
                }
                known = print;
                let update = Update {
                    rules: Arc::new(rules),
                    read_cost: started.elapsed(),
                    seen: Instant::now(),
                };
                if tx.send(update).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("pktrace: rules will not be re-read when they change: {e}");
    }
    (rx, stop)
}
