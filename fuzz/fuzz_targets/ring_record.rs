//! Ring-buffer records as the collector reads them (`tracer_common::decode`): any bytes either
//! decode or are refused, never panic; a record decodes exactly when its header names a known
//! kind and it has the length of the layout that kind and the header's `WIDE` and `FRAME` bits
//! name; the observation holds the record's fields, read here from their byte offsets
//! independently of the decoder; and `frame` hands out a tc record's frame exactly when it has
//! the frame layout; a site record's name is handed out only when whole. A batch
//! (`tracer_common::batch::split`) hands out consecutive records, each of the length its own
//! header names, never reading past its end; anything else is handed out whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracer_common::{
    BadRecord, DropRecord, DropRecordV4, FAMILY_IPV4, FRAME_MAX, NatRecord, NatRecordV4,
    Observation, RecordHeader, SITE_NAME_MAX, SiteRecord, TcFrameRecord, TcHook, TcRecord,
    TcRecordV4, Tuple, decode, flag, frame, kind,
};

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

/// The fingerprint's four words at `at`.
fn fp_at(b: &[u8], at: usize) -> [u32; 4] {
    [
        u32_at(b, at),
        u32_at(b, at + 4),
        u32_at(b, at + 8),
        u32_at(b, at + 12),
    ]
}

/// An IPv4 tuple (saddr, daddr, sport, dport, proto) at `at`, as the decoder widens it.
fn check_v4(t: &Tuple, b: &[u8], at: usize) {
    assert_eq!((t.family, t.proto), (FAMILY_IPV4, b[at + 12]));
    assert_eq!(&t.saddr[..4], &b[at..at + 4]);
    assert_eq!(&t.daddr[..4], &b[at + 4..at + 8]);
    assert!(t.saddr[4..].iter().chain(&t.daddr[4..]).all(|&x| x == 0));
    assert_eq!((t.sport, t.dport), (u16_at(b, at + 8), u16_at(b, at + 10)));
}

/// A full tuple at `at`: its 40 bytes.
fn check_wide(t: &Tuple, b: &[u8], at: usize) {
    // SAFETY: plain `repr(C)` data without padding, read as bytes.
    let bytes = unsafe {
        core::slice::from_raw_parts((t as *const Tuple).cast::<u8>(), size_of::<Tuple>())
    };
    assert_eq!(bytes, &b[at..at + size_of::<Tuple>()]);
}

/// What `batch::split` hands out of `data`: the record itself, or a batch's records back to back
/// from the end of its header, each as long as its header says; what it could not hand out is
/// counted, and a whole batch that says its count right counts nothing.
fn check_split(data: &[u8]) {
    let head = size_of::<RecordHeader>();
    let is_batch = data.len() >= head && data[0] == kind::BATCH;
    let mut at = head;
    let mut handed = 0u64;
    let bad = tracer_common::batch::split(data, |r| {
        if !is_batch {
            assert_eq!(r, data);
            return;
        }
        let off = r.as_ptr() as usize - data.as_ptr() as usize;
        assert_eq!(off, at);
        // SAFETY: `r` holds at least a header (its length is a layout's); plain integers.
        let h: RecordHeader =
            unsafe { core::ptr::read_unaligned(r.as_ptr().cast::<RecordHeader>()) };
        assert_eq!(Some(r.len()), tracer_common::batch::record_len(&h));
        at += r.len();
        handed += 1;
    });
    if !is_batch {
        assert_eq!(bad, 0);
    } else if at == data.len() && u64::from(u32_at(data, 4)) == handed {
        assert_eq!(bad, 0);
    } else {
        assert!(bad > 0);
    }
}

fuzz_target!(|data: &[u8]| {
    check_split(data);
    let got = decode(data);
    if data.len() < size_of::<RecordHeader>() {
        assert_eq!(got, Err(BadRecord::Length(data.len())));
        assert_eq!(frame(data), None);
        return;
    }
    let (k, flags) = (data[0], data[1]);
    let wide = flags & flag::WIDE != 0;
    let framed = flags & flag::FRAME != 0 && matches!(k, kind::TC_INGRESS | kind::TC_EGRESS);
    if framed && data.len() == size_of::<TcFrameRecord>() {
        let f = frame(data).expect("a frame record's frame");
        let at = size_of::<TcFrameRecord>() - FRAME_MAX;
        let cap = (u32_at(data, at - 4) as usize).min(FRAME_MAX);
        assert_eq!((f.bytes, f.orig_len), (&data[at..at + cap], u32_at(data, at - 8)));
    } else {
        assert_eq!(frame(data), None);
    }
    let want_len = match k {
        kind::TC_INGRESS | kind::TC_EGRESS if framed => size_of::<TcFrameRecord>(),
        kind::TC_INGRESS | kind::TC_EGRESS if wide => size_of::<TcRecord>(),
        kind::TC_INGRESS | kind::TC_EGRESS => size_of::<TcRecordV4>(),
        kind::NAT if wide => size_of::<NatRecord>(),
        kind::NAT => size_of::<NatRecordV4>(),
        kind::DROP if wide => size_of::<DropRecord>(),
        kind::DROP => size_of::<DropRecordV4>(),
        kind::SITE => size_of::<SiteRecord>(),
        _ => {
            assert_eq!(got, Err(BadRecord::Kind(k)));
            return;
        }
    };
    if data.len() != want_len {
        assert_eq!(got, Err(BadRecord::Length(data.len())));
        return;
    }
    let obs = got.expect("a known kind at its layout's length decodes");
    // Header: kind, flags, hook, ct_info, ifindex, ktime_ns.
    match obs {
        Observation::Tc(t) => {
            let hook = if k == kind::TC_INGRESS {
                TcHook::Ingress
            } else {
                TcHook::Egress
            };
            assert_eq!((t.hook, t.flags), (hook, flags & !(flag::WIDE | flag::FRAME)));
            assert_eq!(t.ifindex, u32_at(data, 4));
            assert_eq!(t.ktime_ns, u64_at(data, 8));
            assert_eq!([t.fp.ip_id, t.fp.a, t.fp.b, t.fp.c], fp_at(data, 16));
            if wide || framed {
                check_wide(&t.tuple, data, 32);
            } else {
                check_v4(&t.tuple, data, 32);
            }
        }
        Observation::Nat(n) => {
            assert_eq!(k, kind::NAT);
            assert_eq!(
                (n.flags, n.hook, n.ct_info),
                (flags & !flag::WIDE, data[2], data[3])
            );
            assert_eq!(n.ktime_ns, u64_at(data, 8));
            assert_eq!(n.nat_ns, u64_at(data, 16));
            assert_eq!([n.fp.ip_id, n.fp.a, n.fp.b, n.fp.c], fp_at(data, 24));
            if wide {
                check_wide(&n.after, data, 40);
                check_wide(&n.before, data, 80);
            } else {
                check_v4(&n.after, data, 40);
                check_v4(&n.before, data, 56);
            }
        }
        Observation::Drop(d) => {
            assert_eq!(k, kind::DROP);
            assert_eq!(d.ifindex, u32_at(data, 4));
            assert_eq!(d.ktime_ns, u64_at(data, 8));
            assert_eq!([d.fp.ip_id, d.fp.a, d.fp.b, d.fp.c], fp_at(data, 16));
            // After the tuple: the location (u64), then the reason (u32).
            let after = if wide {
                check_wide(&d.tuple, data, 32);
                32 + size_of::<Tuple>()
            } else {
                check_v4(&d.tuple, data, 32);
                48
            };
            assert_eq!(d.location, u64_at(data, after));
            assert_eq!(d.reason, u32_at(data, after + 8));
        }
        Observation::Site(s) => {
            assert_eq!(k, kind::SITE);
            assert_eq!(s.location, u64_at(data, 16));
            // A whole name is the bytes before the first NUL, within the length the kernel
            // returned (`len`, counting the NUL), and at least one byte; a longer `len` is cut.
            let len = u32_at(data, 24) as i32;
            let text = &data[32..32 + SITE_NAME_MAX];
            assert_eq!(s.is_cut(), len > SITE_NAME_MAX as i32);
            match s.name() {
                Some(name) => {
                    assert!((2..=SITE_NAME_MAX as i32).contains(&len));
                    assert!(!name.is_empty() && !name.contains(&0));
                    assert_eq!(name, &text[..name.len()]);
                    assert!(name.len() + 1 == len as usize || text[name.len()] == 0);
                }
                None => assert!(
                    !(2..=SITE_NAME_MAX as i32).contains(&len) || text[0] == 0,
                    "a whole name was refused"
                ),
            }
        }
    }
});
