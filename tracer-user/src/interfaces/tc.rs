//! tc programs on interfaces: tcx links or clsact filters, per interface as [`super::policy`] decides
//! (tcx needs 6.6+).
//!
//! pktrace attaches at the head of the tcx chain and returns "next", so the CNI's own programs
//! still run and see every packet. tcx links are file descriptors: they go away with the
//! process, also on SIGKILL. clsact filters do not (see the README's Safety notes).
//!
//! # Minimum kernel version
//! 5.8 (clsact + ring buffer); 6.6 for tcx.

use std::collections::HashMap;

use aya::{
    Ebpf,
    programs::{
        LinkOrder, ProgramError, SchedClassifier, TcAttachType,
        tc::{self, SchedClassifierLinkId, TcAttachOptions},
    },
};

use super::{
    clsact,
    policy::Policy,
    roles::{self, HostIf, Role},
};
pub use super::{
    iface::{Iface, list_ifaces},
    policy::TcMode,
};

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

/// What the correlator needs to know of the attached interfaces: each one's role read from
/// rtnetlink in this namespace ([`roles`]). When netlink cannot be read, every interface
/// counts as an edge and the caller is told (journeys through a bridge would then be split).
pub fn host_ifs(ifaces: &[Iface]) -> (HashMap<u32, HostIf>, Option<std::io::Error>) {
    let (known, err) = match roles::all() {
        Ok(r) => (r, None),
        Err(e) => (HashMap::new(), Some(e)),
    };
    let out = ifaces
        .iter()
        .map(|i| {
            let role = known.get(&i.index).copied().unwrap_or(Role::Uplink);
            (i.index, host_if(&i.name, role))
        })
        .collect();
    (out, err)
}

/// What the correlator needs to know of one interface of this role.
#[must_use]
pub fn host_if(name: &str, role: Role) -> HostIf {
    HostIf {
        name: name.to_owned(),
        edge: role.is_edge(),
    }
}

/// The role of one interface of this namespace, as [`host_ifs`] reads it; an edge when it
/// is gone already, or when netlink fails (said on stderr).
#[must_use]
pub fn role_of(index: u32, name: &str) -> Role {
    match roles::of(index) {
        Ok(role) => role.unwrap_or(Role::Uplink),
        Err(e) => {
            crate::diag::line(format_args!(
                "warning: reading the kind of {} over rtnetlink failed ({e}): it counts \
                 as an edge, so a packet routed through it would show as two journeys",
                crate::util::safe(name)
            ));
            Role::Uplink
        }
    }
}

/// The programs' names and where each goes.
const PROGRAMS: [(&str, TcAttachType); 2] = [
    ("tc_ingress", TcAttachType::Ingress),
    ("tc_egress", TcAttachType::Egress),
];

/// What is attached where: one link per program per interface, by ifindex.
#[derive(Debug)]
pub struct TcAttachments {
    /// How each interface's mechanism is chosen.
    pub policy: Policy,
    links: HashMap<u32, Attached>,
    swept: usize,
}

#[derive(Debug)]
struct Attached {
    name: String,
    mode: TcMode,
    links: Vec<(&'static str, SchedClassifierLinkId)>,
}

impl TcAttachments {
    /// The name `index` had when it was attached (or last renamed).
    #[must_use]
    pub fn name(&self, index: u32) -> Option<&str> {
        self.links.get(&index).map(|a| a.name.as_str())
    }

    /// Every attached interface: (index, name).
    #[must_use]
    pub fn attached(&self) -> Vec<(u32, String)> {
        self.links
            .iter()
            .map(|(i, a)| (*i, a.name.clone()))
            .collect()
    }

    /// Records a rename of an attached interface.
    pub fn rename(&mut self, index: u32, name: &str) {
        if let Some(a) = self.links.get_mut(&index) {
            name.clone_into(&mut a.name);
        }
    }

    /// Attaches both programs to one more interface with `mode`, as at start (see [`attach`]);
    /// [`Policy::mode_for_new`] chooses the mode of an interface that appears later.
    pub fn attach(
        &mut self,
        ebpf: &mut Ebpf,
        iface: &Iface,
        mode: TcMode,
        created: &mut clsact::CreatedQdiscs,
    ) -> Result<(), TcAttachError> {
        if self.links.contains_key(&iface.index) {
            return Ok(());
        }
        // Also before a tcx attach: a dead pktrace may have put clsact filters here (it chose
        // clsact for a node with more pods then). No clsact qdisc is the common case: nothing
        // to sweep.
        for parent in [clsact::PARENT_INGRESS, clsact::PARENT_EGRESS] {
            self.swept += clsact::sweep(iface.index, parent).unwrap_or(0);
        }
        let mut links = Vec::with_capacity(PROGRAMS.len());
        for (program, ty) in PROGRAMS {
            let prog = classifier(ebpf, program)?;
            match attach_one(prog, iface, ty, mode, created) {
                Ok(id) => links.push((program, id)),
                Err(source) => {
                    // Not half attached: take back what this interface already got.
                    for (program, id) in links {
                        if let Ok(prog) = classifier(ebpf, program) {
                            let _ = prog.detach(id);
                        }
                    }
                    return Err(TcAttachError::Attach {
                        program,
                        iface: crate::util::safe(&iface.name),
                        source,
                    });
                }
            }
        }
        self.links.insert(
            iface.index,
            Attached {
                name: iface.name.clone(),
                mode,
                links,
            },
        );
        Ok(())
    }

    /// Detaches from an interface that still exists (renamed so that no pattern matches any
    /// more). Returns its recorded name.
    pub fn detach(&mut self, ebpf: &mut Ebpf, index: u32) -> Option<String> {
        let attached = self.links.remove(&index)?;
        for (program, id) in attached.links {
            if let Ok(prog) = classifier(ebpf, program) {
                let _ = prog.detach(id);
            }
        }
        Some(attached.name)
    }

    /// Forgets an interface that is gone: the kernel removed its tcx links and clsact filters
    /// with the device, so nothing is deleted (a tcx link's fd is closed; a clsact filter's
    /// record is dropped without a netlink request that could only fail). Returns its name.
    pub fn forget(
        &mut self,
        ebpf: &mut Ebpf,
        index: u32,
        created: &mut clsact::CreatedQdiscs,
    ) -> Option<String> {
        let attached = self.links.remove(&index)?;
        created.forget(index);
        for (program, id) in attached.links {
            let Ok(prog) = classifier(ebpf, program) else {
                continue;
            };
            if let Ok(link) = prog.take_link(id) {
                match attached.mode {
                    TcMode::Tcx => drop(link),
                    // Plain data (ifindex, priority, handle): forgetting it leaks nothing.
                    TcMode::Clsact => std::mem::forget(link),
                }
            }
        }
        Some(attached.name)
    }

    /// Filters of dead pktraces removed while attaching.
    #[must_use]
    pub const fn swept(&self) -> usize {
        self.swept
    }
}

fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    program: &'static str,
) -> Result<&'a mut SchedClassifier, TcAttachError> {
    ebpf.program_mut(program)
        .and_then(|p| p.try_into().ok())
        .ok_or(TcAttachError::MissingProgram(program))
}

/// Loads both classifiers, side by side ([`crate::attach::side_by_side`]).
fn load_classifiers(ebpf: &mut Ebpf) -> Result<(), TcAttachError> {
    let mut found: Vec<(&'static str, &mut SchedClassifier)> = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        if let Some(&(wanted, _)) = PROGRAMS.iter().find(|(p, _)| *p == name)
            && let Ok(c) = <&mut SchedClassifier>::try_from(program)
        {
            found.push((wanted, c));
        }
    }
    if let Some(&(missing, _)) = PROGRAMS
        .iter()
        .find(|(p, _)| !found.iter().any(|(f, _)| f == p))
    {
        return Err(TcAttachError::MissingProgram(missing));
    }
    crate::attach::side_by_side(found, |(program, c)| {
        c.load()
            .map_err(|source| TcAttachError::Load { program, source })
    })
    .into_iter()
    .collect()
}

/// Loads both classifiers and attaches them at ingress and egress of every interface with the
/// mechanism `policy` plans for it ([`Policy::plan`]; `patterns` are `--interfaces`), one
/// interface at a time ([`TcAttachments::attach`], the path interfaces that appear later take
/// too). The links live as long as `ebpf`. clsact filters left by pktraces that died without
/// detaching are removed first ([`TcAttachments::swept`] says how many). Returns the
/// attachments and the mechanism of each interface, in the order of `ifaces`.
pub fn attach(
    ebpf: &mut Ebpf,
    ifaces: &[Iface],
    patterns: &[String],
    policy: Policy,
    created: &mut clsact::CreatedQdiscs,
) -> Result<(TcAttachments, Vec<TcMode>), TcAttachError> {
    load_classifiers(ebpf)?;
    let modes = policy.plan(ifaces, patterns);
    let mut out = TcAttachments {
        policy,
        links: HashMap::new(),
        swept: 0,
    };
    for (iface, &mode) in ifaces.iter().zip(&modes) {
        out.attach(ebpf, iface, mode, created)?;
    }
    // The qdiscs a dead pktrace recorded as its own go when we exit, if empty by then (its
    // filters were swept above).
    created.adopt_orphans();
    Ok((out, modes))
}

fn attach_one(
    prog: &mut SchedClassifier,
    iface: &Iface,
    ty: TcAttachType,
    mode: TcMode,
    created: &mut clsact::CreatedQdiscs,
) -> Result<SchedClassifierLinkId, ProgramError> {
    let (index, iface) = (iface.index, iface.name.as_str());
    match mode {
        TcMode::Tcx => {
            prog.attach_with_options(iface, ty, TcAttachOptions::TcxOrder(LinkOrder::first()))
        }
        TcMode::Clsact => {
            // An existing clsact qdisc (the CNI's, or ours from the other direction) is used as
            // it is, never replaced or recorded. Ours is recorded before it is created, so no
            // SIGKILL can leave it unrecorded.
            if !clsact::has_clsact(index).unwrap_or(false) {
                created.record(index);
                if let Err(e) = tc::qdisc_add_clsact(iface) {
                    // Someone created one between the check and ours: theirs, not ours.
                    created.forget(index);
                    let exists = match &e {
                        tc::TcError::IoError(io) => io.raw_os_error() == Some(libc::EEXIST),
                        tc::TcError::NetlinkError(nl) => nl.raw_os_error() == Some(libc::EEXIST),
                        _ => false,
                    };
                    if !exists {
                        return Err(e.into());
                    }
                }
            }
            // The handle carries our PID, so a later pktrace can tell our filters from a live
            // one's if we die without detaching (see `clsact`).
            let options = tc::NlOptions {
                handle: clsact::handle_for(std::process::id()),
                ..tc::NlOptions::default()
            };
            prog.attach_with_options(iface, ty, TcAttachOptions::Netlink(options))
        }
    }
}
