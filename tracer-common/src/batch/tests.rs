use super::*;
use crate::{Fingerprint, Tuple, TupleV4, decode};

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: plain `repr(C)` data without implicit padding, read as bytes.
    unsafe { core::slice::from_raw_parts(std::ptr::from_ref::<T>(v).cast::<u8>(), size_of::<T>()) }
        .to_vec()
}

fn head(k: u8, flags: u8, t: u64) -> RecordHeader {
    RecordHeader {
        kind: k,
        flags,
        ifindex: 3,
        ktime_ns: t,
        ..RecordHeader::default()
    }
}

/// One record of each layout a CPU stages, in the order a DNATed packet and a drop give them.
fn staged() -> Vec<Vec<u8>> {
    let fp = Fingerprint {
        ip_id: 1,
        a: 2,
        b: 3,
        c: 4,
    };
    let tuple = TupleV4 {
        saddr: [10, 0, 0, 1],
        daddr: [10, 96, 0, 10],
        sport: 40000,
        dport: 80,
        proto: 6,
        _pad: [0; 3],
    };
    let wide = Tuple {
        family: crate::FAMILY_IPV6,
        ..Tuple::default()
    };
    vec![
        bytes_of(&TcRecordV4 {
            head: head(kind::TC_INGRESS, 0, 10),
            fp,
            tuple,
        }),
        bytes_of(&NatRecordV4 {
            head: head(kind::NAT, 0, 11),
            fp,
            before: tuple,
            after: tuple,
            ..NatRecordV4::default()
        }),
        bytes_of(&TcRecord {
            head: head(kind::TC_EGRESS, flag::WIDE, 12),
            fp,
            tuple: wide,
        }),
        bytes_of(&NatRecord {
            head: head(kind::NAT, flag::WIDE, 13),
            fp,
            ..NatRecord::default()
        }),
        bytes_of(&DropRecordV4 {
            head: head(kind::DROP, 0, 14),
            fp,
            tuple,
            location: 0xffff_ffff_8100_0000,
            reason: 2,
            _pad: 0,
        }),
    ]
}

fn batch_of(records: &[Vec<u8>], said: u32) -> Vec<u8> {
    let mut b = bytes_of(&RecordHeader {
        kind: kind::BATCH,
        ifindex: said,
        ..RecordHeader::default()
    });
    for r in records {
        b.extend_from_slice(r);
    }
    b
}

#[test]
fn a_batch_splits_into_its_records_in_order_each_decoding_as_alone() {
    let records = staged();
    let batch = batch_of(&records, 5);
    let mut seen = Vec::new();
    assert_eq!(split(&batch, |r| seen.push(r.to_vec())), 0);
    assert_eq!(seen, records);
    assert!(seen.iter().all(|r| decode(r).is_ok()));
    let times: Vec<_> = seen
        .iter()
        .map(|r| decode(r).ok().and_then(|o| o.ktime_ns()))
        .collect();
    assert_eq!(times, [10, 11, 12, 13, 14].map(Some));
}

#[test]
fn a_record_that_is_no_batch_is_handed_out_whole() {
    for r in staged() {
        let mut seen = Vec::new();
        assert_eq!(split(&r, |x| seen.push(x.to_vec())), 0);
        assert_eq!(seen, vec![r]);
    }
    let mut seen = 0;
    assert_eq!(split(&[kind::BATCH, 0, 0], |_| seen += 1), 0);
    assert_eq!(seen, 1, "too short for a batch: decode counts it bad");
}

#[test]
fn a_damaged_batch_counts_what_it_could_not_hand_out() {
    let records = staged();
    // Cut in the middle of its third record: two handed out, three bad.
    let mut cut = batch_of(&records, 5);
    cut.truncate(16 + records[0].len() + records[1].len() + 8);
    let mut n = 0;
    assert_eq!(split(&cut, |_| n += 1), 3);
    assert_eq!(n, 2);
    // A record of no known kind stops the split.
    let mut unknown = records.clone();
    unknown[1][0] = 0x7f;
    let mut n = 0;
    assert_eq!(split(&batch_of(&unknown, 5), |_| n += 1), 4);
    assert_eq!(n, 1);
    // A count that is not the records held is bad by the difference.
    let mut n = 0;
    assert_eq!(split(&batch_of(&records, 7), |_| n += 1), 2);
    assert_eq!(n, 5);
    // An empty batch that says so holds nothing bad.
    assert_eq!(split(&batch_of(&[], 0), |_| panic!("no record")), 0);
}

#[test]
fn every_staged_layout_fits_the_staging_bound_and_frames_do_not() {
    for r in staged() {
        assert!(r.len() <= STAGED_RECORD_MAX && r.len() % 8 == 0);
    }
    let frame = head(kind::TC_INGRESS, flag::WIDE | flag::FRAME, 0);
    assert!(record_len(&frame).is_some_and(|n| n > STAGED_RECORD_MAX));
    assert_eq!(record_len(&head(kind::BATCH, 0, 0)), None);
    assert!(BATCH_BYTES_MAX.is_power_of_two());
    assert!(BATCH_BYTES_DEFAULT as usize <= BATCH_BYTES_MAX);
}
