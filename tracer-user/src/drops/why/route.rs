//! Where the node's routes send a dropped packet: the interface it was leaving by and the
//! neighbour it was waiting for, which the drop hook does not report (its `skb->dev` is the
//! interface the packet came in by until the packet is routed out). Asked over rtnetlink
//! (`util::route`), answers kept a short while per destination.

use std::{
    collections::HashMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use crate::util::route;

/// How long a route answer is used before it is asked again.
const KEEP: Duration = Duration::from_secs(2);
/// Most destinations remembered.
const MOST: usize = 1024;

/// The node's route towards one destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The interface the route leaves by.
    pub dev: String,
    /// The neighbour the packet is handed to: the route's gateway, else the destination
    /// itself (a connected network).
    pub next_hop: IpAddr,
}

/// Asks the route towards a destination (replaced in tests).
pub type Lookup = fn(IpAddr) -> Option<Route>;

/// The route towards `dst` in pktrace's namespace (the node's); `None` when none forwards.
#[must_use]
pub fn lookup(dst: IpAddr) -> Option<Route> {
    let hop = route::towards(dst)?;
    Some(Route {
        dev: route::ifname(hop.ifindex)?,
        next_hop: hop.gateway.unwrap_or(dst),
    })
}

/// Route answers per destination.
#[derive(Debug, Default)]
pub struct Routes {
    known: HashMap<IpAddr, (Instant, Option<Route>)>,
}

impl Routes {
    /// The route towards `dst`, asked with `lookup` unless asked in the last 2 s.
    pub fn get(&mut self, lookup: Lookup, dst: IpAddr) -> Option<Route> {
        if let Some((at, route)) = self.known.get(&dst)
            && at.elapsed() < KEEP
        {
            return route.clone();
        }
        let route = lookup(dst);
        if self.known.len() >= MOST {
            self.known.clear();
        }
        self.known.insert(dst, (Instant::now(), route.clone()));
        route
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        static CALLS: Cell<u32> = const { Cell::new(0) };
    }

    #[expect(clippy::unnecessary_wraps, reason = "the shape of a Lookup")]
    fn eth0(dst: IpAddr) -> Option<Route> {
        CALLS.with(|c| c.set(c.get() + 1));
        Some(Route {
            dev: "eth0".into(),
            next_hop: dst,
        })
    }

    #[test]
    fn answers_are_kept_per_destination() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut routes = Routes::default();
        for _ in 0..3 {
            assert_eq!(routes.get(eth0, ip("10.13.1.99")).unwrap().dev, "eth0");
        }
        assert_eq!(CALLS.with(Cell::get), 1);
        routes.get(eth0, ip("10.13.1.98"));
        assert_eq!(CALLS.with(Cell::get), 2);
    }

    #[test]
    fn a_local_address_has_no_way_out() {
        assert_eq!(lookup("127.0.0.1".parse().unwrap()), None);
    }
}
