use std::path::Path;

use tracer_common::KernelOffsets;

use super::{
    format::{MAGIC, kind},
    *,
};

/// Writes BTF blobs for the tests, one type at a time.
struct Builder {
    big: bool,
    types: Vec<u8>,
    strings: Vec<u8>,
    /// First string offset of this blob (split BTF continues after its base's strings).
    str_base: u32,
    next_id: u32,
}

/// A member: name, type, bit offset, bitfield size (0: not a bitfield).
type Member<'a> = (&'a str, u32, u32, u32);

impl Builder {
    fn new(big: bool) -> Self {
        Self {
            big,
            types: Vec::new(),
            strings: vec![0],
            str_base: 0,
            next_id: 1,
        }
    }

    /// Split BTF on top of `base`.
    fn split(base: &Self) -> Self {
        let str_base = base.str_base + u32::try_from(base.strings.len()).unwrap();
        Self {
            big: base.big,
            types: Vec::new(),
            strings: Vec::new(),
            str_base,
            next_id: base.next_id,
        }
    }

    fn word(&mut self, v: u32) {
        let bytes = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.types.extend_from_slice(&bytes);
    }

    fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.str_base + u32::try_from(self.strings.len()).unwrap();
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    fn ty(
        &mut self,
        name: &str,
        kind: u32,
        vlen: usize,
        kind_flag: bool,
        size_or_type: u32,
    ) -> u32 {
        let name_off = self.str(name);
        self.word(name_off);
        self.word(u32::from(kind_flag) << 31 | kind << 24 | u32::try_from(vlen).unwrap());
        self.word(size_or_type);
        self.next_id += 1;
        self.next_id - 1
    }

    fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
        let id = self.ty(name, kind::INT, 0, false, size);
        self.word(bits);
        id
    }

    fn link(&mut self, kind: u32, name: &str, target: u32) -> u32 {
        self.ty(name, kind, 0, false, target)
    }

    fn composite(&mut self, kind: u32, name: &str, size: u32, members: &[Member<'_>]) -> u32 {
        let kind_flag = members.iter().any(|m| m.3 != 0);
        let id = self.ty(name, kind, members.len(), kind_flag, size);
        for &(name, type_id, bits, bitfield) in members {
            let name_off = self.str(name);
            self.word(name_off);
            self.word(type_id);
            self.word(if kind_flag {
                bitfield << 24 | bits
            } else {
                bits
            });
        }
        id
    }

    /// One type of every kind a struct lookup must skip over, with trailing data.
    fn filler(&mut self, int: u32) {
        let arr = self.ty("", kind::ARRAY, 0, false, 0);
        for w in [int, int, 4] {
            self.word(w);
        }
        self.ty("color", kind::ENUM, 2, false, 4);
        for w in [self.str("RED"), 0, self.str("BLUE"), 1] {
            self.word(w);
        }
        let proto = self.ty("", kind::FUNC_PROTO, 2, false, int);
        for w in [self.str("a"), int, self.str("b"), arr] {
            self.word(w);
        }
        self.link(kind::FUNC, "f", proto);
        let var = self.ty("v", kind::VAR, 0, false, int);
        self.word(1);
        self.ty(".data", kind::DATASEC, 1, false, 4);
        for w in [var, 0, 4] {
            self.word(w);
        }
        self.ty("double", kind::FLOAT, 0, false, 8);
        self.ty("tag", kind::DECL_TAG, 0, false, var);
        self.word(u32::MAX);
        self.link(kind::TYPE_TAG, "user", int);
        self.ty("big", kind::ENUM64, 2, false, 8);
        for w in [self.str("A"), 1, 0, self.str("B"), 2, 3] {
            self.word(w);
        }
        self.link(kind::FWD, "sk_buff", 0);
        self.link(kind::RESTRICT, "", int);
        // A union with the name looked up below: a struct of that name must win.
        self.composite(kind::UNION, "sk_buff", 4, &[("len", int, 0, 0)]);
    }

    fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let word = |out: &mut Vec<u8>, v: u32| {
            out.extend_from_slice(&if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            });
        };
        out.extend_from_slice(&if self.big {
            MAGIC.to_be_bytes()
        } else {
            MAGIC.to_le_bytes()
        });
        out.extend_from_slice(&[1, 0]);
        let types_len = u32::try_from(self.types.len()).unwrap();
        for w in [
            24,
            0,
            types_len,
            types_len,
            u32::try_from(self.strings.len()).unwrap(),
        ] {
            word(&mut out, w);
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// A kernel-like `sk_buff`: members inside anonymous unions and structs, a member reached
/// through a typedef/const chain, `kind_flag` bitfields, and a pointer.
fn skb_btf(big: bool) -> (Builder, u32) {
    let mut b = Builder::new(big);
    let u32_ = b.int("unsigned int", 4, 32);
    let u16_ = b.int("short unsigned int", 2, 16);
    let u8_ = b.int("unsigned char", 1, 8);
    let ptr = b.link(kind::PTR, "", 0);
    b.filler(u32_);
    let list = b.composite(
        kind::STRUCT,
        "",
        16,
        &[("next", ptr, 0, 0), ("prev", ptr, 64, 0)],
    );
    let head = b.composite(
        kind::UNION,
        "",
        16,
        &[("", list, 0, 0), ("rbnode", ptr, 0, 0)],
    );
    let marks = b.composite(
        kind::UNION,
        "",
        4,
        &[("mark", u32_, 0, 0), ("reserved_tailroom", u32_, 0, 0)],
    );
    let group = b.composite(
        kind::STRUCT,
        "",
        8,
        &[("priority", u32_, 0, 0), ("", marks, 32, 0)],
    );
    let hdr = b.composite(
        kind::STRUCT,
        "hdr",
        4,
        &[("proto", u16_, 0, 0), ("ttl", u8_, 16, 0)],
    );
    let hdr_const = b.link(kind::CONST, "", hdr);
    let hdr_t = b.link(kind::TYPEDEF, "hdr_t", hdr_const);
    let hdr_vol = b.link(kind::VOLATILE, "", hdr_t);
    let skb = b.composite(
        kind::STRUCT,
        "sk_buff",
        64,
        &[
            ("", head, 0, 0),
            ("len", u32_, 128, 0),
            ("", group, 160, 0),
            ("hdr", hdr_vol, 256, 0),
            ("cloned", u8_, 320, 1),
            ("nohdr", u8_, 321, 1),
            ("dev", ptr, 384, 0),
        ],
    );
    let nr_bits = b.int("unsigned int", 4, 3);
    b.composite(kind::STRUCT, "old_style", 4, &[("flags", nr_bits, 0, 0)]);
    (b, skb)
}

fn offset(btf: &Btf, path: &str) -> Result<u32, BtfError> {
    btf.struct_member_offset("sk_buff", path)
}

#[test]
fn members_are_found_through_anonymous_unions_and_typedef_chains() {
    for big in [false, true] {
        let btf = Btf::parse(&skb_btf(big).0.build()).unwrap();
        for (path, want) in [
            ("next", 0),
            ("prev", 8),
            ("rbnode", 0),
            ("len", 16),
            ("priority", 20),
            ("mark", 24),
            ("reserved_tailroom", 24),
            ("hdr", 32),
            ("hdr.proto", 32),
            ("hdr.ttl", 34),
            ("dev", 48),
        ] {
            let got = offset(&btf, path);
            assert_eq!(got.ok(), Some(want), "{path} (big endian: {big})");
        }
    }
}

#[test]
fn offsets_the_kernel_may_lack_are_zero_the_others_errors() {
    let mut b = Builder::new(false);
    let u32_ = b.int("unsigned int", 4, 32);
    let ptr = b.link(kind::PTR, "", 0);
    let skb = [
        ("dev", ptr, 128, 0),
        ("len", u32_, 896, 0),
        ("data_len", u32_, 928, 0),
    ];
    let more = [("mark", u32_, 1312, 0), ("data", ptr, 1600, 0)];
    let all: Vec<Member<'_>> = skb.into_iter().chain(more).collect();
    b.composite(kind::STRUCT, "sk_buff", 224, &all);
    let without_dev = Btf::parse(&b.build()).unwrap();
    let err = kernel_offsets(&without_dev).unwrap_err();
    assert!(
        matches!(&err, BtfError::StructNotFound { name } if name == "net_device"),
        "{err}"
    );
    b.composite(
        kind::STRUCT,
        "net_device",
        256,
        &[("ifindex", u32_, 1792, 0)],
    );
    let o = kernel_offsets(&Btf::parse(&b.build()).unwrap()).unwrap();
    let want = KernelOffsets {
        nf_ctx_skb: 0,
        skb_len: 112,
        skb_data: 200,
        skb_nfct: 0,
        skb_dev: 16,
        dev_ifindex: 224,
        skb_data_len: 116,
        skb_head: 0,
        skb_network_header: 0,
    };
    assert_eq!(o, want);
}

#[test]
fn bitfields_have_no_byte_offset() {
    let btf = Btf::parse(&skb_btf(false).0.build()).unwrap();
    for path in ["cloned", "nohdr"] {
        assert!(
            matches!(offset(&btf, path), Err(BtfError::Bitfield { .. })),
            "{path}"
        );
    }
    let old = btf.struct_member_offset("old_style", "flags");
    assert!(matches!(old, Err(BtfError::Bitfield { .. })), "{old:?}");
}

#[test]
fn missing_structs_members_and_bad_paths_are_named() {
    let btf = Btf::parse(&skb_btf(false).0.build()).unwrap();
    let err = btf.struct_member_offset("bpf_nf_ctx", "skb").unwrap_err();
    assert!(matches!(err, BtfError::StructNotFound { .. }));
    assert!(err.to_string().contains("struct bpf_nf_ctx"), "{err}");
    let err = offset(&btf, "_nfct").unwrap_err();
    assert!(matches!(err, BtfError::MemberNotFound { .. }));
    assert!(
        err.to_string().contains("sk_buff") && err.to_string().contains("_nfct"),
        "{err}"
    );
    for path in ["", "len.", "hdr..ttl", "hdr.nope"] {
        assert!(
            matches!(offset(&btf, path), Err(BtfError::MemberNotFound { .. })),
            "{path:?}"
        );
    }
    assert!(matches!(
        offset(&btf, "dev.ifindex"),
        Err(BtfError::NotComposite { .. })
    ));
    assert!(matches!(
        offset(&btf, "len.x"),
        Err(BtfError::NotComposite { .. })
    ));
}

#[test]
fn split_btf_continues_the_base_ids_and_strings() {
    let (base, skb_id) = skb_btf(false);
    let base_btf = Btf::parse(&base.build()).unwrap();
    let mut module = Builder::split(&base);
    let u32_ = 1; // "unsigned int" is the base's first type
    let general = module.composite(kind::STRUCT, "nf_conntrack", 4, &[("use", u32_, 0, 0)]);
    module.composite(
        kind::STRUCT,
        "nf_conn",
        80,
        &[
            ("ct_general", general, 0, 0),
            ("mark", u32_, 64, 0),
            ("skb", skb_id, 128, 0),
        ],
    );
    let btf = Btf::from_split(&base_btf, &module.build()).unwrap();
    assert_eq!(btf.type_count(), base_btf.type_count() + 2);
    assert_eq!(btf.struct_member_offset("nf_conn", "mark").unwrap(), 8);
    assert_eq!(
        btf.struct_member_offset("nf_conn", "ct_general.use")
            .unwrap(),
        0
    );
    assert_eq!(
        btf.struct_member_offset("nf_conn", "skb.mark").unwrap(),
        16 + 24
    );
    assert_eq!(btf.struct_member_offset("sk_buff", "len").unwrap(), 16);
    let big = Btf::parse(&skb_btf(true).0.build()).unwrap();
    assert!(matches!(
        Btf::from_split(&big, &module.build()),
        Err(BtfError::SplitByteOrder)
    ));
}

#[test]
fn functions_are_found_by_name_with_split_ids() {
    let (base, _) = skb_btf(false);
    let base_btf = Btf::parse(&base.build()).unwrap();
    // `filler` has one FUNC, `f`; a struct named like a function is not one.
    let f = base_btf.func_id("f").unwrap().unwrap();
    assert!(f > 0 && (f as usize) <= base_btf.type_count());
    assert_eq!(base_btf.func_id("sk_buff").unwrap(), None);
    let mut module = Builder::split(&base);
    let proto = module.ty("", kind::FUNC_PROTO, 0, false, 0);
    let manip = module.link(kind::FUNC, "nf_nat_manip_pkt", proto);
    let btf = Btf::from_split(&base_btf, &module.build()).unwrap();
    assert!(manip as usize > base_btf.type_count());
    assert_eq!(btf.func_id("nf_nat_manip_pkt").unwrap(), Some(manip));
    assert_eq!(base_btf.func_id("nf_nat_manip_pkt").unwrap(), None);
    assert_eq!(btf.func_id("f").unwrap(), Some(f));
    // Structs by name: not the FUNC `f`, not the forward declaration of `sk_buff`.
    let skb = base_btf.struct_id("sk_buff").unwrap().unwrap();
    assert_eq!(base_btf.rec(skb).unwrap().kind, kind::STRUCT);
    assert_eq!(base_btf.struct_id("f").unwrap(), None);
    assert_eq!(btf.struct_id("sk_buff").unwrap(), Some(skb));
}

#[test]
fn malformed_blobs_are_errors_not_panics() {
    let good = skb_btf(false).0.build();
    for len in 0..good.len() {
        if let Ok(btf) = Btf::parse(&good[..len]) {
            let _ = offset(&btf, "hdr.ttl");
        }
    }
    let mut bad_magic = good.clone();
    bad_magic[0] = 0;
    assert!(matches!(
        Btf::parse(&bad_magic),
        Err(BtfError::BadMagic { .. })
    ));
    let mut unknown = Builder::new(false);
    unknown.ty("x", 25, 0, false, 0);
    assert!(matches!(
        Btf::parse(&unknown.build()),
        Err(BtfError::UnknownKind { id: 1, kind: 25 })
    ));
    let mut dangling = Builder::new(false);
    dangling.composite(kind::STRUCT, "s", 4, &[("", 99, 0, 0)]);
    let btf = Btf::parse(&dangling.build()).unwrap();
    assert!(matches!(
        btf.struct_member_offset("s", "x"),
        Err(BtfError::BadTypeId { id: 99 })
    ));
}

#[test]
fn offsets_bytes_match_the_struct_layout() {
    let o = KernelOffsets {
        nf_ctx_skb: 1,
        skb_len: 2,
        skb_data: 3,
        skb_nfct: 4,
        skb_dev: 5,
        dev_ifindex: 6,
        skb_data_len: 7,
        skb_head: 8,
        skb_network_header: 9,
    };
    // SAFETY: `KernelOffsets` is 36 bytes of `u32`s without padding (asserted in
    // tracer-common), so it has the same size as the array and every bit pattern is valid.
    let raw: [u8; 36] = unsafe { core::mem::transmute(o) };
    assert_eq!(kernel_offsets_bytes(&o), raw);
}

/// Runs against this machine's kernel, which must have BTF (pktrace refuses to run
/// without it).
#[test]
#[ignore = "root tier: reads the running kernel's BTF"]
fn running_kernel_offsets() {
    assert!(
        Path::new(VMLINUX_BTF).exists(),
        "{VMLINUX_BTF} missing (kernel without CONFIG_DEBUG_INFO_BTF)"
    );
    let btf = Btf::from_sys_fs().unwrap();
    let o = kernel_offsets(&btf).unwrap();
    println!(
        "kernel offsets from {VMLINUX_BTF} ({} types): {o:?}",
        btf.type_count()
    );
    assert!(
        o.skb_len != 0 && o.skb_data != 0 && o.skb_len != o.skb_data,
        "{o:?}"
    );
    assert!(
        o.skb_dev != 0 && o.dev_ifindex != 0 && o.skb_data_len != 0,
        "{o:?}"
    );
    if btf.find_composite("bpf_nf_ctx").unwrap().is_some() {
        // `struct bpf_nf_ctx { const struct nf_hook_state *state; struct sk_buff *skb; }`
        // (include/linux/netfilter.h, v6.4).
        assert_eq!(o.nf_ctx_skb, 8);
    }
}

#[test]
fn enum_values_are_read_in_order_for_both_enum_kinds() {
    for big in [false, true] {
        let mut b = Builder::new(big);
        let int = b.int("int", 4, 32);
        b.filler(int);
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(
            btf.enum_values("color").unwrap(),
            Some(vec![(0, "RED".to_owned()), (1, "BLUE".to_owned())])
        );
        assert_eq!(
            btf.enum_values("big").unwrap(),
            Some(vec![(1, "A".to_owned()), (2, "B".to_owned())])
        );
        assert_eq!(btf.enum_values("skb_drop_reason").unwrap(), None);
    }
}

/// This machine's kernel (6.18) names the drop reasons pktrace reports.
#[test]
fn the_running_kernel_names_its_drop_reasons() {
    let btf = Btf::from_sys_fs().unwrap();
    let values = btf.enum_values("skb_drop_reason").unwrap().unwrap();
    for want in [
        "SKB_CONSUMED",
        "SKB_DROP_REASON_NO_SOCKET",
        "SKB_DROP_REASON_NETFILTER_DROP",
    ] {
        assert!(values.iter().any(|(_, n)| n == want), "{want} missing");
    }
}
