//! Attribution during a tracing session: answers cached per connection, and the rules
//! re-read when they change (kube-proxy resyncs, ip-masq-agent, Calico) without a restart.
//!
//! A background thread asks the nftables generation id every 200 ms and hashes the ipsets
//! every 2 s (a full re-read every 2 s where neither tells: iptables-legacy, no `nf_tables`);
//! when they moved it re-reads the rules and compares a fingerprint of them (counters
//! excluded). New rules are taken, and the cache dropped, before the next journey is
//! explained. The collector never waits for a tool.

use std::{
    net::IpAddr,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{self, Receiver, TryRecvError},
    },
    thread,
    time::{Duration, Instant},
};

use tracer_common::Tuple;

use self::cache::Cache;
use super::Attribute;
use crate::{
    journey::{Attribution, Journey, Point},
    rules::{PacketCtx, Ruleset, genid, read::legacy_in_use, ruleset::fingerprint, source},
    traced::TracedAddrs,
};

/// How often ipsets are compared, and the rules re-read where no cheaper check exists.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
/// How often the nftables generation is asked (and the poller looks whether to stop).
const GENERATION_EVERY: Duration = Duration::from_millis(200);

/// The NAT steps of a journey (point, reply, before, after), and for a journey without SNAT
/// its first tuple and the interface it left by.
type Key = (
    Vec<(Point, bool, Tuple, Tuple)>,
    Option<(Tuple, Option<Rc<str>>)>,
);
/// The attribution of each NAT step, then of the last egress step.
type Answers = (Vec<Option<Arc<Attribution>>>, Option<Arc<Attribution>>);

/// The poller's updates, and the flag that stops it.
type Poller = (Receiver<Update>, Arc<AtomicBool>);

/// Rules that changed, and what reading them cost.
pub struct Update {
    pub rules: Arc<Ruleset>,
    pub read_cost: Duration,
    /// When the poller saw the change.
    pub seen: Instant,
    /// From then until the rules were in use.
    pub in_use_after: Duration,
}

/// Attribution for one session.
pub struct Explainer {
    rules: Option<Arc<Ruleset>>,
    /// Answers per connection and direction (bounded: [`cache`]).
    cache: Cache<Key, Answers>,
    /// The key of the journey being explained, built here so that a cached answer costs no
    /// allocation.
    key: Key,
    ctx: PacketCtx,
    updates: Option<Poller>,
    /// An update taken and not yet reported.
    taken: Option<Update>,
    /// How many times the poller saw the rules or ipsets move (any table, not only nat):
    /// the drop explainer re-reads its filter-type rules when it moved.
    changes: Option<Arc<AtomicU64>>,
}

impl Explainer {
    /// Reads the rules (reporting on stderr what cannot be read, once) and starts the poller.
    #[must_use]
    pub fn start(local_addrs: Vec<IpAddr>, sources: TracedAddrs) -> Self {
        // Before the read: a change during it shows as a new generation next time.
        let generation = genid::current();
        let rules = match Ruleset::load() {
            Ok(rules) => {
                for note in &rules.notes {
                    crate::diag::line(note);
                }
                Some(Arc::new(rules))
            }
            Err(e) => {
                crate::diag::line(format_args!("NAT steps will not name their rules: {e}"));
                None
            }
        };
        let mut me = Self::with_rules(rules, local_addrs, sources);
        if let Some(rules) = &me.rules {
            let seen = Seen {
                generation,
                ipsets: ipset_print(rules.uses_ipsets()),
            };
            let changes = Arc::new(AtomicU64::new(0));
            let poller = spawn_poller(
                fingerprint(rules),
                seen,
                rules.uses_ipsets(),
                Arc::clone(&changes),
            );
            me.updates = Some(poller);
            me.changes = Some(changes);
        }
        me
    }

    /// The poller's count of the changes it saw (`None`: no poller runs).
    #[must_use]
    pub fn changes(&self) -> Option<Arc<AtomicU64>> {
        self.changes.clone()
    }

    /// An explainer over fixed rules (tests, replays).
    #[must_use]
    pub fn with_rules(
        rules: Option<Arc<Ruleset>>,
        local_addrs: Vec<IpAddr>,
        sources: TracedAddrs,
    ) -> Self {
        Self {
            rules,
            cache: Cache::default(),
            key: Key::default(),
            ctx: PacketCtx {
                mark: 0,
                local_addrs,
                out_iface: None,
                sources,
            },
            updates: None,
            taken: None,
            changes: None,
        }
    }

    /// The last update taken since the previous call, for reporting.
    pub fn refresh(&mut self) -> Option<Update> {
        self.take_updates();
        self.taken.take()
    }

    /// Takes rules the poller found changed (a channel poll: nanoseconds, but once per batch
    /// of journeys is enough: see [`Self::explain_with_current_rules`]).
    pub fn take_updates(&mut self) {
        let Some((rx, _)) = self.updates.as_ref() else {
            return;
        };
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
        if let Some(mut update) = last {
            self.swap(Arc::clone(&update.rules));
            update.in_use_after = update.seen.elapsed();
            self.taken = Some(update);
        }
    }

    /// The traced pod's addresses changed (it was recreated): journeys are replayed from
    /// the new ones, and answers cached for the old ones are forgotten.
    pub fn set_sources(&mut self, sources: TracedAddrs) {
        if self.ctx.sources != sources {
            self.ctx.sources = sources;
            self.cache.clear();
        }
    }

    /// Uses `rules` from now on and forgets every cached answer.
    pub fn swap(&mut self, rules: Arc<Ruleset>) {
        self.rules = Some(rules);
        self.cache.clear();
    }

    /// [`Self::take_updates`], then [`Self::explain_with_current_rules`] (one journey at a
    /// time, as the tests go).
    #[cfg(test)]
    pub fn explain(&mut self, j: &mut Journey) {
        self.take_updates();
        self.explain_with_current_rules(j);
    }

    /// Names the rule of each NAT step, and why a journey that leaves unchanged was not
    /// SNATed. The journey is replayed from its first packet (mark 0 as it arrives), so
    /// marks set on the way (KUBE-MARK-MASQ) count for the SNAT decision.
    ///
    /// Every packet of a connection takes the same NAT steps, so the answer is cached per
    /// sequence of translations (the replay dominated the collector's time under load).
    /// Rules the poller found changed are used once [`Self::take_updates`] took them: once
    /// per batch of journeys (the channel poll per journey cost 1–2 % of the collector).
    pub fn explain_with_current_rules(&mut self, j: &mut Journey) {
        let Some(rules) = &self.rules else { return };
        let (nat, leaving) = &mut self.key;
        nat.clear();
        nat.extend(j.steps.iter().filter(|s| s.point().is_nat()).map(|s| {
            (
                s.point(),
                s.reply(),
                s.orig().copied().unwrap_or_default(),
                s.tuple,
            )
        }));
        let egress = j.steps.iter().rfind(|s| s.point() == Point::Egress);
        let plain = nat
            .iter()
            .all(|(p, reply, _, _)| *p == Point::Dnat && !reply);
        *leaving = match (plain, j.steps.first(), egress) {
            (true, Some(first), Some(e)) => Some((first.tuple, e.shared_iface().cloned())),
            _ => None,
        };
        if nat.is_empty() && leaving.is_none() {
            return;
        }
        if let Some((steps, egress)) = self.cache.get(&self.key) {
            let nat = j.steps.iter_mut().filter(|s| s.point().is_nat());
            for (step, attribution) in nat.zip(steps) {
                step.attribution.clone_from(attribution);
            }
            if let Some(e) = j.steps.iter_mut().rfind(|s| s.point() == Point::Egress) {
                e.attribution.clone_from(egress);
            }
            return;
        }
        rules.attribute_journey(j, &self.ctx);
        let steps = j
            .steps
            .iter()
            .filter(|s| s.point().is_nat())
            .map(|s| s.attribution.clone())
            .collect();
        let egress = j
            .steps
            .iter()
            .rfind(|s| s.point() == Point::Egress)
            .and_then(|s| s.attribution.clone());
        self.cache.insert(self.key.clone(), (steps, egress));
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
    let out = source::run("ipset", &["save"]).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&out.stdout, &mut h);
    Some(std::hash::Hasher::finish(&h))
}

/// Re-reads the rules when they may have changed, until told to stop or nobody listens.
/// Every [`GENERATION_EVERY`] the nftables generation is asked (microseconds); every
/// [`POLL_EVERY`] also the ipsets' hash, and a full read when iptables-legacy holds nat
/// rules or there is no generation to ask. Each change seen is counted in `moves`.
fn spawn_poller(first: u64, seen: Seen, uses_ipsets: bool, moves: Arc<AtomicU64>) -> Poller {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = Arc::clone(&stop);
    let spawned = thread::Builder::new()
        .name("pktrace-rules".into())
        .spawn(move || {
            let (mut known, mut seen, mut uses_ipsets) = (first, seen, uses_ipsets);
            let mut last_full = Instant::now();
            while !stop_flag.load(Ordering::Relaxed) {
                thread::sleep(GENERATION_EVERY);
                let started = Instant::now();
                let slow = last_full.elapsed() >= POLL_EVERY;
                let now = Seen {
                    generation: genid::current(),
                    ipsets: if slow {
                        ipset_print(uses_ipsets)
                    } else {
                        seen.ipsets
                    },
                };
                let blind = now.generation.is_none() || legacy_in_use();
                let changed = now != seen || (slow && blind);
                seen = now;
                if slow {
                    last_full = started;
                }
                if !changed {
                    continue;
                }
                moves.fetch_add(1, Ordering::Relaxed);
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
                    in_use_after: Duration::ZERO,
                };
                if tx.send(update).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        crate::diag::line(format_args!(
            "rules will not be re-read when they change: {e}"
        ));
    }
    (rx, stop)
}

mod cache;

#[cfg(test)]
mod tests {
    use tracer_common::PROTO_TCP;

    use super::*;
    use crate::{
        journey::{Ending, tuple},
        output::test_support::{nat, tc},
    };

    const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");

    fn rules(dump: &str) -> Arc<Ruleset> {
        Arc::new(Ruleset::from_raw(&crate::rules::ruleset::Raw {
            dumps: vec![("iptables".into(), dump.into())],
            ..Default::default()
        }))
    }

    fn journey() -> Journey {
        let ep = |s: &str| s.parse().unwrap();
        let out = tuple(PROTO_TCP, ep("10.13.76.46:40000"), ep("203.0.113.80:443"));
        let masq = tuple(PROTO_TCP, ep("10.13.76.4:40000"), ep("203.0.113.80:443"));
        Journey {
            steps: vec![
                tc(Point::Ingress, "azv46", out, 0),
                nat(Point::Snat, out, masq, 0, None),
                tc(Point::Egress, "eth0", masq, 0),
            ],
            ending: Ending::Left,
        }
    }

    fn why(e: &mut Explainer) -> String {
        let mut j = journey();
        e.explain(&mut j);
        j.steps[1]
            .attribution
            .as_ref()
            .and_then(|a| a.why.clone())
            .unwrap_or_default()
    }

    #[test]
    fn cached_answers_go_when_the_rules_change() {
        let node = vec!["10.13.76.4".parse().unwrap()];
        let mut e = Explainer::with_rules(Some(rules(AZURE)), node, TracedAddrs::default());
        assert!(why(&mut e).starts_with("MASQUERADE by IP-MASQ-AGENT rule 3"));
        assert_eq!(e.cache.len(), 1);
        assert!(
            why(&mut e).starts_with("MASQUERADE by IP-MASQ-AGENT rule 3"),
            "cached"
        );
        let changed = AZURE.replace(
            "-A IP-MASQ-AGENT -d 10.13.0.0/16",
            "-A IP-MASQ-AGENT -d 203.0.113.0/24 -j MASQUERADE\n-A IP-MASQ-AGENT -d 10.13.0.0/16",
        );
        let (tx, rx) = mpsc::channel();
        e.updates = Some((rx, Arc::new(AtomicBool::new(false))));
        tx.send(Update {
            rules: rules(&changed),
            read_cost: Duration::from_millis(7),
            seen: Instant::now(),
            in_use_after: Duration::ZERO,
        })
        .unwrap();
        assert!(
            why(&mut e).starts_with("MASQUERADE by IP-MASQ-AGENT rule 1"),
            "{}",
            why(&mut e)
        );
        let update = e.refresh().expect("reported once");
        assert_eq!(update.read_cost, Duration::from_millis(7));
        assert!(e.refresh().is_none());
        drop(tx);
        assert!(e.refresh().is_none());
        assert!(e.updates.is_none(), "a gone poller is forgotten");
    }
}
