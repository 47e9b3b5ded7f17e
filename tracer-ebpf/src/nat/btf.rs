//! Typed loads through BTF pointers, for the netfilter programs only.
//!
//! Contract: a placeholder ([`nf_patch`]) stands for each member offset and struct type id;
//! the netfilter loader in user space patches each into the real one from the running
//! kernel's BTF before verification, and refuses the program if it cannot. The verifier checks
//! every load against that BTF and the JIT makes it one that cannot fault (`BPF_PROBE_MEM`).
//! No helper call. The `nat_*` probes' loaders patch nothing: they must not use these.
//!
//! # Minimum kernel version
//! 6.2 (`bpf_rdonly_cast`); the netfilter programs need 6.4 anyway.

use tracer_common::nf_patch;

/// A plain load of the member at placeholder offset `ph` ([`nf_patch`]) of the kernel
/// structure at `base`. `base` must be a BTF pointer the verifier knows (the context, `skb`,
/// `skb->dev`, or a [`rdonly_cast`] result).
#[inline(always)]
pub fn load<T>(base: u64, ph: i16) -> T {
    // SAFETY: see above; the loader refuses a program whose placeholder it cannot patch.
    unsafe {
        core::ptr::read_volatile((base as *const u8).wrapping_offset(ph as isize).cast::<T>())
    }
}

/// `bpf_rdonly_cast(const void *obj, u32 btf_id)` (kernel/bpf/helpers.c, v6.2): the verifier
/// inlines it as a register move and types the result as an untrusted pointer to the struct
/// `btf_id` names, which the program may load from (`BPF_PROBE_MEM`).
type RdonlyCast = unsafe extern "C" fn(u64, u32) -> u64;

/// `addr` as a read-only pointer to the vmlinux struct of type placeholder `ty`
/// ([`nf_patch`]): the loader turns the placeholder helper call into the kfunc call and the
/// placeholder into the struct's BTF id.
#[inline(always)]
pub fn rdonly_cast(addr: u64, ty: i32) -> u64 {
    // SAFETY: the loader rewrites this call of a placeholder helper id into a kfunc call that
    // only re-types its argument (and refuses the program if it cannot).
    unsafe {
        let f = core::mem::transmute::<usize, RdonlyCast>(nf_patch::RDONLY_CAST as usize);
        f(addr, ty as u32)
    }
}
