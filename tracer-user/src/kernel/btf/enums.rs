//! Reading a named enum's values from a [`Btf`]: the kernel's own names for numbers it reports
//! (`enum skb_drop_reason`, whose numbers and names change between kernels).

use super::{Btf, BtfError, format::kind};

impl Btf {
    /// The values of the enum (`BTF_KIND_ENUM`, or `ENUM64` cut to its low 32 bits) named
    /// `name`, as (value, name) in declaration order; `None` when this BTF has no such enum.
    pub fn enum_values(&self, name: &str) -> Result<Option<Vec<(u32, String)>>, BtfError> {
        // `index_types` checked that every id fits in a u32.
        let count = u32::try_from(self.index.len()).unwrap_or(u32::MAX);
        for id in 1..=count {
            let rec = self.rec(id)?;
            if !matches!(rec.kind, kind::ENUM | kind::ENUM64)
                || self.name(rec.name_off)? != name.as_bytes()
            {
                continue;
            }
            let stride = if rec.kind == kind::ENUM { 8 } else { 12 };
            let e = self.endian();
            let mut out = Vec::with_capacity(rec.vlen);
            for i in 0..rec.vlen {
                let at = rec.body + stride * i;
                let name_off = e.u32(&self.types, at, "enum value")?;
                // ENUM64 keeps the low half first (`struct btf_enum64`: `val_lo32`, `val_hi32`).
                let value = e.u32(&self.types, at + 4, "enum value")?;
                let text = String::from_utf8_lossy(self.name(name_off)?).into_owned();
                out.push((value, text));
            }
            return Ok(Some(out));
        }
        Ok(None)
    }
}
