//! Looking up named types and struct member offsets in a [`Btf`], through anonymous struct and
//! union members and typedef/modifier chains the way C does; bitfields have no byte offset.

use super::{
    Btf, BtfError,
    error::{Fault, Lookup},
    format::{MAX_DEPTH, TypeRec, kind},
};

/// A member found by name: bits from the start of the outer struct, its type, bitfield size.
#[derive(Clone, Copy, Debug)]
struct Found {
    bits: u64,
    type_id: u32,
    bitfield_bits: u32,
}

impl Btf {
    /// The first struct (or, failing that, union) named `name`.
    pub(super) fn find_composite(&self, name: &str) -> Result<Option<TypeRec>, BtfError> {
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

    /// The type id of the typedef named `name`, if there is one: a `tp_btf` program's
    /// `attach_btf_id` is its tracepoint's `btf_trace_<name>` typedef.
    pub fn typedef_id(&self, name: &str) -> Result<Option<u32>, BtfError> {
        self.named_id(kind::TYPEDEF, name)
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
