//! `ipset save` parsing and `--match-set` semantics.

use super::*;

/// Calico's sets as in seeds 000 and 002 (`ipset list` output converted to `ipset save`),
/// plus the other types kube-proxy and CNIs use.
const SAVE: &str = "\
create cali40masq-ipam-pools hash:net family inet hashsize 1024 maxelem 1048576
add cali40masq-ipam-pools 10.240.0.0/16
create cali40all-ipam-pools hash:net family inet hashsize 1024 maxelem 1048576
add cali40all-ipam-pools 10.240.0.0/16
add cali40all-ipam-pools 172.17.0.0/16
create except hash:net family inet hashsize 1024 maxelem 65536
add except 10.0.0.0/8
add except 10.1.0.0/16 nomatch
add except 10.1.2.0/24
create svc hash:ip,port family inet hashsize 1024 maxelem 65536
add svc 10.0.0.10,udp:53
add svc 10.0.0.10,tcp:53
add svc 10.0.0.1,443
create lb hash:ip,port,ip family inet hashsize 1024 maxelem 65536
add lb 10.13.76.26,tcp:80,10.13.76.26
create ifnet hash:net,iface family inet hashsize 1024 maxelem 65536
add ifnet 10.0.0.0/8,eth0
add ifnet 192.0.2.0/24,physdev:eth1
create v6 hash:net family inet6 hashsize 1024 maxelem 65536
add v6 fd00::/8
create masked hash:ip family inet hashsize 1024 maxelem 65536 netmask 24
add masked 198.51.100.0
create marks hash:net,mark family inet hashsize 1024 maxelem 65536
add marks 10.0.0.0/8,0x4000
create range bitmap:ip range 192.0.2.0-192.0.2.255
add range 192.0.2.7
create macs hash:mac hashsize 1024 maxelem 65536
add macs 00:11:22:33:44:55
create all list:set size 8
add all v6
add all cali40all-ipam-pools
create loop list:set size 8
add loop loop
add nosuch 10.0.0.1
garbage
";

fn probe(src: &str, dst: &str) -> Probe<'static> {
    Probe {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        sport: 40000,
        dport: 53,
        proto: 17,
        mark: 0,
        in_iface: None,
        out_iface: Some("eth0"),
    }
}

fn m(name: &str, flags: &str) -> SetMatch {
    SetMatch {
        name: name.into(),
        dst: flags.split(',').map(|f| f == "dst").collect(),
        return_nomatch: false,
    }
}

#[test]
fn parses_save_output() {
    let sets = IpSets::parse(SAVE);
    assert_eq!((sets.len(), sets.skipped_lines), (13, 2));
    assert_eq!(sets.get("cali40masq-ipam-pools").unwrap().kind, "hash:net");
    assert!(sets.get("nosuch").is_none());
}

#[test]
#[expect(clippy::too_many_lines, reason = "a table of cases, a few lines each")]
fn match_set_semantics() {
    type Case = (SetMatch, Probe<'static>, Result<bool, &'static str>);
    let sets = IpSets::parse(SAVE);
    let pod = "10.240.0.46";
    let mut marked = probe("10.9.9.9", "203.0.113.80");
    marked.mark = 0x4000;
    let mut tcp53 = probe(pod, "10.0.0.10");
    tcp53.proto = 6;
    let mut port443 = probe(pod, "10.0.0.1");
    (port443.proto, port443.dport) = (6, 443);
    let mut hairpin = probe("10.13.76.26", "10.13.76.26");
    (hairpin.proto, hairpin.dport) = (6, 80);
    let mut return_nomatch = m("except", "dst");
    return_nomatch.return_nomatch = true;
    let cases: Vec<Case> = vec![
        // Seed 000: the pod's source is in the masquerade pools; the peered VNet is not a pool.
        (
            m("cali40masq-ipam-pools", "src"),
            probe(pod, "172.17.0.4"),
            Ok(true),
        ),
        (
            m("cali40masq-ipam-pools", "dst"),
            probe(pod, "172.17.0.4"),
            Ok(false),
        ),
        (
            m("cali40all-ipam-pools", "dst"),
            probe(pod, "172.17.0.4"),
            Ok(true),
        ),
        (
            m("cali40all-ipam-pools", "dst"),
            probe(pod, "203.0.113.80"),
            Ok(false),
        ),
        // nomatch excludes, a more specific member includes again.
        (m("except", "dst"), probe(pod, "10.9.0.1"), Ok(true)),
        (m("except", "dst"), probe(pod, "10.1.9.1"), Ok(false)),
        (return_nomatch, probe(pod, "10.1.9.1"), Ok(true)),
        (m("except", "dst"), probe(pod, "10.1.2.3"), Ok(true)),
        // ip,port: protocol and port count, a bare port is tcp.
        (m("svc", "dst,dst"), probe(pod, "10.0.0.10"), Ok(true)),
        (m("svc", "dst,dst"), tcp53, Ok(true)),
        (m("svc", "dst,src"), probe(pod, "10.0.0.10"), Ok(false)),
        (m("svc", "dst,dst"), port443, Ok(true)),
        // Fewer flags than dimensions never match; extra flags are ignored.
        (m("svc", "dst"), probe(pod, "10.0.0.10"), Ok(false)),
        (
            m("cali40all-ipam-pools", "dst,dst"),
            probe(pod, "10.240.0.1"),
            Ok(true),
        ),
        (m("lb", "dst,dst,src"), hairpin, Ok(true)),
        // net,iface: dst is the outgoing interface; physdev cannot be checked.
        (m("ifnet", "dst,dst"), probe(pod, "10.1.1.1"), Ok(true)),
        (
            m("ifnet", "dst,src"),
            probe(pod, "10.1.1.1"),
            Err("interface unknown"),
        ),
        (
            m("ifnet", "dst,dst"),
            probe(pod, "192.0.2.1"),
            Err("physdev eth1"),
        ),
        (m("ifnet", "dst,dst"), probe(pod, "198.51.100.1"), Ok(false)),
        // Family, netmask, marks, bitmaps.
        (m("v6", "dst"), probe(pod, "10.0.0.1"), Ok(false)),
        (m("v6", "dst"), probe("fd00::1", "fd00::2"), Ok(true)),
        (m("masked", "dst"), probe(pod, "198.51.100.77"), Ok(true)),
        (m("masked", "dst"), probe(pod, "198.51.101.77"), Ok(false)),
        (m("marks", "src,src"), marked, Ok(true)),
        (
            m("marks", "src,src"),
            probe("10.9.9.9", "203.0.113.80"),
            Ok(false),
        ),
        (m("range", "dst"), probe(pod, "192.0.2.7"), Ok(true)),
        (m("range", "dst"), probe(pod, "192.0.2.8"), Ok(false)),
        (
            m("macs", "src"),
            probe(pod, "192.0.2.8"),
            Err("members not checked"),
        ),
        // list:set: any member set; a loop ends.
        (m("all", "dst"), probe(pod, "172.17.0.4"), Ok(true)),
        (m("all", "dst"), probe("fd00::1", "fd00::9"), Ok(true)),
        (m("all", "dst"), probe(pod, "203.0.113.80"), Ok(false)),
        (
            m("loop", "dst"),
            probe(pod, "203.0.113.80"),
            Err("too deep"),
        ),
        (
            m("nosuch", "dst"),
            probe(pod, "203.0.113.80"),
            Err("ipset nosuch not read"),
        ),
    ];
    for (set, p, want) in cases {
        let got = sets.test(&set, &p);
        let label = format!("{} {} {p:?}", set.name, set.flags());
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{label}"),
            (Err(g), Err(w)) => assert!(g.contains(w), "{label}: {g}"),
            (got, want) => panic!("{label}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn flags_and_values_for_the_why_line() {
    let mut p = probe("10.240.0.46", "10.0.0.10");
    p.dport = 53;
    assert_eq!(m("a", "src").flags(), "src");
    assert_eq!(m("a", "src").values(&p), "10.240.0.46");
    assert_eq!(m("a", "dst,dst").flags(), "dst,dst");
    assert_eq!(m("a", "dst,dst").values(&p), "10.0.0.10,53");
}

#[test]
fn arbitrary_save_output_never_panics() {
    const WORDS: &[&str] = &[
        "create",
        "add",
        "s",
        "l",
        "hash:net",
        "hash:ip,port,ip",
        "hash:net,iface",
        "list:set",
        "bitmap:port",
        "hash:",
        ":",
        "family",
        "inet6",
        "netmask",
        "99",
        "nomatch",
        "10.0.0.0/8",
        "10.0.0.1-10.0.0.0",
        "tcp:80-1",
        "icmp:8/0",
        "physdev:",
        ",",
        ",,",
        "x,y,z",
        "0xzz",
        "\n",
        "\n",
        "\n",
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % WORDS.len() as u64).unwrap_or(0)
    };
    for _ in 0..300 {
        let text: Vec<&str> = (0..80).map(|_| WORDS[next()]).collect();
        let sets = IpSets::parse(&text.join(" "));
        for name in ["s", "l"] {
            for flags in ["src", "dst,dst", "src,dst,src"] {
                let _ = sets.test(&m(name, flags), &probe("10.0.0.1", "fd00::1"));
            }
        }
    }
}
