//! Arbitrary text as the filter expression (`pktrace … EXPRESSION`), through the parser, the
//! error rendering, matching and the kernel prefilter.
//!
//! What must hold: no panic and no deep recursion (length and nesting are bounded); a refused
//! expression's offset lies within the text and its rendering is three lines a terminal cannot
//! act on, the caret under the fault; an accepted one prints as text that parses back to the
//! same expression (when no longer than the limit), and the prefilter admits every packet the expression matches (packets made
//! of the expression's own addresses and ports, so that tests hit as well as miss).
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use pktrace_fuzz::terminal_safe;
use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};
use tracer_user::expr::{self, Expr, PacketView, Prefilter, Test};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match expr::parse(&text) {
        Ok(expr) => check_accepted(&expr),
        Err(e) => {
            assert!(e.pos <= text.len(), "{e:?} beyond {} bytes", text.len());
            let shown = e.render(&text);
            let lines: Vec<&str> = shown.split('\n').collect();
            assert_eq!(lines.len(), 3, "{shown:?}");
            assert!(lines.iter().all(|l| terminal_safe(l)), "{shown:?}");
            let caret = lines[2].trim_start_matches(' ');
            assert_eq!(caret, "^", "{shown:?}");
            assert!(
                lines[2].len() <= lines[1].len() + 1,
                "caret past the text: {shown:?}"
            );
        }
    }
});

fn check_accepted(expr: &Expr) {
    let printed = expr.to_string();
    assert!(terminal_safe(&printed), "{printed:?}");
    // Carry-over makes the printed form longer than the text (`port 1 or 2`).
    match expr::parse(&printed) {
        Err(e) if printed.len() > expr::MAX_LEN => {
            assert!(matches!(e.kind, expr::ErrorKind::TooLong { .. }), "{e:?}");
        }
        reparsed => assert_eq!(reparsed.as_ref(), Ok(expr), "{printed}"),
    }
    let pre = Prefilter::of(expr);
    let mut addrs = vec!["10.0.0.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
    let mut ports = vec![0, 53, 65535];
    values(expr, &mut addrs, &mut ports);
    addrs.truncate(8);
    ports.truncate(8);
    for view in views(&addrs, &ports) {
        assert!(
            pre.admits(&view) || !expr.matches(&view),
            "{printed}: {pre:?} rules out {view:?}, which matches"
        );
    }
}

/// The addresses and ports the expression names (the ends of ranges and networks).
fn values(expr: &Expr, addrs: &mut Vec<IpAddr>, ports: &mut Vec<u16>) {
    match expr {
        Expr::And(items) | Expr::Or(items) => items.iter().for_each(|e| values(e, addrs, ports)),
        Expr::Not(e) => values(e, addrs, ports),
        Expr::Test(Test::Host { addr, .. }) => addrs.push(*addr),
        Expr::Test(Test::Net { net, .. }) => addrs.push(net.addr),
        Expr::Test(Test::Port { range, .. }) => ports.extend([range.first, range.last]),
        Expr::Test(_) => {}
    }
}

/// Packets between the addresses (same family), over each protocol and pair of ports.
fn views(addrs: &[IpAddr], ports: &[u16]) -> Vec<PacketView> {
    let mut out = Vec::new();
    for &src in addrs {
        for &dst in addrs.iter().filter(|d| d.is_ipv4() == src.is_ipv4()) {
            for proto in [PROTO_TCP, PROTO_UDP, PROTO_ICMP, PROTO_ICMPV6] {
                let base = PacketView {
                    src,
                    dst,
                    proto,
                    ports: None,
                };
                out.push(base);
                if matches!(proto, PROTO_TCP | PROTO_UDP) {
                    for &s in ports {
                        for &d in ports {
                            out.push(PacketView {
                                ports: Some((s, d)),
                                ..base
                            });
                        }
                    }
                }
            }
        }
    }
    out
}
