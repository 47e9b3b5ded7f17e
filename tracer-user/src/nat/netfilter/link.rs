//! A loaded BPF netfilter program and the link that hooks it into netfilter in one network
//! namespace (`BPF_LINK_CREATE`); both are file descriptors, closed on drop.

#[cfg(test)]
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

#[cfg(test)]
use aya_obj::generated::{bpf_attach_type, bpf_insn, bpf_prog_type};

use super::error::{AttachError, link_hint};
#[cfg(test)]
use super::{
    NF_INET_LOCAL_OUT, NFPROTO_IPV4,
    error::refused,
    rewrite::{MOV64_IMM, insn},
};
use crate::kernel::sys;
#[cfg(test)]
use crate::kernel::{
    loader::{LoadFailure, load_with_log},
    sys::ProgLoad,
};

/// A loaded BPF netfilter program (`BPF_PROG_TYPE_NETFILTER`); attach it with
/// [`NetfilterProgram::attach`]. Dropping it unloads it once no link uses it.
///
/// # Minimum kernel version
/// 6.4 with `CONFIG_NETFILTER_BPF_LINK` (`net/netfilter/nf_bpf_link.c`, v6.4).
#[derive(Debug)]
pub struct NetfilterProgram {
    pub(super) fd: OwnedFd,
    pub(super) name: String,
}

/// A program hooked into netfilter in one network namespace; dropping it unhooks it.
#[derive(Debug)]
pub struct NetfilterLink {
    fd: OwnedFd,
    #[cfg(test)]
    program: String,
    #[cfg(test)]
    hook: u32,
    #[cfg(test)]
    priority: i32,
}

#[cfg(test)]
impl NetfilterLink {
    /// The attached program's name.
    #[must_use]
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The netfilter hook number (`NF_INET_*`).
    #[must_use]
    pub const fn hook(&self) -> u32 {
        self.hook
    }

    /// The priority within the hook.
    #[must_use]
    pub const fn priority(&self) -> i32 {
        self.priority
    }
}

impl AsFd for NetfilterLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for NetfilterProgram {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl NetfilterProgram {
    /// Loads raw instructions as a netfilter program (the object path is
    /// [`super::load_netfilter_programs`]); `name` is truncated to 15 bytes in the kernel.
    #[cfg(test)]
    pub fn load(name: &str, insns: &[bpf_insn], license: &CStr) -> Result<Self, AttachError> {
        Self::load_request(&ProgLoad {
            prog_type: bpf_prog_type::BPF_PROG_TYPE_NETFILTER,
            expected_attach_type: bpf_attach_type::BPF_NETFILTER,
            name,
            insns,
            license,
            btf: None,
            attach_btf_id: 0,
            attach_btf_obj_fd: None,
        })
    }

    /// Loads without a verifier log (fast); on failure loads again with one to explain why.
    #[cfg(test)]
    fn load_request(req: &ProgLoad<'_>) -> Result<Self, AttachError> {
        let name = req.name.to_owned();
        match load_with_log(req) {
            Ok(fd) => Ok(Self { fd, name }),
            Err(LoadFailure { errno, log }) => Err(refused(name, errno, log)),
        }
    }

    /// The program's name (its function name in the object).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hooks the program into netfilter in the calling thread's network namespace: family `pf`
    /// ([`super::NFPROTO_IPV4`] or `NFPROTO_IPV6`), hook `hook` (`NF_INET_*`, see
    /// [`tracer_common::hook`]) at `priority` (lower runs first; the nat table sits at -100 in
    /// `PRE_ROUTING/LOCAL_OUT` and 100 in `POST_ROUTING/LOCAL_IN`).
    ///
    /// # Minimum kernel version
    /// 6.4 (`BPF_LINK_TYPE_NETFILTER`, `net/netfilter/nf_bpf_link.c`, v6.4).
    pub fn attach(&self, pf: u32, hook: u32, priority: i32) -> Result<NetfilterLink, AttachError> {
        if priority == i32::MIN || priority == i32::MAX {
            return Err(AttachError::ReservedPriority { priority });
        }
        let fd = sys::link_create_netfilter(self.fd.as_fd(), pf, hook, priority, 0).map_err(
            |source| AttachError::Link {
                program: self.name.clone(),
                pf,
                hook,
                priority,
                hint: link_hint(&source),
                source,
            },
        )?;
        Ok(NetfilterLink {
            fd,
            #[cfg(test)]
            program: self.name.clone(),
            #[cfg(test)]
            hook,
            #[cfg(test)]
            priority,
        })
    }
}

/// Checks that this kernel loads netfilter programs and links them, without hooking anything:
/// it loads `r0 = NF_ACCEPT; exit` and asks for a link at the reserved priority
/// `NF_IP_PRI_FIRST`, which a kernel with netfilter links refuses with `ERANGE` after checking
/// everything else (`bpf_nf_check_pf_and_hooks`, `net/netfilter/nf_bpf_link.c`, v6.4). So it is
/// safe in any namespace, including the host's. The error says why links are unavailable.
///
/// # Minimum kernel version
/// 6.4 with `CONFIG_NETFILTER_BPF_LINK`.
#[cfg(test)]
pub fn probe_netfilter_links() -> Result<(), AttachError> {
    const EXIT: u8 = 0x95;
    let prog = NetfilterProgram::load(
        "pktrace_probe",
        &[insn(MOV64_IMM, 0, 0, 0, 1), insn(EXIT, 0, 0, 0, 0)],
        c"GPL",
    )?;
    let (pf, hook, priority) = (NFPROTO_IPV4, NF_INET_LOCAL_OUT, i32::MIN);
    match sys::link_create_netfilter(prog.fd.as_fd(), pf, hook, priority, 0) {
        // Success would mean a kernel that allows the reserved priority; the link closes here.
        Ok(_link) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ERANGE) => Ok(()),
        Err(source) => Err(AttachError::Link {
            program: prog.name,
            pf,
            hook,
            priority,
            hint: link_hint(&source),
            source,
        }),
    }
}
