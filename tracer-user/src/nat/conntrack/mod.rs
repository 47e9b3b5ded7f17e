//! `--nat-hook conntrack` (DESIGN.md "NAT observation" 4): conntrack's events over netlink,
//! joined with the tc events in user space. No NAT program is loaded, so it works where the
//! kernel allows none (no BTF, lockdown, old kernels); it cannot time a NAT step
//! (`latency_ns` null).
//!
//! For each NATed connection of a traced address conntrack reports, user space follows the
//! translated packets in the kernel's filter as the NAT programs would ([`gates`]), and the
//! join puts the NAT steps into the journeys ([`NatTable`], `journey::correlate::conntrack`).
//! What is late by nature: conntrack reports a connection once its first packet has passed
//! every NAT hook, so that packet's hops after a translation that took it away from the traced
//! addresses (MASQUERADE to the node's address) are not seen, and a reply that comes back
//! before user space has read the report is seen only from where it carries a traced address
//! again (README "What each hook needs").

mod gates;
pub mod monitor;
pub mod parse;
pub mod table;

use std::{io, net::IpAddr};

pub use gates::Gates;
pub use monitor::{CtMonitor, Read};
pub use parse::CtEntry;
pub use table::{Chain, NatTable, Translation};
use tracer_common::{FAMILY_IPV6, Tuple};

use crate::{collect::Collector, traced::TracedAddrs};

/// Most datagrams read per call of [`Conntrack::poll`] (the rest wait for the next).
const READS: usize = 256;

/// What went wrong or was dropped, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Times the kernel dropped events for a full socket.
    pub overflows: u64,
    /// Messages that could not be read.
    pub unreadable: u64,
    /// Connections whose translated packets could not be followed in the kernel (a map write
    /// failed), and the last such failure.
    pub unfollowed: u64,
    pub follow_error: Option<io::ErrorKind>,
}

/// The conntrack side of a session.
pub struct Conntrack {
    monitor: CtMonitor,
    /// `None` when every packet is traced (nothing to follow).
    gates: Option<Gates>,
    traced: TracedAddrs,
    losses: Losses,
}

impl Conntrack {
    #[must_use]
    pub fn new(monitor: CtMonitor, gates: Option<Gates>, traced: TracedAddrs) -> Self {
        Self {
            monitor,
            gates,
            traced,
            losses: Losses::default(),
        }
    }

    /// The traced addresses changed (a followed pod moved).
    pub fn set_traced(&mut self, traced: TracedAddrs) {
        self.traced = traced;
    }

    /// The socket, for readiness.
    #[must_use]
    pub fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.monitor)
    }

    /// Reads what conntrack reported, notes the NATed connections in `table` (the join's, `None`
    /// when the join does not use them), and follows the traced ones in the kernel. Returns the losses seen so far (a connection that could not be
    /// followed is one of them, not an error: its journeys are still joined).
    ///
    /// # Errors
    /// The socket failed (not `WouldBlock`).
    pub fn poll(
        &mut self,
        mut table: Option<&mut NatTable>,
        collector: &mut Collector,
    ) -> io::Result<Losses> {
        for _ in 0..READS {
            let parsed = match self.monitor.recv() {
                Ok(Read::Parsed(p)) => p,
                Ok(Read::Overflow) => {
                    self.losses.overflows += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            self.losses.unreadable += parsed.unreadable;
            for e in parsed.entries {
                let Some(table) = table.as_deref_mut() else {
                    continue;
                };
                if table.insert(e)
                    && self.is_traced(&e)
                    && let Err(err) = self.follow(&e, collector)
                {
                    self.losses.unfollowed += 1;
                    self.losses.follow_error = Some(err.kind());
                }
            }
        }
        Ok(self.losses)
    }

    fn is_traced(&self, e: &CtEntry) -> bool {
        [&e.orig, &e.reply].iter().any(|t| {
            [&t.saddr, &t.daddr]
                .into_iter()
                .any(|a| self.traced.contains(&ip(t.family, a)))
        })
    }

    /// Follows every packet of both directions of `e` in the kernel.
    fn follow(&mut self, e: &CtEntry, collector: &mut Collector) -> io::Result<()> {
        let Some(gates) = self.gates.as_mut() else {
            return Ok(());
        };
        let tuples: Vec<Tuple> = [false, true]
            .into_iter()
            .filter_map(|reply| Chain::of(e, reply))
            .flat_map(|c| c.tuples().to_vec())
            .collect();
        gates.open(&tuples)?;
        for t in &tuples {
            collector.follow(t);
            collector.follow(&t.reversed());
        }
        Ok(())
    }
}

/// A tuple's address as an [`IpAddr`] (IPv4 in the first four bytes).
fn ip(family: u8, a: &[u8; 16]) -> IpAddr {
    if family == FAMILY_IPV6 {
        IpAddr::from(*a)
    } else {
        IpAddr::from([a[0], a[1], a[2], a[3]])
    }
}
