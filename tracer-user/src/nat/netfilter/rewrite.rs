//! Rewriting the placeholder instructions of the netfilter programs in place, strictly: each
//! placeholder load gets its member offset (or becomes `dst = 0`), each placeholder call the
//! `bpf_rdonly_cast` kfunc, each placeholder type id the kernel's; anything else is an error.

use aya_obj::generated::bpf_insn;
use tracer_common::nf_patch;

use super::patches::{NfPatches, Used};

/// `BPF_PSEUDO_KFUNC_CALL`: a call's `src_reg` for a kernel function (include/uapi/linux/bpf.h).
const PSEUDO_KFUNC_CALL: u8 = 2;
/// Instruction classes, modes and operations (include/uapi/linux/bpf.h, `bpf_common.h`).
const CLASS_MASK: u8 = 0x07;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU: u8 = 0x04;
const CLASS_ALU64: u8 = 0x07;
const MODE_MASK: u8 = 0xe0;
const MODE_MEM: u8 = 0x60;
const OP_MASK: u8 = 0xf0;
const OP_ADD: u8 = 0x00;
const OP_MOV: u8 = 0xb0;
const SRC_X: u8 = 0x08;
const CALL: u8 = 0x85;
pub(super) const MOV64_IMM: u8 = 0xb7;
const MOV32_IMM: u8 = 0xb4;

/// Bytes of a load or store of `code` (`BPF_W`, `BPF_H`, `BPF_B`, `BPF_DW`).
const fn access_bytes(code: u8) -> u8 {
    match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => 8,
    }
}

/// Rewrites every placeholder of [`nf_patch`] in `insns` as `patches` says and notes it in
/// `used`. Strict: a placeholder load of the wrong size or kind, an unknown placeholder, or a
/// placeholder offset outside a load (the compiler did not fold it into the load) is an
/// error `(instruction index, what)`.
pub fn patch_instructions(
    insns: &mut [bpf_insn],
    patches: &NfPatches,
    used: &mut Used,
) -> Result<(), (usize, String)> {
    let load_range = nf_patch::LOAD_FIRST..=nf_patch::LOAD_LAST;
    let type_range = nf_patch::TYPE_FIRST..=nf_patch::TYPE_LAST;
    for (index, insn) in insns.iter_mut().enumerate() {
        let code = insn.code;
        let class = code & CLASS_MASK;
        if load_range.contains(&insn.off) && matches!(class, CLASS_LDX | CLASS_ST | CLASS_STX) {
            patch_load(insn, patches, used).map_err(|what| (index, what))?;
            continue;
        }
        let op = code & OP_MASK;
        let alu = matches!(class, CLASS_ALU | CLASS_ALU64) && code & SRC_X == 0;
        if alu && op == OP_ADD && i16::try_from(insn.imm).is_ok_and(|imm| load_range.contains(&imm))
        {
            return Err((
                index,
                format!(
                    "placeholder offset {:#x} added to a register instead of folded into a load",
                    insn.imm
                ),
            ));
        }
        if code == CALL && insn.src_reg() == 0 && insn.imm == nf_patch::RDONLY_CAST {
            insn.set_src_reg(PSEUDO_KFUNC_CALL);
            insn.off = 0;
            insn.imm = i32::try_from(patches.rdonly_cast)
                .map_err(|_| (index, "bpf_rdonly_cast's BTF id is too large".to_owned()))?;
            used.rdonly_cast = true;
            continue;
        }
        if alu && op == OP_MOV && type_range.contains(&insn.imm) {
            debug_assert!(matches!(code, MOV64_IMM | MOV32_IMM));
            let placeholder = insn.imm;
            let Some(&(_, what, id)) = patches.types.iter().find(|t| t.0 == placeholder) else {
                return Err((index, format!("unknown type placeholder {placeholder:#x}")));
            };
            insn.imm = i32::try_from(id)
                .map_err(|_| (index, format!("the BTF id of {what} is too large")))?;
            used.types.insert(placeholder);
        }
    }
    Ok(())
}

/// Rewrites placeholder load `insn` (its offset is a placeholder, its class a load or store):
/// the member's offset, or `dst = 0` for a member this kernel lacks. Errors say what is wrong
/// with it: a store or non-plain load, an unknown placeholder, or the wrong size.
fn patch_load(insn: &mut bpf_insn, patches: &NfPatches, used: &mut Used) -> Result<(), String> {
    let code = insn.code;
    if code & CLASS_MASK != CLASS_LDX || code & MODE_MASK != MODE_MEM {
        return Err(format!(
            "placeholder offset {:#x} in a store or a non-plain load (code {code:#04x})",
            insn.off
        ));
    }
    let Some(p) = patches.loads.iter().find(|p| p.placeholder == insn.off) else {
        return Err(format!("unknown placeholder offset {:#x}", insn.off));
    };
    let bytes = access_bytes(code);
    if bytes != p.bytes {
        return Err(format!(
            "{}: a {bytes}-byte load of a {}-byte member",
            p.what, p.bytes
        ));
    }
    used.loads.insert(p.placeholder);
    if let Some(off) = p.offset {
        insn.off = off;
    } else {
        let dst = insn.dst_reg();
        *insn = mov64_imm(dst, 0);
    }
    Ok(())
}

/// `dst = imm` (64-bit).
fn mov64_imm(dst: u8, imm: i32) -> bpf_insn {
    bpf_insn {
        code: MOV64_IMM,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, 0),
        off: 0,
        imm,
    }
}

/// One eBPF instruction.
#[cfg(test)]
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    bpf_insn {
        code,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
        off,
        imm,
    }
}

#[cfg(test)]
mod tests;
