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

use super::clsact;
use crate::journey::correlate::HostIf;

/// Set to `1` to use clsact filters even where tcx links exist (tests of the clsact path on
/// new kernels).
pub const FORCE_CLSACT_ENV: &str = "PKTRACE_FORCE_CLSACT";

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
/// The links live as long as `ebpf`. In clsact mode, filters left by pktraces that died
/// without detaching are removed first; returns how many.
pub fn attach(
    ebpf: &mut Ebpf,
    ifaces: &[Iface],
    created: &mut clsact::CreatedQdiscs,
) -> Result<(TcMode, usize), TcAttachError> {
    let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
    let forced = std::env::var_os(FORCE_CLSACT_ENV).is_some_and(|v| v == "1");
    let mode = if tcx && !forced { TcMode::Tcx } else { TcMode::Clsact };
    let mut swept = 0;
    if mode == TcMode::Clsact {
        for iface in ifaces {
            for parent in [clsact::PARENT_INGRESS, clsact::PARENT_EGRESS] {
                // No clsact qdisc yet is the common case: nothing to sweep.
                swept += clsact::sweep(iface.index, parent).unwrap_or(0);
            }
        }
        // The qdiscs a dead pktrace recorded as its own go when we exit, if empty by then.
        created.adopt_orphans();
    }
    for (program, ty) in [("tc_ingress", TcAttachType::Ingress), ("tc_egress", TcAttachType::Egress)]
    {
        let prog: &mut SchedClassifier = ebpf
            .program_mut(program)
            .and_then(|p| p.try_into().ok())
            .ok_or(TcAttachError::MissingProgram(program))?;
        prog.load().map_err(|source| TcAttachError::Load { program, source })?;
        for iface in ifaces {
            attach_one(prog, iface, ty, mode, created)
                .map_err(|source| TcAttachError::Attach { program, iface: crate::output::safe(&iface.name), source })?;
        }
    }
    Ok((mode, swept))
}

fn attach_one(
    prog: &mut SchedClassifier,
    iface: &Iface,
    ty: TcAttachType,
    mode: TcMode,
    created: &mut clsact::CreatedQdiscs,
) -> Result<(), ProgramError> {
    let (index, iface) = (iface.index, iface.name.as_str());
    match mode {
        TcMode::Tcx => {
            prog.attach_with_options(iface, ty, TcAttachOptions::TcxOrder(LinkOrder::first()))?;
        }
        TcMode::Clsact => {
            // An existing clsact qdisc (the CNI's) is used as it is, never replaced.
            match tc::qdisc_add_clsact(iface) {
                Ok(()) => created.record(index),
                Err(e) => {
                let exists = matches!(&e, tc::TcError::IoError(io) if io.kind() == std::io::ErrorKind::AlreadyExists)
                    || format!("{e:?}").contains("AlreadyExists")
                    || format!("{e:?}").contains("File exists");
                    if !exists {
                        return Err(e.into());
                    }
                }
            }
            // The handle carries our PID, so a later pktrace can tell our filters from a live
            // one's if we die without detaching (see `clsact`).
            let options = tc::NlOptions { handle: clsact::handle_for(std::process::id()), ..tc::NlOptions::default() };
            prog.attach_with_options(iface, ty, TcAttachOptions::Netlink(options))?;
        }
    }
    Ok(())
}
