//! The interfaces of this network namespace, as `if_nameindex(3)` lists them.

use std::ffi::CStr;

/// An interface of this network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub index: u32,
    pub name: String,
}

/// The interfaces of the current network namespace.
#[must_use]
pub fn list_ifaces() -> Vec<Iface> {
    let mut out = Vec::new();
    // SAFETY: if_nameindex returns a array terminated by a zero entry, freed below.
    unsafe {
        let head = libc::if_nameindex();
        if head.is_null() {
            return out;
        }
        let mut p = head;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            let name = CStr::from_ptr((*p).if_name).to_string_lossy().into_owned();
            out.push(Iface {
                index: (*p).if_index,
                name,
            });
            p = p.add(1);
        }
        libc::if_freenameindex(head);
    }
    out.sort_by_key(|i| i.index);
    out
}
