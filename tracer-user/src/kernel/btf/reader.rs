//! Reading BTF blobs into a [`Btf`]: vmlinux from sysfs, a module's split BTF after its base,
//! every record indexed and checked to fit, so that lookups never read out of bounds.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use super::{
    BtfError, VMLINUX_BTF,
    format::{Endian, HEADER_LEN, MAGIC, TYPE_LEN, TypeRec, trailing_len},
};

/// Parsed BTF: type records and strings, with module (split) BTF appended after its base.
///
/// Types are kept as the raw bytes of the type section plus an index of where each record
/// starts, so a parsed vmlinux costs little more than its file.
#[derive(Clone, Debug)]
pub struct Btf {
    pub(super) big_endian: bool,
    /// Type sections, base first: type id `n` starts at `index[n - 1]` (id 0 is `void`).
    pub(super) types: Vec<u8>,
    pub(super) index: Vec<usize>,
    /// String sections, base first: split BTF's string offsets continue after the base's.
    pub(super) strings: Vec<u8>,
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

/// The running kernel's BTF, read and parsed on first use and then shared by everything
/// start-up asks of it (the NAT programs' offsets, the fentry target, the netfilter programs'
/// patches): one parse instead of one each. A failed read is not kept (the next `get` tries
/// again and gets its own error). Drop it once attached.
#[derive(Debug)]
pub struct KernelBtf {
    /// Where the vmlinux BTF is read from ([`VMLINUX_BTF`], or the start-up knob's path).
    path: PathBuf,
    btf: std::cell::OnceCell<Btf>,
}

impl Default for KernelBtf {
    /// The BTF at [`VMLINUX_BTF`].
    fn default() -> Self {
        Self::new(PathBuf::from(VMLINUX_BTF))
    }
}

impl KernelBtf {
    /// The BTF at `path`, read on first use.
    #[must_use]
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            btf: std::cell::OnceCell::new(),
        }
    }

    /// Where the BTF is read from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed BTF ([`Btf::read`]).
    pub fn get(&self) -> Result<&Btf, BtfError> {
        if let Some(btf) = self.btf.get() {
            return Ok(btf);
        }
        let btf = Btf::read(&self.path)?;
        Ok(self.btf.get_or_init(|| btf))
    }
}

impl Btf {
    /// Reads the running kernel's BTF from [`VMLINUX_BTF`].
    #[cfg(test)]
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::read(Path::new(VMLINUX_BTF))
    }

    /// Reads vmlinux BTF from `path` (a missing [`VMLINUX_BTF`] is "kernel without BTF").
    pub fn read(path: &Path) -> Result<Self, BtfError> {
        Self::parse(&read_btf_file(path)?)
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

    pub(super) fn endian(&self) -> Endian {
        Endian {
            big: self.big_endian,
        }
    }

    /// Decodes type `id` (not 0).
    pub(super) fn rec(&self, id: u32) -> Result<TypeRec, BtfError> {
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
    pub(super) fn name(&self, off: u32) -> Result<&[u8], BtfError> {
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
}
