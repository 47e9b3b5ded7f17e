//! Following a flow from user space, as the kernel's NAT programs do (tracer-ebpf `followed.rs`,
//! `follow_flow`): the tc programs pass a packet of no traced address when its tuple is in
//! `FOLLOWED_FLOWS`, and ask that map only past three gates in the object's `.bss`:
//! `FLOWS_PRESENT` (set once any flow is followed), `FLOW_ADDRS` (a byte per hashed IPv4
//! address) and `FLOW_TUPLES` (a byte per hashed tuple). User space sets the gates, then
//! inserts the tuples.
//!
//! aya 0.14 does not map `.bss` into memory, so the gates are written as the whole section
//! (`BPF_MAP_UPDATE_ELEM` of its one value) from a copy read once: right only while nothing
//! else writes the section, which holds with `--nat-hook conntrack` (the NAT programs, the
//! only kernel writers of the gates, are not loaded; the tc programs only read them).

use std::{io, os::fd::AsFd as _};

use aya::{Ebpf, maps::MapData};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use tracer_common::{FAMILY_IPV4, Tuple, flow_addr_slot, flow_tuple_slot};

use crate::kernel::sys;

/// Where each gate lies in `.bss`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub present: usize,
    pub addrs: usize,
    pub tuples: usize,
}

/// Finds the gates in the eBPF object's symbol table.
///
/// # Errors
/// A gate is missing or not in `.bss` (the object does not match this pktrace).
pub fn layout(object: &[u8]) -> Result<Layout, String> {
    let file = object::File::parse(object).map_err(|e| format!("reading the eBPF object: {e}"))?;
    let find = |name: &str| -> Result<usize, String> {
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .ok_or_else(|| format!("{name} is missing from the eBPF object"))?;
        let section = sym
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
            .ok_or_else(|| format!("{name} has no section"))?;
        if section.name() != Ok(".bss") {
            return Err(format!("{name} is not in .bss"));
        }
        usize::try_from(sym.address() - section.address()).map_err(|e| e.to_string())
    };
    Ok(Layout {
        present: find("FLOWS_PRESENT")?,
        addrs: find("FLOW_ADDRS")?,
        tuples: find("FLOW_TUPLES")?,
    })
}

/// Sets the gate bytes of `tuples` (and of their reverses) in a copy of `.bss`; true when a
/// byte changed.
#[must_use]
pub fn set_gates(bss: &mut [u8], at: Layout, tuples: &[Tuple]) -> bool {
    let mut changed = false;
    let mut set = |i: usize| {
        if let Some(b) = bss.get_mut(i)
            && *b == 0
        {
            *b = 1;
            changed = true;
        }
    };
    for t in tuples {
        if t.family == FAMILY_IPV4 {
            for a in [&t.saddr, &t.daddr] {
                set(at.addrs + flow_addr_slot(u32::from_ne_bytes([a[0], a[1], a[2], a[3]])));
            }
        }
        set(at.tuples + flow_tuple_slot(t));
        set(at.tuples + flow_tuple_slot(&t.reversed()));
    }
    // FLOWS_PRESENT is a u32 read as "not 0": its first byte is enough.
    set(at.present);
    changed
}

/// The `.bss` map and its copy.
pub struct Gates {
    map: MapData,
    bss: Vec<u8>,
    at: Layout,
}

impl Gates {
    /// Takes `.bss` out of the loaded object and reads it.
    ///
    /// # Errors
    /// The map or a gate is missing, or reading it failed.
    pub fn take(ebpf: &mut Ebpf, object: &[u8]) -> Result<Self, String> {
        let at = layout(object)?;
        let Some(aya::maps::Map::Array(map)) = ebpf.take_map(".bss") else {
            return Err("the eBPF object has no .bss array map".into());
        };
        let size = map.info().map_err(|e| e.to_string())?.value_size() as usize;
        if at.tuples + (1 << tracer_common::FLOW_TUPLE_BITS) > size {
            return Err(format!(".bss is {size} bytes, smaller than its gates"));
        }
        let mut bss = vec![0; size];
        // SAFETY: `bss` is the map's value size.
        unsafe { sys::array_map_lookup(map.fd().as_fd(), 0, &mut bss) }
            .map_err(|e| format!("reading .bss: {e}"))?;
        Ok(Self { map, bss, at })
    }

    /// Opens the gates for `tuples` (both directions).
    ///
    /// # Errors
    /// The write failed.
    pub fn open(&mut self, tuples: &[Tuple]) -> io::Result<()> {
        if !set_gates(&mut self.bss, self.at, tuples) {
            return Ok(());
        }
        // SAFETY: `bss` is the map's value size.
        unsafe { sys::array_map_update(self.map.fd().as_fd(), 0, &self.bss) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        no_ebpf_object,
        ignore = "built with AYA_BUILD_SKIP=1: no kernel object"
    )]
    fn the_gates_are_found_in_the_object() {
        let object = crate::attach::object();
        assert!(!object.is_empty(), "built without the kernel object");
        let at = layout(object).unwrap();
        assert!(at.addrs != at.tuples && at.present != at.addrs);
    }

    #[test]
    fn gates_are_set_once_for_both_directions() {
        let at = Layout {
            present: 0,
            addrs: 8,
            tuples: 8 + tracer_common::FLOW_ADDR_SLOTS,
        };
        let mut bss = vec![0u8; at.tuples + (1 << tracer_common::FLOW_TUPLE_BITS)];
        let t = crate::journey::model::tuple(
            tracer_common::PROTO_TCP,
            "10.13.76.4:5000".parse().unwrap(),
            "203.0.113.80:80".parse().unwrap(),
        );
        assert!(set_gates(&mut bss, at, &[t]));
        assert_eq!(bss[0], 1);
        assert_eq!(bss[at.tuples + flow_tuple_slot(&t)], 1);
        assert_eq!(bss[at.tuples + flow_tuple_slot(&t.reversed())], 1);
        assert_eq!(
            bss[at.addrs + flow_addr_slot(u32::from_ne_bytes([10, 13, 76, 4]))],
            1
        );
        assert!(!set_gates(&mut bss, at, &[t.reversed()]), "nothing new");
    }
}
