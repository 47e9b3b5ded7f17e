use tracer_common::nf_patch;

use super::*;
use crate::{
    kernel::btf::Btf,
    nat::netfilter::patches::{ConnOffsets, LoadPatch, NfPatches, Used},
};

/// `struct nf_conn` offsets of a kernel, made up.
const CONN: ConnOffsets = ConnOffsets {
    status: 128,
    orig_l3num: 60,
    orig_src: 40,
    orig_dst: 64,
    reply_src: 96,
    reply_dst: 120,
    orig_sport: 56,
    orig_dport: 80,
    reply_sport: 112,
    reply_dport: 136,
    proto: 82,
};

/// Patches as a kernel with these offsets and ids would give them; `_nfct` as `nfct`,
/// `struct nf_conn` as `conn`.
fn patches_with(nfct: Option<i16>, conn: Option<ConnOffsets>) -> NfPatches {
    let load = |placeholder, what, bytes, offset| LoadPatch {
        placeholder,
        what,
        bytes,
        offset,
    };
    let mut p = NfPatches {
        conntrack: conn.is_some(),
        loads: vec![
            load(nf_patch::CTX_SKB, "bpf_nf_ctx.skb", 8, Some(8)),
            load(nf_patch::CTX_STATE, "bpf_nf_ctx.state", 8, Some(0)),
            load(nf_patch::STATE_HOOK, "nf_hook_state.hook", 1, Some(0)),
            load(nf_patch::SKB_LEN, "sk_buff.len", 4, Some(112)),
            load(nf_patch::SKB_DATA_LEN, "sk_buff.data_len", 4, Some(116)),
            load(nf_patch::SKB_DATA, "sk_buff.data", 8, Some(200)),
            load(nf_patch::SKB_DEV, "sk_buff.dev", 8, Some(16)),
            load(nf_patch::SKB_NFCT, "sk_buff._nfct", 8, nfct),
            load(nf_patch::DEV_IFINDEX, "net_device.ifindex", 4, Some(224)),
        ],
        rdonly_cast: 61_234,
        types: vec![
            (nf_patch::TYPE_HEAD, "struct ipv6hdr", 5_001),
            (
                nf_patch::TYPE_NF_CONN,
                "struct nf_conn",
                if conn.is_some() { 5_003 } else { 5_001 },
            ),
        ],
    };
    p.loads.extend(ConnOffsets::loads(conn));
    p
}

fn patches(nfct: Option<i16>) -> NfPatches {
    patches_with(nfct, Some(CONN))
}

const LDX_DW: u8 = 0x79;
const LDX_W: u8 = 0x61;
const STX_W: u8 = 0x63;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;

/// A program shaped like the compiled `nf_*` programs: every placeholder once, among
/// instructions the patcher must leave alone.
fn placeholder_program() -> Vec<bpf_insn> {
    vec![
        insn(LDX_DW, 6, 1, nf_patch::CTX_SKB, 0), // 0: r6 = ctx->skb
        insn(LDX_W, 2, 6, nf_patch::SKB_LEN, 0),  // 1: r2 = skb->len
        insn(LDX_W, 3, 6, nf_patch::SKB_DATA_LEN, 0), // 2
        insn(LDX_DW, 7, 6, nf_patch::SKB_DATA, 0), // 3
        insn(0x18, 1, 1, 0, nf_patch::TYPE_HEAD), // 4: ld_imm64 (a map fd), left alone
        insn(0, 0, 0, 0, nf_patch::TYPE_NF_CONN), // 5: its second half
        insn(0xbf, 1, 7, 0, 0),                   // 6: r1 = r7
        insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_HEAD), // 7: r2 = type placeholder
        insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 8: call placeholder
        insn(0x07, 7, 0, 0, 20),                  // 9: r7 += 20
        insn(MOV32_IMM, 2, 0, 0, nf_patch::TYPE_HEAD), // 10: w2 = type placeholder
        insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 11
        insn(LDX_DW, 4, 6, nf_patch::SKB_NFCT, 0), // 12
        insn(LDX_DW, 5, 6, nf_patch::SKB_DEV, 0), // 13
        insn(LDX_W, 5, 5, nf_patch::DEV_IFINDEX, 0), // 14
        insn(LDX_W, 8, 10, -16, 0),               // 15: a stack load, left alone
        insn(LDX_W, 9, 10, -8, 0),                // 16: a stack load, left alone
        insn(CALL, 0, 0, 0, 5),                   // 17: bpf_ktime_get_ns, left alone
        insn(CALL, 0, 1, 0, nf_patch::RDONLY_CAST), // 18: a bpf-to-bpf call, left alone
        insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_NF_CONN), // 19: the nf_conn cast
        insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 20
        insn(LDX_DW, 1, 0, nf_patch::CT_STATUS, 0), // 21: r1 = ct->status
        insn(LDX_H, 2, 0, nf_patch::CT_ORIG_L3NUM, 0), // 22
        insn(LDX_W, 3, 0, nf_patch::CT_ORIG_SRC, 0), // 23
        insn(LDX_W, 4, 0, nf_patch::CT_ORIG_DST, 0), // 24
        insn(LDX_W, 5, 0, nf_patch::CT_REPLY_SRC, 0), // 25
        insn(LDX_W, 6, 0, nf_patch::CT_REPLY_DST, 0), // 26
        insn(LDX_H, 7, 0, nf_patch::CT_ORIG_SPORT, 0), // 27
        insn(LDX_H, 8, 0, nf_patch::CT_ORIG_DPORT, 0), // 28
        insn(LDX_H, 9, 0, nf_patch::CT_REPLY_SPORT, 0), // 29
        insn(LDX_H, 1, 0, nf_patch::CT_REPLY_DPORT, 0), // 30
        insn(LDX_B, 2, 0, nf_patch::CT_PROTO, 0), // 31
        insn(LDX_DW, 3, 1, nf_patch::CTX_STATE, 0), // 32: r3 = ctx->state
        insn(LDX_B, 3, 3, nf_patch::STATE_HOOK, 0), // 33: r3 = state->hook
        insn(MOV64_IMM, 0, 0, 0, 1),              // 34
        insn(0x95, 0, 0, 0, 0),                   // 35
    ]
}

fn fields(i: bpf_insn) -> (u8, u8, u8, i16, i32) {
    (i.code, i.dst_reg(), i.src_reg(), i.off, i.imm)
}

#[test]
fn placeholders_become_offsets_kfunc_calls_and_type_ids() {
    let original = placeholder_program();
    let mut insns = original.clone();
    let mut used = Used::default();
    patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
    used.check().unwrap();
    let want = [
        (LDX_DW, 6, 1, 8, 0),
        (LDX_W, 2, 6, 112, 0),
        (LDX_W, 3, 6, 116, 0),
        (LDX_DW, 7, 6, 200, 0),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(fields(insns[i]), *w, "instruction {i}");
    }
    assert_eq!(fields(insns[7]), (MOV64_IMM, 2, 0, 0, 5_001));
    assert_eq!(fields(insns[8]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
    assert_eq!(fields(insns[10]), (MOV32_IMM, 2, 0, 0, 5_001));
    assert_eq!(fields(insns[11]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
    assert_eq!(fields(insns[12]), (LDX_DW, 4, 6, 128, 0));
    assert_eq!(fields(insns[13]), (LDX_DW, 5, 6, 16, 0));
    assert_eq!(fields(insns[14]), (LDX_W, 5, 5, 224, 0));
    assert_eq!(fields(insns[15]), (LDX_W, 8, 10, -16, 0));
    assert_eq!(fields(insns[19]), (MOV64_IMM, 2, 0, 0, 5_003));
    assert_eq!(fields(insns[20]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
    let want = [
        (LDX_DW, 1, 0, 128, 0),
        (LDX_H, 2, 0, 60, 0),
        (LDX_W, 3, 0, 40, 0),
        (LDX_W, 4, 0, 64, 0),
        (LDX_W, 5, 0, 96, 0),
        (LDX_W, 6, 0, 120, 0),
        (LDX_H, 7, 0, 56, 0),
        (LDX_H, 8, 0, 80, 0),
        (LDX_H, 9, 0, 112, 0),
        (LDX_H, 1, 0, 136, 0),
        (LDX_B, 2, 0, 82, 0),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(fields(insns[21 + i]), *w, "instruction {}", 21 + i);
    }
    // Members at offset 0 (both of these) are offsets, not missing members.
    assert_eq!(fields(insns[32]), (LDX_DW, 3, 1, 0, 0));
    assert_eq!(fields(insns[33]), (LDX_B, 3, 3, 0, 0));
    for i in [4, 5, 6, 9, 16, 17, 18, 34, 35] {
        assert_eq!(
            fields(insns[i]),
            fields(original[i]),
            "instruction {i} changed"
        );
    }
}

#[test]
fn a_missing_optional_member_loads_zero() {
    let mut insns = placeholder_program();
    let mut used = Used::default();
    patch_instructions(&mut insns, &patches(None), &mut used).unwrap();
    used.check().unwrap();
    assert_eq!(fields(insns[12]), (MOV64_IMM, 4, 0, 0, 0));
}

/// A kernel whose vmlinux BTF has no `struct nf_conn` (conntrack as a module): the cast
/// gets another struct's id, every conntrack load becomes `dst = 0` (status 0: the
/// programs read the packet), the rest is patched as usual.
#[test]
fn without_nf_conn_the_conntrack_loads_read_zero() {
    let mut insns = placeholder_program();
    let mut used = Used::default();
    let p = patches_with(Some(128), None);
    assert!(!p.conntrack);
    patch_instructions(&mut insns, &p, &mut used).unwrap();
    used.check().unwrap();
    assert_eq!(fields(insns[19]), (MOV64_IMM, 2, 0, 0, 5_001));
    assert_eq!(fields(insns[20]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
    for (i, dst) in (21..32).zip([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]) {
        assert_eq!(
            fields(insns[i]),
            (MOV64_IMM, dst, 0, 0, 0),
            "instruction {i}"
        );
    }
    assert_eq!(fields(insns[12]), (LDX_DW, 4, 6, 128, 0));
}

/// The conntrack offsets from this kernel's BTF (vmlinux's, or with `nf_conntrack` built as a
/// module the module's on top of it): the reply tuple is one `nf_conntrack_tuple_hash` after
/// the original, both before `status`.
#[test]
#[ignore = "root tier: reads the running kernel's BTF"]
fn conntrack_offsets_from_this_kernel() {
    let vmlinux = Btf::from_sys_fs().expect("the running kernel's BTF");
    let btf = if ConnOffsets::from_btf(&vmlinux).unwrap().is_some() {
        vmlinux
    } else {
        Btf::from_sys_fs_module(&vmlinux, "nf_conntrack")
            .expect("no struct nf_conn in vmlinux BTF, and no nf_conntrack module BTF either")
    };
    let o = ConnOffsets::from_btf(&btf)
        .unwrap()
        .expect("struct nf_conn in nf_conntrack's BTF");
    let stride = btf.struct_size("nf_conntrack_tuple_hash").unwrap();
    assert_eq!(o.reply_src - o.orig_src, stride);
    assert_eq!(o.reply_dst - o.orig_dst, stride);
    // `src` (address, ports, l3num) then `dst` (address first).
    assert!(
        o.orig_src < o.orig_l3num && o.orig_l3num < o.orig_dst,
        "{o:?}"
    );
    assert!(o.reply_dst < o.status, "{o:?}");
    // Each address's ports right after it (`union nf_inet_addr` is 16 bytes), the
    // protocol after the destination port.
    assert_eq!(
        (o.orig_sport, o.orig_dport),
        (o.orig_src + 16, o.orig_dst + 16)
    );
    assert_eq!(o.reply_sport - o.orig_sport, stride);
    assert_eq!(o.reply_dport - o.orig_dport, stride);
    assert_eq!(o.proto, o.orig_dport + 2, "{o:?}");
}

#[test]
fn wrong_or_unknown_placeholders_are_refused() {
    let p = patches(Some(128));
    let refused = |i: bpf_insn| {
        let mut insns = vec![insn(MOV64_IMM, 0, 0, 0, 1), i];
        patch_instructions(&mut insns, &p, &mut Used::default()).unwrap_err()
    };
    // A 4-byte load of the 8-byte `data`.
    let (index, what) = refused(insn(LDX_W, 1, 6, nf_patch::SKB_DATA, 0));
    assert_eq!(index, 1);
    assert!(
        what.contains("sk_buff.data") && what.contains("4-byte"),
        "{what}"
    );
    let (_, what) = refused(insn(LDX_W, 1, 6, nf_patch::LOAD_LAST, 0));
    assert!(what.contains("unknown placeholder offset"), "{what}");
    let (_, what) = refused(insn(STX_W, 6, 1, nf_patch::SKB_LEN, 0));
    assert!(what.contains("store"), "{what}");
    let (_, what) = refused(insn(0x07, 1, 0, 0, i32::from(nf_patch::SKB_LEN)));
    assert!(what.contains("folded"), "{what}");
    let (_, what) = refused(insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_LAST));
    assert!(what.contains("unknown type placeholder"), "{what}");
}

#[test]
fn a_placeholder_no_program_holds_is_an_error() {
    let mut insns = placeholder_program();
    // Without the `ifindex` load (the programs read no `mark`: that one may go unused).
    insns.remove(14);
    let mut used = Used::default();
    patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
    let err = used.check().unwrap_err();
    assert!(err.to_string().contains("net_device.ifindex"), "{err}");
    let mut insns = placeholder_program();
    insns.retain(|i| i.imm != nf_patch::TYPE_HEAD || (i.code != MOV32_IMM && i.code != MOV64_IMM));
    let mut used = Used::default();
    patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
    assert!(used.check().unwrap_err().to_string().contains("ipv6hdr"));
}
