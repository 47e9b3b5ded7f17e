//! Why BTF could not be read, or a struct member not found in it; each error names the struct
//! and member path, or the part of the blob that was malformed.

use std::io;

use thiserror::Error;

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

/// Which lookup failed, for error messages.
#[derive(Clone, Copy)]
pub(super) struct Lookup<'a> {
    pub(super) struct_name: &'a str,
    pub(super) member_path: &'a str,
}

/// How a member lookup failed.
#[derive(Clone, Copy)]
pub(super) enum Fault {
    Missing,
    Bitfield,
    NotComposite,
    TooDeep,
}

impl Lookup<'_> {
    pub(super) fn error(self, fault: Fault) -> BtfError {
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
