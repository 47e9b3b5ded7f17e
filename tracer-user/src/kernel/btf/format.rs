//! The BTF format as this reader needs it (include/uapi/linux/btf.h, v6.12): the header
//! constants, the type kinds, one decoded type record, the bytes each kind's record trails, and
//! a byte-order aware reader of its integers.

use super::BtfError;

/// BTF header magic, as written by the producer's byte order.
pub(super) const MAGIC: u16 = 0xeb9f;
/// Size of `struct btf_header` up to `str_len`.
pub(super) const HEADER_LEN: usize = 24;
/// Size of `struct btf_type` (`name_off`, info, size/type).
pub(super) const TYPE_LEN: usize = 12;
/// Anonymous members nested deeper than this, or modifier chains longer, mean malformed BTF.
pub(super) const MAX_DEPTH: u32 = 64;

/// BTF kinds (`BTF_KIND_*`, include/uapi/linux/btf.h, v6.12).
pub(super) mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// One decoded `struct btf_type`, with where its trailing data starts in `Btf::types`.
#[derive(Clone, Copy, Debug)]
pub(super) struct TypeRec {
    pub(super) name_off: u32,
    pub(super) kind: u32,
    pub(super) vlen: usize,
    pub(super) kind_flag: bool,
    /// `size` for INT, STRUCT, UNION, ENUM, DATASEC, FLOAT; `type` for the others.
    pub(super) size_or_type: u32,
    pub(super) body: usize,
}

/// The byte-order aware reader of little integers.
#[derive(Clone, Copy)]
pub(super) struct Endian {
    pub(super) big: bool,
}

impl Endian {
    pub(super) fn u32(self, bytes: &[u8], off: usize, what: &'static str) -> Result<u32, BtfError> {
        let raw = off
            .checked_add(4)
            .and_then(|end| bytes.get(off..end))
            .ok_or(BtfError::Truncated { what })?;
        let raw: [u8; 4] = raw.try_into().map_err(|_| BtfError::Truncated { what })?;
        Ok(if self.big {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        })
    }
}

/// Bytes of trailing data after a type record of `kind` with `vlen` entries.
pub(super) const fn trailing_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::PTR
        | kind::FWD
        | kind::TYPEDEF
        | kind::VOLATILE
        | kind::CONST
        | kind::RESTRICT
        | kind::FUNC
        | kind::FLOAT
        | kind::TYPE_TAG => 0,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
        kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
        _ => return None,
    })
}
