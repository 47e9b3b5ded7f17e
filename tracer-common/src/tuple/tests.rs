use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};

use super::*;

fn hash<T: Hash>(v: &T) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(v)
}

fn tuple() -> Tuple {
    let mut t = Tuple {
        sport: 40_000,
        dport: 80,
        proto: PROTO_TCP,
        family: FAMILY_IPV4,
        ..Tuple::default()
    };
    t.saddr[..4].copy_from_slice(&[10, 13, 76, 46]);
    t.daddr[..4].copy_from_slice(&[10, 0, 159, 58]);
    t
}

#[test]
fn equal_tuples_hash_equal_and_every_byte_counts() {
    let t = tuple();
    assert_eq!(hash(&t), hash(&{ t }));
    let changes: [fn(&mut Tuple); 8] = [
        |t| t.saddr[15] = 1,
        |t| t.daddr[0] = 11,
        |t| t.sport = 40_001,
        |t| t.dport = 81,
        |t| t.proto = PROTO_UDP,
        |t| t.family = FAMILY_IPV6,
        |t| *t = Tuple { _pad: [0, 1], ..*t },
        |t| *t = t.reversed(),
    ];
    for change in changes {
        let mut other = t;
        change(&mut other);
        assert_ne!(other, t);
        assert_ne!(hash(&other), hash(&t), "{other:?}");
    }
}

#[test]
fn every_fingerprint_field_counts() {
    let fp = Fingerprint {
        ip_id: 1,
        a: 2,
        b: 3,
        c: 4,
    };
    assert_eq!(hash(&fp), hash(&{ fp }));
    for other in [
        Fingerprint { ip_id: 9, ..fp },
        Fingerprint { a: 9, ..fp },
        Fingerprint { b: 9, ..fp },
        Fingerprint { c: 9, ..fp },
        Fingerprint {
            a: 1,
            ip_id: 2,
            ..fp
        },
    ] {
        assert_ne!(hash(&other), hash(&fp), "{other:?}");
    }
}
