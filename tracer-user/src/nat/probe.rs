//! The `nat_*` programs on `nf_nat_manip_pkt` (tracer-ebpf/src/nat/probe.rs): fentry/fexit, NAT
//! observation method 1 of DESIGN.md, and kprobe/kretprobe, method 2. Both time the rewrite
//! itself, not rule traversal.
//!
//! kprobes are aya's (`KProbe::load` + `attach`). fentry/fexit are loaded here: they need the
//! function's BTF id, which is in the **`nf_nat` module's** BTF when `nf_nat` is a module, and
//! aya 0.14 cannot do that (`FEntry::load(fn_name, &Btf)` looks the name up in one standalone
//! BTF, aya-obj cannot parse split BTF, and it never sets `attach_btf_obj_fd`). So the object is
//! prepared like the netfilter programs ([`PreparedObject`]) and each program is loaded with
//! `BPF_PROG_TYPE_TRACING`, `attach_btf_id` = the function's id in the module's split BTF
//! (read by [`crate::kernel::btf`]) and `attach_btf_obj_fd` = that module's BTF object (found with
//! `BPF_BTF_GET_NEXT_ID`), then attached with `BPF_RAW_TRACEPOINT_OPEN`.
//!
//! Nothing is left behind by a failed attempt: a program that loaded but did not attach is
//! unloaded before the error returns, and links are file descriptors (closed on drop, exit or
//! SIGKILL).
//!
//! # Minimum kernel version
//! fentry/fexit: 5.5 with BTF, 5.11 when `nf_nat` is a module (module BTF); kprobes: any kernel
//! with `CONFIG_KPROBES` and a kprobe PMU (4.17), 5.8 for the ring buffer.

use std::{
    fs,
    io::{self, BufRead as _},
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
};

use aya::{
    Ebpf,
    programs::{KProbe, ProgramError, kprobe::KProbeLink},
};
use aya_obj::generated::{bpf_attach_type, bpf_prog_type};
use thiserror::Error;

use crate::{
    attach::{object, verifier_reason},
    kernel::{
        btf::{Btf, BtfError, KernelBtf},
        loader::{LoadAs, LoadFailure, PrepareError, PreparedObject},
        sys,
    },
};

/// The kernel function the programs attach to (`net/netfilter/nf_nat_proto.c`, v5.4–v6.x).
pub const FUNCTION: &str = "nf_nat_manip_pkt";
/// The module `FUNCTION` lives in when NAT is not built into the kernel.
pub const MODULE: &str = "nf_nat";
/// Present when the kernel can create kprobes through `perf_event_open` (4.17+).
pub const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";
/// Program names in the object (the kernel keeps 15 bytes of them: all start with `nat_`).
pub const KPROBE_ENTER: &str = "nat_kprobe_enter";
pub const KRETPROBE_EXIT: &str = "nat_kretprobe_exit";
pub const FENTRY_ENTER: &str = "nat_fentry_enter";
pub const FEXIT_EXIT: &str = "nat_fexit_exit";

/// `ENOTSUPP` (include/linux/errno.h): kernel-internal, but bpf(2) returns it.
const ENOTSUPP: i32 = 524;

/// The two ways of hooking `nf_nat_manip_pkt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    Fentry,
    Kprobe,
}

impl ProbeKind {
    /// The `--nat-hook` name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
        }
    }
}

/// Why the `nat_*` programs could not be loaded or attached. `Display` is one line for users;
/// a verifier rejection keeps the kernel's log ([`ProbeError::verifier_log`]).
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("kprobes cannot attach: this kernel has no kprobe PMU / CONFIG_KPROBES off")]
    NoKprobePmu,
    #[error(
        "{FUNCTION} is not in /proc/kallsyms: the {MODULE} module is not loaded (no NAT rules \
         yet?) or this kernel inlined the function"
    )]
    NoSymbol,
    #[error("reading the kernel's BTF for {FUNCTION} failed")]
    Btf(#[source] BtfError),
    #[error(
        "{FUNCTION} is not in the kernel's BTF (vmlinux or the {MODULE} module): {MODULE} is not \
         loaded (no NAT rules yet?) or this kernel inlined the function"
    )]
    NotInBtf,
    #[error(
        "no kernel BTF object named {MODULE} (BPF_BTF_GET_NEXT_ID): fentry on a module's \
         function needs Linux 5.11+"
    )]
    NoModuleBtfObject,
    #[error("{what} failed")]
    Syscall {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("program {0} is missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error("preparing the eBPF object for the fentry programs failed")]
    Object(#[source] PrepareError),
    #[error(
        "the kernel refused to load {} programs: {} — {}",
        kind.as_str(),
        errno_name(errno),
        load_hint(*kind, errno)
    )]
    Refused {
        kind: ProbeKind,
        program: &'static str,
        errno: io::Error,
    },
    #[error(
        "the verifier rejected {program} ({}): {}",
        errno_name(errno),
        verifier_reason(log)
    )]
    Verifier {
        program: &'static str,
        errno: io::Error,
        log: String,
    },
    #[error(
        "attaching {program} to {FUNCTION} failed: {} — {}",
        errno_name(errno),
        attach_hint(*kind, errno)
    )]
    Attach {
        kind: ProbeKind,
        program: &'static str,
        errno: io::Error,
    },
    #[error("attaching {program} to {FUNCTION} failed")]
    Aya {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
}

impl ProbeError {
    /// The verifier's log, when the verifier rejected a program.
    #[must_use]
    pub fn verifier_log(&self) -> Option<&str> {
        match self {
            Self::Verifier { log, .. } => Some(log),
            _ => None,
        }
    }
}

/// The symbolic name of an errno (`EPERM`), or the error's text.
fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ESRCH) => "ESRCH",
        Some(libc::EBUSY) => "EBUSY",
        Some(libc::E2BIG) => "E2BIG",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(ENOTSUPP) => "ENOTSUPP",
        _ => return e.to_string(),
    };
    name.to_owned()
}

/// What a load refused without a verifier log usually means.
fn load_hint(kind: ProbeKind, e: &io::Error) -> &'static str {
    match (e.raw_os_error(), kind) {
        (Some(libc::EPERM | libc::EACCES), _) => "kernel lockdown or missing CAP_BPF/CAP_PERFMON",
        (Some(libc::EINVAL), ProbeKind::Fentry) => {
            "no BPF trampolines here (fentry needs Linux 5.5+ with BTF and a BPF JIT)"
        }
        (Some(ENOTSUPP | libc::EOPNOTSUPP), ProbeKind::Fentry) => {
            "this kernel or architecture has no BPF trampolines"
        }
        (Some(libc::EINVAL | ENOTSUPP | libc::EOPNOTSUPP), ProbeKind::Kprobe) => {
            "this kernel cannot load kprobe programs"
        }
        _ => "unexpected; see the error number",
    }
}

/// What an attach failure usually means.
fn attach_hint(kind: ProbeKind, e: &io::Error) -> &'static str {
    match (e.raw_os_error(), kind) {
        (Some(libc::EPERM | libc::EACCES), _) => "kernel lockdown or missing CAP_BPF/CAP_PERFMON",
        (Some(ENOTSUPP | libc::EOPNOTSUPP), ProbeKind::Fentry) => {
            "this kernel cannot attach BPF trampolines \
             (needs CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
        }
        (Some(libc::EBUSY), _) => "too many programs on this function already",
        (Some(libc::ENOENT | libc::EINVAL), _) => {
            "the function cannot be traced (nf_nat unloaded, notrace or blacklisted)"
        }
        _ => "unexpected; see the error number",
    }
}

/// A load failure as a [`ProbeError`].
fn refused(kind: ProbeKind, program: &'static str, f: LoadFailure) -> ProbeError {
    let LoadFailure { errno, log } = f;
    if log.is_empty() {
        ProbeError::Refused {
            kind,
            program,
            errno,
        }
    } else {
        ProbeError::Verifier {
            program,
            errno,
            log,
        }
    }
}

/// One attached program.
#[derive(Debug)]
enum ProbeLink {
    /// aya's kprobe link (a perf event or perf link); the program stays in the `Ebpf`.
    Kprobe { _link: KProbeLink },
    /// A tracing link from `BPF_RAW_TRACEPOINT_OPEN`, and the program it holds.
    Tracing { _link: OwnedFd, _prog: OwnedFd },
}

/// The `nat_*` pair attached to `nf_nat_manip_pkt`; dropping it detaches both.
#[derive(Debug)]
pub struct ProbeAttachment {
    kind: ProbeKind,
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "held for its Drop: the programs detach with it")
    )]
    links: Vec<ProbeLink>,
    /// Where the function's BTF came from (fentry): `vmlinux` or the module's name.
    btf_from: &'static str,
}

impl ProbeAttachment {
    /// How many programs are attached (2).
    #[cfg(test)]
    #[must_use]
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// One line saying what is attached and what it measures.
    #[must_use]
    pub fn describe(&self) -> String {
        match self.kind {
            ProbeKind::Fentry => format!(
                "fentry/fexit on {FUNCTION} (BTF id from {}); latency = the rewrite itself, not \
                 rule traversal",
                self.btf_from
            ),
            ProbeKind::Kprobe => format!(
                "kprobe/kretprobe on {FUNCTION}; latency = the rewrite itself (plus kprobe \
                 overhead), not rule traversal"
            ),
        }
    }
}

/// True when `/proc/kallsyms` lists `name` (in the kernel or a loaded module).
fn kallsyms_has(name: &str) -> bool {
    let Ok(file) = fs::File::open("/proc/kallsyms") else {
        // Unreadable: let the attach itself say what is wrong.
        return true;
    };
    io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.split_whitespace().nth(2) == Some(name))
}

/// Loads the kprobe pair through aya and attaches it to [`FUNCTION`]. On failure both programs
/// are unloaded again (and any link detached), so nothing is left in the kernel.
pub fn attach_kprobes(ebpf: &mut Ebpf) -> Result<ProbeAttachment, ProbeError> {
    if !Path::new(KPROBE_PMU).join("type").exists() {
        return Err(ProbeError::NoKprobePmu);
    }
    if !kallsyms_has(FUNCTION) {
        return Err(ProbeError::NoSymbol);
    }
    let mut links = Vec::new();
    for name in [KPROBE_ENTER, KRETPROBE_EXIT] {
        match kprobe_one(ebpf, name) {
            Ok(link) => links.push(ProbeLink::Kprobe { _link: link }),
            Err(e) => {
                drop(links);
                for name in [KPROBE_ENTER, KRETPROBE_EXIT] {
                    if let Some(prog) = kprobe_mut(ebpf, name) {
                        // Not loaded is fine: there is nothing to undo.
                        let _ = prog.unload();
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(ProbeAttachment {
        kind: ProbeKind::Kprobe,
        links,
        btf_from: "kallsyms",
    })
}

fn kprobe_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> Option<&'a mut KProbe> {
    ebpf.program_mut(name).and_then(|p| p.try_into().ok())
}

fn kprobe_one(ebpf: &mut Ebpf, program: &'static str) -> Result<KProbeLink, ProbeError> {
    let prog = kprobe_mut(ebpf, program).ok_or(ProbeError::MissingProgram(program))?;
    prog.load().map_err(|e| match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => refused(
            ProbeKind::Kprobe,
            program,
            LoadFailure {
                errno: io_error,
                log: verifier_log.to_string().trim_end().to_owned(),
            },
        ),
        source => ProbeError::Aya { program, source },
    })?;
    let id = prog.attach(FUNCTION, 0).map_err(|e| match e {
        ProgramError::SyscallError(s) => ProbeError::Attach {
            kind: ProbeKind::Kprobe,
            program,
            errno: s.io_error,
        },
        ProgramError::KProbeError(_) => ProbeError::NoKprobePmu,
        source => ProbeError::Aya { program, source },
    })?;
    prog.take_link(id)
        .map_err(|source| ProbeError::Aya { program, source })
}

/// Where [`FUNCTION`]'s BTF is: its type id and, for a module, the module's BTF object.
struct FunctionBtf {
    id: u32,
    module: Option<OwnedFd>,
}

/// Finds [`FUNCTION`] in the vmlinux BTF (`nf_nat` built in) or else in the `nf_nat` module's.
fn function_btf(kernel_btf: &KernelBtf) -> Result<FunctionBtf, ProbeError> {
    let base = kernel_btf.get().map_err(ProbeError::Btf)?;
    if let Some(id) = base.func_id(FUNCTION).map_err(ProbeError::Btf)? {
        return Ok(FunctionBtf { id, module: None });
    }
    let split = match Btf::from_sys_fs_module(base, MODULE) {
        Ok(b) => b,
        Err(BtfError::NoModuleBtf { .. }) => return Err(ProbeError::NotInBtf),
        Err(e) => return Err(ProbeError::Btf(e)),
    };
    let id = split
        .func_id(FUNCTION)
        .map_err(ProbeError::Btf)?
        .ok_or(ProbeError::NotInBtf)?;
    Ok(FunctionBtf {
        id,
        module: Some(module_btf_object(MODULE)?),
    })
}

/// The kernel's BTF object of module `name`: walks BTF ids and asks each for its name.
fn module_btf_object(name: &str) -> Result<OwnedFd, ProbeError> {
    let syscall = |what| move |source| ProbeError::Syscall { what, source };
    let mut id = 0;
    loop {
        id = match sys::btf_get_next_id(id) {
            Ok(next) => next,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(ProbeError::NoModuleBtfObject);
            }
            Err(e) => return Err(syscall("BPF_BTF_GET_NEXT_ID")(e)),
        };
        let fd = match sys::btf_get_fd_by_id(id) {
            Ok(fd) => fd,
            // Freed since it was listed.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(syscall("BPF_BTF_GET_FD_BY_ID")(e)),
        };
        let info = sys::btf_obj_info(fd.as_fd()).map_err(syscall("BPF_OBJ_GET_INFO_BY_FD"))?;
        if info.kernel && info.name == name {
            return Ok(fd);
        }
    }
}

/// Loads the fentry/fexit pair against [`FUNCTION`]'s BTF and attaches it. `globals` are the
/// object's globals as given to aya (see [`PreparedObject::new`]). Programs that loaded are
/// closed again when a later step fails.
pub fn attach_fentry(
    ebpf: &Ebpf,
    globals: &[(&str, &[u8])],
    kernel_btf: &KernelBtf,
) -> Result<ProbeAttachment, ProbeError> {
    let func = function_btf(kernel_btf)?;
    let prepared = PreparedObject::new(object(), globals, ebpf).map_err(ProbeError::Object)?;
    let mut links = Vec::new();
    for (program, attach_type) in [
        (FENTRY_ENTER, bpf_attach_type::BPF_TRACE_FENTRY),
        (FEXIT_EXIT, bpf_attach_type::BPF_TRACE_FEXIT),
    ] {
        let how = LoadAs {
            prog_type: bpf_prog_type::BPF_PROG_TYPE_TRACING,
            expected_attach_type: attach_type,
            attach_btf_id: func.id,
            attach_btf_obj_fd: func.module.as_ref().map(OwnedFd::as_fd),
        };
        let prog = prepared
            .load(program, how)
            .map_err(|f| refused(ProbeKind::Fentry, program, f))?
            .ok_or(ProbeError::MissingProgram(program))?;
        let link = sys::raw_tracepoint_open(prog.as_fd()).map_err(|errno| ProbeError::Attach {
            kind: ProbeKind::Fentry,
            program,
            errno,
        })?;
        links.push(ProbeLink::Tracing {
            _link: link,
            _prog: prog,
        });
    }
    let btf_from = if func.module.is_some() {
        MODULE
    } else {
        "vmlinux"
    };
    Ok(ProbeAttachment {
        kind: ProbeKind::Fentry,
        links,
        btf_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::Globals;

    #[test]
    fn reasons_are_one_line_and_name_the_cause() {
        let eperm = || io::Error::from_raw_os_error(libc::EPERM);
        let fentry = ProbeError::Refused {
            kind: ProbeKind::Fentry,
            program: FENTRY_ENTER,
            errno: eperm(),
        };
        assert_eq!(
            fentry.to_string(),
            "the kernel refused to load fentry programs: EPERM — kernel lockdown or missing \
             CAP_BPF/CAP_PERFMON"
        );
        assert_eq!(
            ProbeError::NoKprobePmu.to_string(),
            "kprobes cannot attach: this kernel has no kprobe PMU / CONFIG_KPROBES off"
        );
        let log = "0: (79) r1 = *(u64 *)(r1 +0)\ninvalid bpf_context access off=0 size=8\n\n\
                   processed 1 insns\n";
        let verifier = ProbeError::Verifier {
            program: FEXIT_EXIT,
            errno: io::Error::from_raw_os_error(libc::EACCES),
            log: log.into(),
        };
        assert_eq!(
            verifier.to_string(),
            "the verifier rejected nat_fexit_exit (EACCES): invalid bpf_context access off=0 size=8"
        );
        assert_eq!(verifier.verifier_log(), Some(log));
        let attach = ProbeError::Attach {
            kind: ProbeKind::Fentry,
            program: FEXIT_EXIT,
            errno: io::Error::from_raw_os_error(ENOTSUPP),
        };
        assert!(
            attach
                .to_string()
                .contains("ENOTSUPP — this kernel cannot attach BPF trampolines"),
            "{attach}"
        );
        for e in [
            fentry,
            verifier,
            attach,
            ProbeError::NoSymbol,
            ProbeError::NotInBtf,
            ProbeError::NoModuleBtfObject,
        ] {
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
        }
        assert_eq!(
            errno_name(&io::Error::from_raw_os_error(9999)),
            io::Error::from_raw_os_error(9999).to_string()
        );
    }

    /// The kernel object loaded as pktrace loads it, and its globals (root tier: panics
    /// where that cannot be done).
    fn loaded() -> (Ebpf, Globals) {
        crate::test_support::require_root();
        assert!(
            !object().is_empty(),
            "built with AYA_BUILD_SKIP=1: no kernel object"
        );
        let btf = Btf::from_sys_fs().expect("the running kernel's BTF");
        let offsets = crate::kernel::btf::kernel_offsets(&btf).expect("kernel offsets");
        let globals = Globals::new(true, offsets);
        let ebpf = crate::attach::load(&globals, &crate::config::Knobs::default())
            .expect("loading the object");
        (ebpf, globals)
    }

    /// libbpf's probe for tracing programs: fentry on BTF type 1, never a function. A kernel
    /// that verifies tracing programs says `EINVAL`; one that refuses them before the verifier
    /// says `EPERM`/`EACCES`.
    fn tracing_refused() -> Option<io::Error> {
        let insns = [
            crate::nat::netfilter::insn(0xb7, 0, 0, 0, 0), // r0 = 0
            crate::nat::netfilter::insn(0x95, 0, 0, 0, 0), // exit
        ];
        let req = sys::ProgLoad {
            prog_type: bpf_prog_type::BPF_PROG_TYPE_TRACING,
            expected_attach_type: bpf_attach_type::BPF_TRACE_FENTRY,
            name: "pktrace_probe",
            insns: &insns,
            license: c"GPL",
            btf: None,
            attach_btf_id: 1,
            attach_btf_obj_fd: None,
        };
        match sys::prog_load(&req, &mut [], 0) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => Some(e),
            _ => None,
        }
    }

    /// The kprobe programs load (the verifier accepts them) even where kprobes cannot attach,
    /// and a failed attach leaves neither of them loaded.
    #[test]
    #[ignore = "root tier: loads pktrace's kernel object"]
    fn kprobe_programs_pass_the_verifier_and_a_failed_attach_unloads_them() {
        let (mut ebpf, _) = loaded();
        for name in [KPROBE_ENTER, KRETPROBE_EXIT] {
            let prog = kprobe_mut(&mut ebpf, name).expect(name);
            if let Err(e) = prog.load() {
                match e {
                    ProgramError::LoadError {
                        io_error,
                        verifier_log,
                    } => {
                        panic!("{name} rejected ({io_error}):\n{verifier_log}")
                    }
                    other => panic!("{name}: {other}"),
                }
            }
            prog.unload().unwrap();
        }
        match attach_kprobes(&mut ebpf) {
            Ok(attached) => {
                assert!(
                    Path::new(KPROBE_PMU).exists(),
                    "attached without a kprobe PMU?"
                );
                assert_eq!(attached.links(), 2);
            }
            Err(ProbeError::NoSymbol) => println!("not attached: {FUNCTION} not loaded here"),
            Err(e) => {
                assert!(
                    !Path::new(KPROBE_PMU).exists(),
                    "this kernel has a kprobe PMU: {e}"
                );
                assert!(matches!(e, ProbeError::NoKprobePmu), "{e}");
                for name in [KPROBE_ENTER, KRETPROBE_EXIT] {
                    assert!(
                        kprobe_mut(&mut ebpf, name).unwrap().fd().is_err(),
                        "{name} left loaded"
                    );
                }
            }
        }
    }

    /// fentry works where the kernel verifies tracing programs; where it refuses them, the
    /// error says so in one line.
    #[test]
    #[ignore = "root tier: loads pktrace's kernel object"]
    fn fentry_attaches_or_says_the_kernel_refused() {
        let (ebpf, globals) = loaded();
        let bytes = globals.as_bytes();
        let refs: Vec<(&str, &[u8])> = bytes.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        let result = attach_fentry(&ebpf, &refs, &KernelBtf::default());
        match (tracing_refused(), result) {
            (None, Ok(attached)) => assert_eq!(attached.links(), 2),
            (None, Err(e @ (ProbeError::NotInBtf | ProbeError::NoModuleBtfObject))) => {
                println!("not attached: {e}");
            }
            (None, Err(e)) => panic!(
                "this kernel verifies tracing programs, yet: {e}\n{:?}",
                e.verifier_log()
            ),
            (Some(errno), Err(e)) => {
                let name = errno_name(&errno);
                assert!(
                    matches!(
                        &e,
                        ProbeError::Refused {
                            kind: ProbeKind::Fentry,
                            ..
                        }
                    ),
                    "{e}"
                );
                assert!(
                    e.to_string()
                        .contains(&format!("fentry programs: {name} — ")),
                    "{e}"
                );
            }
            (Some(errno), Ok(_)) => {
                panic!("tracing programs refused ({errno}), yet fentry attached")
            }
        }
    }

    #[test]
    fn program_names_keep_the_nat_prefix_in_the_kernel() {
        for name in [KPROBE_ENTER, KRETPROBE_EXIT, FENTRY_ENTER, FEXIT_EXIT] {
            let kept = &name[..name.len().min(sys::OBJ_NAME_LEN - 1)];
            assert!(kept.starts_with("nat_"), "{kept}");
        }
    }
}
