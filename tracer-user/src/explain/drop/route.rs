//! Where the node's routes send a dropped packet: the interface it was leaving by and the
//! neighbour it was waiting for, which the drop hook does not report (its `skb->dev` is the
//! interface the packet came in by until the packet is routed out). Asked with `ip -o route
//! get`, answers kept a short while per destination so a burst of drops runs the tool once.

use std::{
    collections::HashMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use crate::explain::read::Run;

/// How long a route answer is used before it is asked again.
const KEEP: Duration = Duration::from_secs(2);
/// Most destinations remembered.
const MOST: usize = 1024;

/// The node's route towards one destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The interface the route leaves by (`dev`).
    pub dev: String,
    /// The neighbour the packet is handed to: the route's gateway (`via`), else the
    /// destination itself (a connected network).
    pub next_hop: IpAddr,
}

/// The route of `ip -o route get <dst>`'s first line; `None` for a route that does not
/// forward (`unreachable`, `throw`, `blackhole`, `prohibit`, `local`) or an error.
#[must_use]
pub fn parse(dst: IpAddr, text: &str) -> Option<Route> {
    let line = text.lines().next()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if matches!(
        first,
        "unreachable" | "throw" | "blackhole" | "prohibit" | "local" | "broadcast"
    ) {
        return None;
    }
    let (mut dev, mut via) = (None, None);
    while let Some(w) = words.next() {
        match w {
            "dev" => dev = words.next(),
            "via" => {
                let v = words.next()?;
                // `via inet6 fe80::1` names the family first.
                let v = if v == "inet" || v == "inet6" {
                    words.next()?
                } else {
                    v
                };
                via = v.parse().ok();
            }
            _ => {}
        }
    }
    Some(Route {
        dev: dev?.to_owned(),
        next_hop: via.unwrap_or(dst),
    })
}

/// Route answers per destination, asked through a tool runner.
#[derive(Debug, Default)]
pub struct Routes {
    known: HashMap<IpAddr, (Instant, Option<Route>)>,
}

impl Routes {
    /// The route towards `dst`, asked with `run` unless asked in the last 2 s.
    pub fn get(&mut self, run: Run<'_>, dst: IpAddr) -> Option<Route> {
        if let Some((at, route)) = self.known.get(&dst)
            && at.elapsed() < KEEP
        {
            return route.clone();
        }
        let text = dst.to_string();
        let route = run("ip", &["-o", "route", "get", &text])
            .ok()
            .and_then(|out| parse(dst, &out.stdout));
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
    use crate::explain::source::Output;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connected_gateway_and_not_forwarding_routes() {
        // iproute2 6.1's output on the lab node (the `\` joins the cache line).
        let connected = "10.13.1.99 dev eth0 src 10.13.76.4 uid 0 \\    cache ";
        assert_eq!(
            parse(ip("10.13.1.99"), connected),
            Some(Route {
                dev: "eth0".into(),
                next_hop: ip("10.13.1.99")
            })
        );
        let gw = "203.0.113.80 via 10.13.0.1 dev eth0 src 10.13.76.4 uid 0 \\    cache ";
        assert_eq!(
            parse(ip("203.0.113.80"), gw).unwrap().next_hop,
            ip("10.13.0.1")
        );
        let v6 = "2001:db8::9 via inet6 fe80::1 dev eth0 src 2001:db8::4 metric 1024 pref medium";
        assert_eq!(
            parse(ip("2001:db8::9"), v6).unwrap().next_hop,
            ip("fe80::1")
        );
        let calico = "10.13.76.26 dev cali1c2d3e4f5a6 src 10.13.76.4 uid 0 \\    cache ";
        assert_eq!(
            parse(ip("10.13.76.26"), calico).unwrap().dev,
            "cali1c2d3e4f5a6"
        );
        for none in [
            "throw 198.51.100.7 uid 0 \\    cache ",
            "unreachable 198.51.100.7 uid 0",
            "local 10.13.76.4 dev lo src 10.13.76.4 uid 0",
            "",
        ] {
            assert_eq!(parse(ip("198.51.100.7"), none), None, "{none}");
        }
    }

    #[test]
    fn answers_are_kept_per_destination() {
        let calls = Cell::new(0);
        let run = |prog: &str, args: &[&str]| {
            assert_eq!(
                (prog, args[..3].to_vec()),
                ("ip", vec!["-o", "route", "get"])
            );
            calls.set(calls.get() + 1);
            Ok(Output {
                stdout: format!("{} dev eth0 src 10.13.76.4 uid 0", args[3]),
            })
        };
        let mut routes = Routes::default();
        for _ in 0..3 {
            assert_eq!(routes.get(&run, ip("10.13.1.99")).unwrap().dev, "eth0");
        }
        assert_eq!(calls.get(), 1);
        routes.get(&run, ip("10.13.1.98"));
        assert_eq!(calls.get(), 2);
    }
}
