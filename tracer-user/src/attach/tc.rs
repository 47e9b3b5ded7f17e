//! tc programs on interfaces: tcx links where the kernel has them (6.6+), clsact otherwise.
//!
//! pktrace attaches at the head of the tcx chain and returns "next", so the CNI's own programs
//! still run and see every packet. tcx links are file descriptors: they go away with the
//! process, also on SIGKILL. clsact filters do not (see the README's Safety notes).
//!
//! # Minimum kernel version
//! 5.8 (clsact + ring buffer); 6.6 for tcx.

use std::{collections::HashMap, ffi::CStr, path::Path};

use aya::{
    Ebpf,
    programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType, tc, tc::TcAttachOptions},
    util::KernelVersion,
};

use crate::journey::correlate::HostIf;

/// How the programs were attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcMode {
    Tcx,
    Clsact,
}

impl TcMode {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tcx => "tcx",
            Self::Clsact => "clsact",
        }
    }
}

/// Failures to attach the tc programs.
#[derive(Debug, thiserror::Error)]
pub enum TcAttachError {
    #[error("program {0} is missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error("the kernel rejected program {program}")]
    Load {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("attaching {program} to {iface} failed")]
    Attach {
        program: &'static str,
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("no interface matches {patterns}: check --interfaces (interfaces here: {present})")]
    NoInterface { patterns: String, present: String },
}

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
            out.push(Iface { index: (*p).if_index, name });
            p = p.add(1);
        }
        libc::if_freenameindex(head);
    }
    out.sort_by_key(|i| i.index);
    out
}

/// True for interfaces internal to the node (a bridge such as `azure0` or `cbr0`): packets
/// neither enter nor leave the node there.
#[must_use]
pub fn is_internal(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).join("bridge").exists()
}

/// What the correlator needs to know of the attached interfaces.
#[must_use]
pub fn host_ifs(ifaces: &[Iface]) -> HashMap<u32, HostIf> {
    ifaces
        .iter()
        .map(|i| (i.index, HostIf { name: i.name.clone(), edge: !is_internal(&i.name) }))
        .collect()
}

/// Loads both classifiers and attaches them at ingress and egress of every interface.
/// The links live as long as `ebpf`.
pub fn attach(ebpf: &mut Ebpf, ifaces: &[Iface]) -> Result<TcMode, TcAttachError> {
    let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
    let mode = if tcx { TcMode::Tcx } else { TcMode::Clsact };
    for (program, ty) in [("tc_ingress", TcAttachType::Ingress), ("tc_egress", TcAttachType::Egress)]
    {
        let prog: &mut SchedClassifier = ebpf
            .program_mut(program)
            .and_then(|p| p.try_into().ok())
            .ok_or(TcAttachError::MissingProgram(program))?;
        prog.load().map_err(|source| TcAttachError::Load { program, source })?;
        for iface in ifaces {
            attach_one(prog, &iface.name, ty, mode)
                .map_err(|source| TcAttachError::Attach { program, iface: iface.name.clone(), source })?;
        }
    }
    Ok(mode)
}

fn attach_one(
    prog: &mut SchedClassifier,
    iface: &str,
    ty: TcAttachType,
    mode: TcMode,
) -> Result<(), ProgramError> {
    match mode {
        TcMode::Tcx => {
            prog.attach_with_options(iface, ty, TcAttachOptions::TcxOrder(LinkOrder::first()))?;
        }
        TcMode::Clsact => {
            // An existing clsact qdisc (the CNI's) is used as it is, never replaced.
            if let Err(e) = tc::qdisc_add_clsact(iface) {
                let exists = matches!(&e, tc::TcError::IoError(io) if io.kind() == std::io::ErrorKind::AlreadyExists)
                    || format!("{e:?}").contains("AlreadyExists")
                    || format!("{e:?}").contains("File exists");
                if !exists {
                    return Err(e.into());
                }
            }
            prog.attach_with_options(iface, ty, TcAttachOptions::Netlink(tc::NlOptions::default()))?;
        }
    }
    Ok(())
}
