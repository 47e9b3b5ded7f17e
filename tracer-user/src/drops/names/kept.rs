//! The names given to drop locations, kept by address within a byte bound: a name is looked up
//! (or learnt from the kernel) once per location, and what is kept cannot grow with a kernel
//! that drops from ever new places.

use std::{collections::HashMap, rc::Rc};

use crate::diag;

/// Most bytes the kept names take, as [`entry_bytes`] counts them: a few hundred places in
/// the kernel drop, some 20 bytes of name each; reaching this empties the table (said once),
/// and the names are looked up again as their drops come.
pub(super) const KEPT_BYTES: usize = 256 << 10;

/// What one kept name costs: its bytes, the `Rc`'s counts and the allocator's rounding, and
/// the table's slot (address, pointer and length, control byte, spare capacity).
const fn entry_bytes(name: &str) -> usize {
    name.len() + 64
}

/// Names of drop locations by address.
#[derive(Debug, Default)]
pub(super) struct Kept {
    names: HashMap<u64, Rc<str>>,
    /// Sum of [`entry_bytes`] over `names`.
    bytes: usize,
}

impl Kept {
    pub(super) fn get(&self, addr: u64) -> Option<Rc<str>> {
        self.names.get(&addr).map(Rc::clone)
    }

    /// Keeps `name` for `addr` (in place of any name kept for it); when that would pass
    /// [`KEPT_BYTES`], forgets every name first and says so once.
    pub(super) fn insert(&mut self, addr: u64, name: Rc<str>) {
        let add = entry_bytes(&name);
        if let Some(old) = self.names.remove(&addr) {
            self.bytes -= entry_bytes(&old);
        }
        if self.bytes + add > KEPT_BYTES {
            diag::once(
                "drop-locations",
                format_args!(
                    "drops came from more places than {} KiB of names hold ({} of them): \
                     those names are forgotten and looked up again",
                    KEPT_BYTES >> 10,
                    self.names.len()
                ),
            );
            self.names.clear();
            self.bytes = 0;
        }
        self.bytes += add;
        self.names.insert(addr, name);
    }

    /// Bytes the kept names take, as [`entry_bytes`] counts them.
    #[cfg(test)]
    pub(super) const fn bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
}
