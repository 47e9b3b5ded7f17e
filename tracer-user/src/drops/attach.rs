//! Attaching the drop programs (tracer-ebpf/src/drops.rs) to `skb:kfree_skb`, the best way
//! this kernel allows: `tp_btf` (a tracing program on `btf_trace_kfree_skb`, loaded here like
//! the fentry programs, see [`crate::nat::probe`]), else a raw tracepoint through aya, with the
//! drop reason when the kernel's BTF has `enum skb_drop_reason` (5.17+) and without it before.
//! Drops are an addition to a trace: when nothing attaches, the session goes on without them
//! and says why.

use std::{
    io,
    os::fd::{AsFd as _, OwnedFd},
};

use aya::{
    Ebpf,
    programs::{ProgramError, ProgramType, RawTracePoint, raw_trace_point::RawTracePointLink},
    sys::{BpfHelper, is_helper_supported},
};
use aya_obj::generated::{bpf_attach_type, bpf_prog_type};
use thiserror::Error;

use crate::{
    attach::{object, verifier_reason},
    kernel::{
        btf::{BtfError, KernelBtf},
        loader::{LoadAs, PrepareError, PreparedObject},
        sys,
    },
};

/// The tracepoint.
pub const TRACEPOINT: &str = "kfree_skb";
/// Program names in the object.
pub const BTF_PROGRAM: &str = "drop_btf";
pub const RAW_PROGRAM: &str = "drop_raw";
pub const RAW_OLD_PROGRAM: &str = "drop_raw_old";

/// Why one way of attaching the drop program failed. `Display` is one line for users.
#[derive(Debug, Error)]
pub enum DropError {
    #[error("reading the kernel's BTF failed")]
    Btf(#[source] BtfError),
    #[error("btf_trace_{TRACEPOINT} is not in the kernel's BTF (no such tracepoint?)")]
    NotInBtf,
    #[error("preparing the eBPF object failed")]
    Object(#[source] PrepareError),
    #[error("program {0} is missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error("the kernel refused {program} ({errno}): {reason}")]
    Refused {
        program: &'static str,
        errno: io::Error,
        reason: String,
    },
    #[error("attaching {program} to {TRACEPOINT} failed ({errno})")]
    Attach {
        program: &'static str,
        errno: io::Error,
    },
    #[error("{program}: {source}")]
    Aya {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
}

impl DropError {
    /// The error and each of its sources, `: `-separated, on one line.
    #[must_use]
    pub fn line(&self) -> String {
        let mut text = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(inner) = src {
            text.push_str(": ");
            text.push_str(&inner.to_string());
            src = inner.source();
        }
        text
    }
}

/// How the drop programs are attached.
#[derive(Debug)]
enum Link {
    /// `tp_btf`: the link from `BPF_RAW_TRACEPOINT_OPEN` and the program it holds.
    Btf { _link: OwnedFd, _prog: OwnedFd },
    /// A raw tracepoint (aya's link; the program stays in the `Ebpf`), and whether it reads
    /// the reason.
    Raw {
        _link: RawTracePointLink,
        reason: bool,
    },
}

/// The attached drop program; dropping it detaches it.
#[derive(Debug)]
pub struct DropAttachment {
    link: Link,
}

impl DropAttachment {
    /// One line saying what is attached.
    #[must_use]
    pub const fn describe(&self) -> &'static str {
        match self.link {
            Link::Btf { .. } => "drops: tp_btf on skb:kfree_skb (reason and location)",
            Link::Raw { reason: true, .. } => {
                "drops: raw tracepoint skb:kfree_skb (reason and location)"
            }
            Link::Raw { reason: false, .. } => {
                "drops: raw tracepoint skb:kfree_skb (location only: this kernel gives no \
                 drop reason, said NOT_SPECIFIED)"
            }
        }
    }
}

/// Attaches a drop program: `tp_btf` when the kernel accepts it, else a raw tracepoint
/// (`has_reason`: the kernel's BTF has `enum skb_drop_reason`, so its tracepoint passes one).
/// `Err` holds each way tried and why it failed.
pub fn attach(
    ebpf: &mut Ebpf,
    globals: &[(&str, &[u8])],
    kernel_btf: &KernelBtf,
    has_reason: bool,
) -> Result<DropAttachment, Vec<(&'static str, DropError)>> {
    let mut why = Vec::new();
    if has_reason {
        match attach_btf(ebpf, globals, kernel_btf) {
            Ok(link) => return Ok(DropAttachment { link }),
            Err(e) => why.push(("tp_btf", e)),
        }
    }
    let program = if has_reason {
        RAW_PROGRAM
    } else {
        RAW_OLD_PROGRAM
    };
    match attach_raw(ebpf, program) {
        Ok(link) => Ok(DropAttachment {
            link: Link::Raw {
                _link: link,
                reason: has_reason,
            },
        }),
        Err(e) => {
            why.push(("raw tracepoint", e));
            Err(why)
        }
    }
}

/// Whether the drop programs can name their sites themselves: the kernel lets a raw
/// tracepoint program call `bpf_snprintf` (5.13+, and `CAP_PERFMON`; a `tp_btf` program gets
/// the same helpers). Asked by loading a two-instruction probe program, as libbpf does; a
/// failed probe says no, and user space names every site from `/proc/kallsyms`.
#[must_use]
pub fn kernel_names_sites() -> bool {
    is_helper_supported(ProgramType::RawTracePoint, BpfHelper::BPF_FUNC_snprintf).unwrap_or(false)
}

fn attach_btf(
    ebpf: &Ebpf,
    globals: &[(&str, &[u8])],
    kernel_btf: &KernelBtf,
) -> Result<Link, DropError> {
    let btf = kernel_btf.get().map_err(DropError::Btf)?;
    let id = btf
        .typedef_id(&format!("btf_trace_{TRACEPOINT}"))
        .map_err(DropError::Btf)?
        .ok_or(DropError::NotInBtf)?;
    let prepared = PreparedObject::new(object(), globals, ebpf).map_err(DropError::Object)?;
    let how = LoadAs {
        prog_type: bpf_prog_type::BPF_PROG_TYPE_TRACING,
        expected_attach_type: bpf_attach_type::BPF_TRACE_RAW_TP,
        attach_btf_id: id,
        attach_btf_obj_fd: None,
    };
    let prog = prepared
        .load(BTF_PROGRAM, how)
        .map_err(|f| DropError::Refused {
            program: BTF_PROGRAM,
            reason: verifier_reason(&f.log).to_owned(),
            errno: f.errno,
        })?
        .ok_or(DropError::MissingProgram(BTF_PROGRAM))?;
    let link = sys::raw_tracepoint_open(prog.as_fd()).map_err(|errno| DropError::Attach {
        program: BTF_PROGRAM,
        errno,
    })?;
    Ok(Link::Btf {
        _link: link,
        _prog: prog,
    })
}

fn attach_raw(ebpf: &mut Ebpf, program: &'static str) -> Result<RawTracePointLink, DropError> {
    let aya = |source| DropError::Aya { program, source };
    let prog: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or(DropError::MissingProgram(program))?
        .try_into()
        .map_err(aya)?;
    // The verifier's log is many lines; the warning is one: its last meaningful line.
    prog.load().map_err(|e| match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => DropError::Refused {
            program,
            reason: verifier_reason(&verifier_log.to_string()).to_owned(),
            errno: io_error,
        },
        source => aya(source),
    })?;
    let id = prog.attach(TRACEPOINT).map_err(aya)?;
    prog.take_link(id).map_err(aya)
}

#[cfg(test)]
mod tests;
