use super::*;
use crate::{FAMILY_IPV6, PROTO_TCP, PROTO_UDP, TupleV4, flag, hook};

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: plain `repr(C)` data without implicit padding, read as bytes.
    unsafe { core::slice::from_raw_parts(std::ptr::from_ref::<T>(v).cast::<u8>(), size_of::<T>()) }
        .to_vec()
}

/// Every alignment of `bytes` in a buffer decodes to `want`.
fn decodes_anywhere(bytes: &[u8], want: Result<Observation, BadRecord>) {
    for shift in 0..8 {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(bytes);
        assert_eq!(decode(&shifted[shift..]), want, "shift {shift}");
    }
}

const FP: Fingerprint = Fingerprint {
    ip_id: 7,
    a: 8,
    b: 9,
    c: 10,
};

fn head(k: u8, flags: u8) -> RecordHeader {
    RecordHeader {
        kind: k,
        flags,
        hook: 0,
        ct_info: 0,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
    }
}

fn v4(s: [u8; 4], d: [u8; 4], sport: u16, dport: u16, proto: u8) -> TupleV4 {
    TupleV4 {
        saddr: s,
        daddr: d,
        sport,
        dport,
        proto,
        _pad: [0; 3],
    }
}

fn v6_tuple() -> Tuple {
    let mut t = Tuple {
        sport: 41234,
        dport: 53,
        proto: PROTO_UDP,
        family: FAMILY_IPV6,
        ..Tuple::default()
    };
    t.saddr = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    t.daddr = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    t
}

fn tc_v4(k: u8) -> TcRecordV4 {
    TcRecordV4 {
        head: head(k, flag::TRUNCATED),
        fp: FP,
        tuple: v4([10, 0, 0, 1], [192, 0, 2, 7], 41234, 53, PROTO_UDP),
    }
}

#[test]
fn ipv4_tc_record_decodes_into_a_tc_observation() {
    let r = tc_v4(kind::TC_EGRESS);
    let mut tuple = Tuple {
        sport: 41234,
        dport: 53,
        proto: PROTO_UDP,
        family: FAMILY_IPV4,
        ..Tuple::default()
    };
    tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    tuple.daddr[..4].copy_from_slice(&[192, 0, 2, 7]);
    let want = TcSeen {
        hook: TcHook::Egress,
        flags: flag::TRUNCATED,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
        fp: FP,
        tuple,
    };
    decodes_anywhere(&bytes_of(&r), Ok(Observation::Tc(want)));
    let ingress = tc_v4(kind::TC_INGRESS);
    let want_in = TcSeen {
        hook: TcHook::Ingress,
        ..want
    };
    decodes_anywhere(&bytes_of(&ingress), Ok(Observation::Tc(want_in)));
    let obs = decode(&bytes_of(&r)).expect("decodes");
    assert_eq!(obs.ip_id(), Some(7));
    assert_eq!(obs.ktime_ns(), Some(0x1122_3344_5566_7788));
}

#[test]
fn wide_tc_record_decodes_with_its_full_tuple_and_without_the_layout_bit() {
    let r = TcRecord {
        head: head(kind::TC_INGRESS, flag::WIDE | flag::FRAGMENT),
        fp: FP,
        tuple: v6_tuple(),
    };
    let want = Observation::Tc(TcSeen {
        hook: TcHook::Ingress,
        flags: flag::FRAGMENT,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
        fp: FP,
        tuple: v6_tuple(),
    });
    decodes_anywhere(&bytes_of(&r), Ok(want));
    // IPv6: the fingerprint's first word is the flow label, not an IP id.
    assert_eq!(want.ip_id(), None);
}

fn nat_head() -> RecordHeader {
    RecordHeader {
        hook: hook::PRE_ROUTING,
        ct_info: ct::IS_REPLY,
        ..head(kind::NAT, flag::NAT_HOOK_TIMED | flag::TRUNCATED)
    }
}

#[test]
fn ipv4_nat_record_decodes_into_a_nat_observation() {
    let r = NatRecordV4 {
        head: nat_head(),
        nat_ns: 0x1_0000_2710,
        fp: FP,
        after: v4([10, 0, 0, 1], [10, 244, 1, 9], 41234, 8080, PROTO_TCP),
        before: v4([10, 0, 0, 1], [10, 0, 160, 10], 41235, 80, PROTO_UDP),
    };
    let want = NatSeen {
        hook: hook::PRE_ROUTING,
        ct_info: ct::IS_REPLY,
        flags: flag::NAT_HOOK_TIMED | flag::TRUNCATED,
        ktime_ns: 0x1122_3344_5566_7788,
        nat_ns: 0x1_0000_2710,
        fp: FP,
        before: r.before.tuple(),
        after: r.after.tuple(),
    };
    assert_eq!(want.after.daddr[..4], [10, 244, 1, 9]);
    assert_eq!(
        (want.after.family, want.before.proto),
        (FAMILY_IPV4, PROTO_UDP)
    );
    assert_eq!((want.before.sport, want.before.dport), (41235, 80));
    decodes_anywhere(&bytes_of(&r), Ok(Observation::Nat(want)));
    assert!(want.is_reply() && want.manips_dst());
    assert_eq!(want.latency_ns(), Some(0x1_0000_2710));
    let untimed = NatSeen {
        flags: flag::NAT_UNTIMED,
        ..want
    };
    assert_eq!(untimed.latency_ns(), None);
    // Packed for batches: no fill past the fields.
    assert_eq!(size_of::<NatRecordV4>(), 16 + 8 + 16 + 2 * 16);
    assert_eq!(size_of::<TcRecordV4>(), 16 + 16 + 16);
}

#[test]
fn wide_nat_record_decodes_both_tuples() {
    let mut before = v6_tuple();
    before.daddr[15] = 9;
    let r = NatRecord {
        head: RecordHeader {
            flags: flag::WIDE | flag::NAT_UNTIMED,
            hook: hook::POST_ROUTING,
            ct_info: ct::NEW,
            ..nat_head()
        },
        nat_ns: 2710,
        fp: FP,
        after: v6_tuple(),
        before,
    };
    let want = NatSeen {
        hook: hook::POST_ROUTING,
        ct_info: ct::NEW,
        flags: flag::NAT_UNTIMED,
        ktime_ns: 0x1122_3344_5566_7788,
        nat_ns: 2710,
        fp: FP,
        before,
        after: v6_tuple(),
    };
    decodes_anywhere(&bytes_of(&r), Ok(Observation::Nat(want)));
    assert!(!want.is_reply() && !want.manips_dst());
    assert_eq!(want.latency_ns(), None);
}

#[test]
fn no_ct_entry_is_not_a_reply() {
    let n = NatSeen {
        hook: hook::LOCAL_OUT,
        ct_info: ct::NONE,
        flags: 0,
        ktime_ns: 0,
        nat_ns: 0,
        fp: FP,
        before: Tuple::default(),
        after: Tuple::default(),
    };
    assert!(!n.is_reply() && n.manips_dst());
}

/// A frame record of `cap` bytes (each byte its index) of a 1500-byte frame.
fn frame_record(cap: u32) -> TcFrameRecord {
    let mut bytes = [0u8; FRAME_MAX];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::try_from(i).expect("FRAME_MAX is 256");
    }
    TcFrameRecord {
        head: head(kind::TC_EGRESS, flag::WIDE | flag::FRAME | flag::TRUNCATED),
        fp: FP,
        tuple: v6_tuple(),
        orig_len: 1500,
        cap_len: cap,
        bytes,
    }
}

#[test]
fn frame_record_decodes_as_its_tc_observation_and_hands_out_its_captured_bytes() {
    let r = frame_record(128);
    let want = Observation::Tc(TcSeen {
        hook: TcHook::Egress,
        flags: flag::TRUNCATED,
        ifindex: 0x0102_0304,
        ktime_ns: 0x1122_3344_5566_7788,
        fp: FP,
        tuple: v6_tuple(),
    });
    decodes_anywhere(&bytes_of(&r), Ok(want));
    let bytes = bytes_of(&r);
    let f = frame(&bytes).expect("a frame");
    assert_eq!(f.orig_len, 1500);
    assert_eq!(f.bytes.len(), 128);
    assert_eq!((f.bytes[0], f.bytes[127]), (0, 127));
    // A capture length past the array is held to it; a failed copy is an empty frame.
    assert_eq!(
        frame(&bytes_of(&frame_record(9999))).map(|f| f.bytes.len()),
        Some(FRAME_MAX)
    );
    assert_eq!(
        frame(&bytes_of(&frame_record(0))).map(|f| f.bytes.len()),
        Some(0)
    );
    // Records without the bit carry none, whatever their length.
    for other in every_layout().iter().take(4) {
        assert_eq!(frame(other), None);
    }
    assert_eq!(frame(&bytes[..100]), None);
}

/// The eight layouts, each with a valid header.
fn every_layout() -> [Vec<u8>; 8] {
    [
        bytes_of(&tc_v4(kind::TC_INGRESS)),
        bytes_of(&TcRecord {
            head: head(kind::TC_EGRESS, flag::WIDE),
            fp: FP,
            tuple: v6_tuple(),
        }),
        bytes_of(&NatRecordV4 {
            head: nat_head(),
            ..NatRecordV4::default()
        }),
        bytes_of(&NatRecord {
            head: RecordHeader {
                flags: flag::WIDE,
                ..nat_head()
            },
            ..NatRecord::default()
        }),
        bytes_of(&frame_record(64)),
        bytes_of(&drop_v4()),
        bytes_of(&DropRecord {
            head: head(kind::DROP, flag::WIDE),
            ..DropRecord::default()
        }),
        bytes_of(&site(b"nft_do_chain [nf_tables]", 25)),
    ]
}

fn drop_v4() -> DropRecordV4 {
    DropRecordV4 {
        head: head(kind::DROP, 0),
        fp: FP,
        tuple: v4([10, 0, 0, 1], [192, 0, 2, 7], 41234, 9, PROTO_TCP),
        location: 0xffff_ffff_8123_4567,
        reason: 3,
        _pad: 0,
    }
}

#[test]
fn drop_records_decode_into_drop_observations() {
    let mut want_tuple = Tuple {
        sport: 41234,
        dport: 9,
        proto: PROTO_TCP,
        family: FAMILY_IPV4,
        ..Tuple::default()
    };
    want_tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
    want_tuple.daddr[..4].copy_from_slice(&[192, 0, 2, 7]);
    let want = |tuple| {
        Ok(Observation::Drop(DropSeen {
            ifindex: 0x0102_0304,
            ktime_ns: 0x1122_3344_5566_7788,
            fp: FP,
            tuple,
            reason: 3,
            location: 0xffff_ffff_8123_4567,
        }))
    };
    decodes_anywhere(&bytes_of(&drop_v4()), want(want_tuple));
    let wide = DropRecord {
        head: head(kind::DROP, flag::WIDE),
        fp: FP,
        tuple: v6_tuple(),
        location: 0xffff_ffff_8123_4567,
        reason: 3,
        _pad: 0,
    };
    decodes_anywhere(&bytes_of(&wide), want(v6_tuple()));
}

#[test]
fn records_of_another_length_than_their_layout_are_bad() {
    for bytes in every_layout() {
        let n = bytes.len();
        assert!(decode(&bytes).is_ok());
        let mut long = bytes.clone();
        long.extend([0; 8]);
        assert_eq!(decode(&long), Err(BadRecord::Length(n + 8)));
        for cut in 0..n {
            assert_eq!(
                decode(&bytes[..cut]),
                Err(BadRecord::Length(cut)),
                "{n} cut to {cut}"
            );
        }
    }
    // The layout bit names the length: an IPv4 tc record claiming the wide layout, and a wide
    // one claiming IPv4, are refused, not misread.
    let mut narrow = every_layout()[0].clone();
    narrow[1] |= flag::WIDE;
    assert_eq!(decode(&narrow), Err(BadRecord::Length(48)));
    let mut wide = every_layout()[1].clone();
    wide[1] &= !flag::WIDE;
    assert_eq!(decode(&wide), Err(BadRecord::Length(72)));
}

#[test]
fn unknown_kinds_are_bad_at_any_length() {
    for bytes in every_layout() {
        for k in [0, 6, 7, 0x7f, 0xff] {
            let mut b = bytes.clone();
            b[0] = k;
            assert_eq!(decode(&b), Err(BadRecord::Kind(k)));
        }
    }
    let mut short = vec![0xffu8; size_of::<RecordHeader>()];
    short[0] = 9;
    assert_eq!(decode(&short), Err(BadRecord::Kind(9)));
}

/// A site record whose name is `text` and whose `len` (`bpf_snprintf`'s return) is `len`.
fn site(text: &[u8], len: i32) -> SiteRecord {
    let mut name = [0u8; SITE_NAME_MAX];
    let n = text.len().min(SITE_NAME_MAX - 1);
    name[..n].copy_from_slice(&text[..n]);
    SiteRecord {
        head: head(kind::SITE, 0),
        location: 0xffff_ffff_c040_1234,
        len,
        _pad: 0,
        name,
    }
}

fn site_seen(r: &SiteRecord) -> SiteSeen {
    match decode(&bytes_of(r)) {
        Ok(Observation::Site(s)) => s,
        other => panic!("not a site: {other:?}"),
    }
}

#[test]
fn site_records_decode_into_the_name_the_kernel_wrote() {
    let s = site_seen(&site(b"nft_do_chain [nf_tables]", 25));
    assert_eq!(s.location, 0xffff_ffff_c040_1234);
    assert_eq!(s.name(), Some(&b"nft_do_chain [nf_tables]"[..]));
    assert!(!s.is_cut());
    let obs = decode(&bytes_of(&site(b"ip_error", 9))).unwrap();
    assert_eq!(
        (obs.ktime_ns(), obs.fp(), obs.tuple(), obs.ip_id()),
        (None, None, None, None)
    );
    // The longest whole name fills the array but its NUL.
    let longest = [b'a'; SITE_NAME_MAX - 1];
    let s = site_seen(&site(&longest, i32::try_from(SITE_NAME_MAX).unwrap()));
    assert_eq!(s.name(), Some(&longest[..]));
}

#[test]
fn a_cut_or_failed_site_name_is_no_name() {
    let cut = site_seen(&site(&[b'a'; 200], 201));
    assert_eq!(cut.name(), None);
    assert!(cut.is_cut());
    for len in [0, 1, -22, i32::MIN] {
        let failed = site_seen(&site(b"", len));
        assert_eq!((failed.name(), failed.is_cut()), (None, false), "{len}");
    }
    // A length past the name's NUL ends at the NUL.
    assert_eq!(
        site_seen(&site(b"tcp_v4_rcv", 40)).name(),
        Some(&b"tcp_v4_rcv"[..])
    );
}
