//! Kernel structure offsets from the running kernel's BTF.
//!
//! The NAT programs read a few fields of `struct sk_buff`, `struct net_device` and
//! `struct bpf_nf_ctx`; their offsets change with every kernel build, so they are looked up
//! here at load time and handed to the programs in the `OFFSETS` global
//! ([`tracer_common::KernelOffsets`]), never hard-coded for one kernel.
//!
//! This is a small, safe reader of the BTF format (include/uapi/linux/btf.h and
//! Documentation/bpf/btf.rst, v6.12): the header, every type kind (so that each record's trailing
//! data is skipped correctly) and the string section, plus split BTF for kernel modules
//! (`/sys/kernel/btf/<module>`, whose type ids and string offsets continue after vmlinux's).
//! It answers one question: the byte offset of a member of a named struct, looking through
//! anonymous struct and union members the way C does (`sk_buff` keeps `len`, `mark`, `dev` and
//! others inside anonymous unions and `struct_group`s).

use std::{fs, io, path::Path};

use thiserror::Error;
use tracer_common::KernelOffsets;

/// Where the running kernel exposes its own BTF (needs `CONFIG_DEBUG_INFO_BTF`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// BTF header magic, as written by the producer's byte order.
const MAGIC: u16 = 0xeb9f;
/// Size of `struct btf_header` up to `str_len`.
const HEADER_LEN: usize = 24;
/// Size of `struct btf_type` (name_off, info, size/type).
const TYPE_LEN: usize = 12;
/// Anonymous members nested deeper than this, or modifier chains longer, mean malformed BTF.
const MAX_DEPTH: u32 = 64;

/// BTF kinds (`BTF_KIND_*`, include/uapi/linux/btf.h, v6.12).
mod kind {
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

/// Errors reading BTF or looking up a struct member in it.
#[derive(Debug, Error)]
pub enum BtfError {
    /// The kernel exposes no BTF.
    #[error(
        "kernel without BTF: {path} missing — needs a kernel built with CONFIG_DEBUG_INFO_BTF \
         (the NAT hooks need kernel struct offsets from it)"
    )]
    NoKernelBtf {
        path: String,
        #[source]
        source: io::Error,
    },
    /// A module has no BTF file.
    #[error(
        "no BTF for kernel module {module} in /sys/kernel/btf: the module is not loaded, or it is \
         built into the kernel (then its types are in the vmlinux BTF)"
    )]
    NoModuleBtf {
        module: String,
        #[source]
        source: io::Error,
    },
    /// A BTF file exists but cannot be read.
    #[error("cannot read BTF from {path}")]
    Read {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The data does not start with the BTF magic.
    #[error("not BTF: magic {magic:#06x}, expected 0xeb9f")]
    BadMagic { magic: u16 },
    /// A BTF version this reader does not know.
    #[error("unsupported BTF version {version} (this reader knows version 1)")]
    UnsupportedVersion { version: u8 },
    /// A header field, section, type record or string runs past the end of the data.
    #[error("BTF truncated or corrupt: {what} runs past the end of its section")]
    Truncated { what: &'static str },
    /// A type kind newer than this reader.
    #[error("BTF type {id} has unknown kind {kind} (BTF newer than pktrace's reader)")]
    UnknownKind { id: u32, kind: u32 },
    /// A type refers to a type id that does not exist.
    #[error("BTF refers to type id {id}, which does not exist")]
    BadTypeId { id: u32 },
    /// Split BTF whose byte order differs from its base's.
    #[error("module BTF and its base BTF differ in byte order")]
    SplitByteOrder,
    /// No struct or union of that name.
    #[error(
        "struct {name} is not in the kernel's BTF: this kernel does not have it (configured out, \
         renamed, or defined in a module whose BTF was not loaded)"
    )]
    StructNotFound { name: String },
    /// The struct has no member of that name, also not inside anonymous members.
    #[error(
        "struct {struct_name} has no member `{member}` in the kernel's BTF: this kernel's \
         layout differs from what pktrace knows (configured out or renamed)"
    )]
    MemberNotFound { struct_name: String, member: String },
    /// The member is a bitfield, which has no byte offset.
    #[error("{struct_name}.{member} is a bitfield: it has no byte offset")]
    Bitfield { struct_name: String, member: String },
    /// A path like `a.b` where `a` is not a struct or union (pointers are not followed).
    #[error(
        "in {struct_name}.{member}, a step before the last is not a struct or union (pointers \
         are not followed)"
    )]
    NotComposite { struct_name: String, member: String },
    /// Anonymous members or typedef chains nested absurdly deep: malformed BTF.
    #[error("BTF types nested too deep at {struct_name}.{member} (malformed BTF?)")]
    TooDeep { struct_name: String, member: String },
}

/// Parsed BTF: type records and strings, with module (split) BTF appended after its base.
///
/// Types are kept as the raw bytes of the type section plus an index of where each record
/// starts, so a parsed vmlinux costs little more than its file.
#[derive(Clone, Debug)]
pub struct Btf {
    big_endian: bool,
    /// Type sections, base first: type id `n` starts at `index[n - 1]` (id 0 is `void`).
    types: Vec<u8>,
    index: Vec<usize>,
    /// String sections, base first: split BTF's string offsets continue after the base's.
    strings: Vec<u8>,
}

/// One decoded `struct btf_type`, with where its trailing data starts in `Btf::types`.
#[derive(Clone, Copy, Debug)]
struct TypeRec {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// `size` for INT, STRUCT, UNION, ENUM, DATASEC, FLOAT; `type` for the others.
    size_or_type: u32,
    body: usize,
}

/// A member found by name: bits from the start of the outer struct, its type, bitfield size.
#[derive(Clone, Copy, Debug)]
struct Found {
    bits: u64,
    type_id: u32,
    bitfield_bits: u32,
}

/// The byte-order aware reader of little integers.
#[derive(Clone, Copy)]
struct Endian {
    big: bool,
}

impl Endian {
    fn u32(self, bytes: &[u8], off: usize, what: &'static str) -> Result<u32, BtfError> {
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
const fn trailing_len(kind: u32, vlen: usize) -> Option<usize> {
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

/// Reads a BTF file; a missing vmlinux file gets the "kernel without BTF" error.
fn read_btf_file(path: &Path) -> Result<Vec<u8>, BtfError> {
    fs::read(path).map_err(|source| {
        let path = path.display().to_string();
        if source.kind() == io::ErrorKind::NotFound && path == VMLINUX_BTF {
            BtfError::NoKernelBtf { path, source }
        } else {
            BtfError::Read { path, source }
        }
    })
}

/// The running kernel's BTF, read and parsed on first use and then shared by the NAT hooks
/// start-up tries (the fentry target, the netfilter programs' patches): one parse instead of
/// one each. A failed read is not kept (the next `get` tries again and gets its own error).
/// Drop it once attached.
#[derive(Debug, Default)]
pub struct KernelBtf(std::cell::OnceCell<Btf>);

impl KernelBtf {
    /// The parsed BTF ([`Btf::from_sys_fs`]).
    pub fn get(&self) -> Result<&Btf, BtfError> {
        if let Some(btf) = self.0.get() {
            return Ok(btf);
        }
        let btf = Btf::from_sys_fs()?;
        Ok(self.0.get_or_init(|| btf))
    }
}

impl Btf {
    /// Reads the running kernel's BTF from [`VMLINUX_BTF`] (or the hidden override
    /// `PKTRACE_BTF_PATH`, see `caps::btf_path`).
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::parse(&read_btf_file(Path::new(&crate::caps::btf_path()))?)
    }

    /// Reads a kernel module's split BTF (`/sys/kernel/btf/<module>`, e.g. `nf_conntrack` when
    /// conntrack is built as a module) on top of `base` (the vmlinux BTF).
    pub fn from_sys_fs_module(base: &Self, module: &str) -> Result<Self, BtfError> {
        let path = Path::new("/sys/kernel/btf").join(module);
        let bytes = read_btf_file(&path).map_err(|e| match e {
            BtfError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                BtfError::NoModuleBtf {
                    module: module.to_owned(),
                    source,
                }
            }
            other => other,
        })?;
        Self::from_split(base, &bytes)
    }

    /// Parses standalone BTF (vmlinux, or any blob whose type ids start at 1).
    pub fn parse(bytes: &[u8]) -> Result<Self, BtfError> {
        let empty = Self {
            big_endian: false,
            types: Vec::new(),
            index: Vec::new(),
            strings: Vec::new(),
        };
        empty.extend(bytes)
    }

    /// Parses split BTF (a kernel module's) whose type ids continue after `base`'s last one and
    /// whose string offsets continue after `base`'s string section; the result holds both, so
    /// module types can refer to base types (e.g. `struct nf_conn` to `struct sk_buff`).
    pub fn from_split(base: &Self, module_bytes: &[u8]) -> Result<Self, BtfError> {
        base.clone().extend(module_bytes)
    }

    /// Number of types (not counting `void`, id 0).
    #[cfg(test)]
    #[must_use]
    pub fn type_count(&self) -> usize {
        self.index.len()
    }

    /// Appends one BTF blob's types and strings (split BTF when `self` is not empty).
    fn extend(mut self, bytes: &[u8]) -> Result<Self, BtfError> {
        let big = match bytes.get(..2) {
            Some(m) if m == MAGIC.to_le_bytes() => false,
            Some(m) if m == MAGIC.to_be_bytes() => true,
            Some(&[a, b]) => {
                return Err(BtfError::BadMagic {
                    magic: u16::from_le_bytes([a, b]),
                });
            }
            _ => return Err(BtfError::Truncated { what: "header" }),
        };
        if !self.index.is_empty() && big != self.big_endian {
            return Err(BtfError::SplitByteOrder);
        }
        self.big_endian = big;
        let e = Endian { big };
        let version = *bytes.get(2).ok_or(BtfError::Truncated { what: "header" })?;
        if version != 1 {
            return Err(BtfError::UnsupportedVersion { version });
        }
        let hdr_len = e.u32(bytes, 4, "header")? as usize;
        if hdr_len < HEADER_LEN {
            return Err(BtfError::Truncated { what: "header" });
        }
        let section = |off_at: usize, what: &'static str| -> Result<&[u8], BtfError> {
            let off = e.u32(bytes, off_at, "header")? as usize;
            let len = e.u32(bytes, off_at + 4, "header")? as usize;
            hdr_len
                .checked_add(off)
                .and_then(|start| Some(start..start.checked_add(len)?))
                .and_then(|range| bytes.get(range))
                .ok_or(BtfError::Truncated { what })
        };
        let types = section(8, "type section")?;
        let strings = section(16, "string section")?;
        self.index_types(types, e)?;
        self.strings.extend_from_slice(strings);
        Ok(self)
    }

    /// Records where each type of `types` starts, checking that its trailing data fits.
    fn index_types(&mut self, types: &[u8], e: Endian) -> Result<(), BtfError> {
        let base = self.types.len();
        let mut off = 0;
        while off < types.len() {
            let id = u32::try_from(self.index.len() + 1)
                .map_err(|_| BtfError::Truncated { what: "type ids" })?;
            let info = e.u32(types, off + 4, "type record")?;
            e.u32(types, off + 8, "type record")?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let trailing = trailing_len(kind, vlen).ok_or(BtfError::UnknownKind { id, kind })?;
            let end = off + TYPE_LEN + trailing;
            if end > types.len() {
                return Err(BtfError::Truncated {
                    what: "type record",
                });
            }
            self.index.push(base + off);
            off = end;
        }
        self.types.extend_from_slice(types);
        Ok(())
    }

    fn endian(&self) -> Endian {
        Endian {
            big: self.big_endian,
        }
    }

    /// Decodes type `id` (not 0).
    fn rec(&self, id: u32) -> Result<TypeRec, BtfError> {
        let start = id
            .checked_sub(1)
            .and_then(|i| self.index.get(i as usize))
            .copied()
            .ok_or(BtfError::BadTypeId { id })?;
        let e = self.endian();
        let info = e.u32(&self.types, start + 4, "type record")?;
        Ok(TypeRec {
            name_off: e.u32(&self.types, start, "type record")?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: e.u32(&self.types, start + 8, "type record")?,
            body: start + TYPE_LEN,
        })
    }

    /// The NUL-terminated string at `off` in the string section.
    fn name(&self, off: u32) -> Result<&[u8], BtfError> {
        let rest = self
            .strings
            .get(off as usize..)
            .ok_or(BtfError::Truncated { what: "string" })?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(BtfError::Truncated { what: "string" })?;
        Ok(&rest[..len])
    }

    /// The first struct (or, failing that, union) named `name`.
    fn find_composite(&self, name: &str) -> Result<Option<TypeRec>, BtfError> {
        let mut union = None;
        // `index_types` checked that every id fits in a u32.
        let count = u32::try_from(self.index.len()).unwrap_or(u32::MAX);
        for id in 1..=count {
            let rec = self.rec(id)?;
            if !matches!(rec.kind, kind::STRUCT | kind::UNION)
                || self.name(rec.name_off)? != name.as_bytes()
            {
                continue;
            }
            if rec.kind == kind::STRUCT {
                return Ok(Some(rec));
            }
            union.get_or_insert(rec);
        }
        Ok(union)
    }

    /// The type id of the function (`BTF_KIND_FUNC`) named `name`, if there is one. In split
    /// BTF the ids continue after the base's, as the kernel numbers them: the id of a module's
    /// function is what `BPF_PROG_LOAD` wants as `attach_btf_id` with that module's BTF object.
    pub fn func_id(&self, name: &str) -> Result<Option<u32>, BtfError> {
        self.named_id(kind::FUNC, name)
    }

    /// The type id of the struct (`BTF_KIND_STRUCT`, not a forward declaration or union) named
    /// `name`, if there is one: what `bpf_rdonly_cast` wants as its type argument.
    pub fn struct_id(&self, name: &str) -> Result<Option<u32>, BtfError> {
        self.named_id(kind::STRUCT, name)
    }

    /// Size in bytes of the struct (or union) `struct_name`, as an array of it strides.
    pub fn struct_size(&self, struct_name: &str) -> Result<u32, BtfError> {
        self.find_composite(struct_name)?
            .map(|rec| rec.size_or_type)
            .ok_or_else(|| BtfError::StructNotFound {
                name: struct_name.to_owned(),
            })
    }

    /// The first type of kind `kind` named `name`.
    fn named_id(&self, kind: u32, name: &str) -> Result<Option<u32>, BtfError> {
        // `index_types` checked that every id fits in a u32.
        let count = u32::try_from(self.index.len()).unwrap_or(u32::MAX);
        for id in 1..=count {
            let rec = self.rec(id)?;
            if rec.kind == kind && self.name(rec.name_off)? == name.as_bytes() {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Follows typedef, const, volatile, restrict and type-tag links from `id` to the type
    /// they name; `None` for `void`.
    fn strip(&self, mut id: u32) -> Result<Option<TypeRec>, BtfError> {
        for _ in 0..MAX_DEPTH {
            if id == 0 {
                return Ok(None);
            }
            let rec = self.rec(id)?;
            match rec.kind {
                kind::TYPEDEF | kind::CONST | kind::VOLATILE | kind::RESTRICT | kind::TYPE_TAG => {
                    id = rec.size_or_type;
                }
                _ => return Ok(Some(rec)),
            }
        }
        Err(BtfError::BadTypeId { id })
    }

    /// The struct or union that `id` names through modifiers, if it is one.
    fn composite(&self, id: u32) -> Result<Option<TypeRec>, BtfError> {
        Ok(self
            .strip(id)?
            .filter(|rec| matches!(rec.kind, kind::STRUCT | kind::UNION)))
    }

    /// Member `name` of `outer`, searched through anonymous struct/union members (depth first,
    /// in declaration order, as C name lookup does). `at` names the lookup for errors.
    fn find_member(
        &self,
        outer: TypeRec,
        name: &[u8],
        depth: u32,
        at: Lookup<'_>,
    ) -> Result<Option<Found>, BtfError> {
        if depth > MAX_DEPTH {
            return Err(at.error(Fault::TooDeep));
        }
        let e = self.endian();
        for i in 0..outer.vlen {
            let rec = outer.body + 12 * i;
            let name_off = e.u32(&self.types, rec, "member")?;
            let type_id = e.u32(&self.types, rec + 4, "member")?;
            let offset = e.u32(&self.types, rec + 8, "member")?;
            let (bits, bitfield_bits) = if outer.kind_flag {
                (u64::from(offset & 0x00ff_ffff), offset >> 24)
            } else {
                (u64::from(offset), 0)
            };
            let member_name = self.name(name_off)?;
            if member_name == name {
                return Ok(Some(Found {
                    bits,
                    type_id,
                    bitfield_bits,
                }));
            }
            if member_name.is_empty()
                && let Some(inner) = self.composite(type_id)?
                && let Some(found) = self.find_member(inner, name, depth + 1, at)?
            {
                return Ok(Some(Found {
                    bits: bits + found.bits,
                    ..found
                }));
            }
        }
        Ok(None)
    }

    /// True when an INT member without `kind_flag` encoding is an old-style bitfield (its
    /// INT type has fewer bits than its size, or a bit offset).
    fn is_int_bitfield(&self, type_id: u32) -> Result<bool, BtfError> {
        let Some(rec) = self.strip(type_id)? else {
            return Ok(false);
        };
        if rec.kind != kind::INT {
            return Ok(false);
        }
        let encoding = self.endian().u32(&self.types, rec.body, "int encoding")?;
        let bits = encoding & 0xff;
        let offset = (encoding >> 16) & 0xff;
        Ok(offset != 0 || u64::from(bits) != u64::from(rec.size_or_type) * 8)
    }

    /// Byte offset of `member_path` in struct (or union) `struct_name`.
    ///
    /// `member_path` is a member name or a dotted path through embedded structs (`a.b`; pointers
    /// are not followed). Anonymous struct and union members are searched as C does, so
    /// `sk_buff`'s `len` is found whether or not this kernel wraps it in an anonymous union.
    /// Errors when the struct or member is absent, when a path step is not a struct or union,
    /// and when the member is a bitfield (no byte offset).
    pub fn struct_member_offset(
        &self,
        struct_name: &str,
        member_path: &str,
    ) -> Result<u32, BtfError> {
        let at = Lookup {
            struct_name,
            member_path,
        };
        if member_path.split('.').any(str::is_empty) {
            return Err(at.error(Fault::Missing));
        }
        let mut outer =
            self.find_composite(struct_name)?
                .ok_or_else(|| BtfError::StructNotFound {
                    name: struct_name.to_owned(),
                })?;
        let mut bits = 0u64;
        let mut steps = member_path.split('.').peekable();
        while let Some(step) = steps.next() {
            let found = self
                .find_member(outer, step.as_bytes(), 0, at)?
                .ok_or_else(|| at.error(Fault::Missing))?;
            bits += found.bits;
            if steps.peek().is_none() {
                if found.bitfield_bits != 0
                    || !bits.is_multiple_of(8)
                    || self.is_int_bitfield(found.type_id)?
                {
                    return Err(at.error(Fault::Bitfield));
                }
                break;
            }
            outer = self
                .composite(found.type_id)?
                .ok_or_else(|| at.error(Fault::NotComposite))?;
        }
        u32::try_from(bits / 8).map_err(|_| BtfError::Truncated {
            what: "member offset",
        })
    }
}

/// Which lookup failed, for error messages.
#[derive(Clone, Copy)]
struct Lookup<'a> {
    struct_name: &'a str,
    member_path: &'a str,
}

/// How a member lookup failed.
#[derive(Clone, Copy)]
enum Fault {
    Missing,
    Bitfield,
    NotComposite,
    TooDeep,
}

impl Lookup<'_> {
    fn error(self, fault: Fault) -> BtfError {
        let struct_name = self.struct_name.to_owned();
        let member = self.member_path.to_owned();
        match fault {
            Fault::Missing => BtfError::MemberNotFound {
                struct_name,
                member,
            },
            Fault::Bitfield => BtfError::Bitfield {
                struct_name,
                member,
            },
            Fault::NotComposite => BtfError::NotComposite {
                struct_name,
                member,
            },
            Fault::TooDeep => BtfError::TooDeep {
                struct_name,
                member,
            },
        }
    }
}

/// Offset of a member the programs can do without: 0 ("unknown") when this kernel lacks the
/// struct or member, other errors still fail.
fn optional(found: Result<u32, BtfError>) -> Result<u32, BtfError> {
    match found {
        Err(BtfError::StructNotFound { .. } | BtfError::MemberNotFound { .. }) => Ok(0),
        other => other,
    }
}

/// The offsets the NAT programs need, from the kernel's BTF.
///
/// Two are optional and 0 ("unknown", neither can be at offset 0) when this kernel lacks them:
/// `nf_ctx_skb` (`struct bpf_nf_ctx` exists from Linux 6.4 with `CONFIG_NETFILTER_BPF_LINK`,
/// include/linux/filter.h, v6.4; only the netfilter-link programs need it) and `skb_nfct`
/// (`sk_buff._nfct` exists only with conntrack, include/linux/skbuff.h, v6.1). The others are
/// required: a kernel without them cannot be traced, and the error names the struct and member.
pub fn kernel_offsets(btf: &Btf) -> Result<KernelOffsets, BtfError> {
    Ok(KernelOffsets {
        nf_ctx_skb: optional(btf.struct_member_offset("bpf_nf_ctx", "skb"))?,
        skb_len: btf.struct_member_offset("sk_buff", "len")?,
        skb_data: btf.struct_member_offset("sk_buff", "data")?,
        skb_nfct: optional(btf.struct_member_offset("sk_buff", "_nfct"))?,
        skb_mark: btf.struct_member_offset("sk_buff", "mark")?,
        skb_dev: btf.struct_member_offset("sk_buff", "dev")?,
        dev_ifindex: btf.struct_member_offset("net_device", "ifindex")?,
        skb_data_len: btf.struct_member_offset("sk_buff", "data_len")?,
    })
}

/// [`KernelOffsets`] as the bytes of the `OFFSETS` global, for
/// `EbpfLoader::override_global` and the netfilter loader's globals.
#[must_use]
pub fn kernel_offsets_bytes(o: &KernelOffsets) -> [u8; 32] {
    let fields = [
        o.nf_ctx_skb,
        o.skb_len,
        o.skb_data,
        o.skb_nfct,
        o.skb_mark,
        o.skb_dev,
        o.dev_ifindex,
        o.skb_data_len,
    ];
    let mut out = [0; 32];
    for (chunk, field) in out.chunks_exact_mut(4).zip(fields) {
        chunk.copy_from_slice(&field.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    /// through a typedef/const chain, kind_flag bitfields, and a pointer.
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
            skb_mark: 164,
            skb_dev: 16,
            dev_ifindex: 224,
            skb_data_len: 116,
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
            skb_mark: 5,
            skb_dev: 6,
            dev_ifindex: 7,
            skb_data_len: 8,
        };
        // SAFETY: `KernelOffsets` is 32 bytes of `u32`s without padding (asserted in
        // tracer-common), so it has the same size as the array and every bit pattern is valid.
        let raw: [u8; 32] = unsafe { core::mem::transmute(o) };
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
            o.skb_mark != 0 && o.skb_dev != 0 && o.dev_ifindex != 0 && o.skb_data_len != 0,
            "{o:?}"
        );
        if btf.find_composite("bpf_nf_ctx").unwrap().is_some() {
            // `struct bpf_nf_ctx { const struct nf_hook_state *state; struct sk_buff *skb; }`
            // (include/linux/netfilter.h, v6.4).
            assert_eq!(o.nf_ctx_skb, 8);
        }
    }
}
