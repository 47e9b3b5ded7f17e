//! BPF netfilter programs and links: NAT observation method 3 of DESIGN.md.
//!
//! aya 0.14 has no loader for `BPF_PROG_TYPE_NETFILTER`, so the `nf_*` programs of the kernel
//! object (which sit in the `classifier` section, the one aya-obj accepts) are loaded here:
//! the object is parsed again with aya-obj, its globals patched like aya's, its map references
//! pointed at the maps aya created (so both loaders share one ring buffer, one flow table),
//! its calls linked, and each program loaded with the raw `bpf(BPF_PROG_LOAD)` syscall
//! ([`crate::sys`]). aya also lists these programs as `SchedClassifier`s; never load them
//! through aya. Before loading, their placeholders ([`tracer_common::nf_patch`]: member offsets
//! of typed loads, the kfunc `bpf_rdonly_cast` and its struct type ids) are patched from the
//! running kernel's BTF ([`patch_instructions`], strict: anything unknown or missing is an
//! error).
//!
//! A [`NetfilterLink`] hooks a program into netfilter in the network namespace of the
//! **calling thread** at attach time (`current->nsproxy->net_ns`, `bpf_nf_link_attach`,
//! net/netfilter/nf_bpf_link.c, v6.4). The link is a file descriptor: closing it (drop, exit,
//! even SIGKILL) unregisters the hook, and while it is open it holds a reference on that
//! namespace.
//!
//! # Minimum kernel version
//! 6.4, built with `CONFIG_NETFILTER_BPF_LINK` (`BPF_PROG_TYPE_NETFILTER`,
//! `BPF_LINK_TYPE_NETFILTER`: net/netfilter/nf_bpf_link.c, v6.4). The programs may only read
//! their context (`struct bpf_nf_ctx`: `state` at 0, `skb` at 8, 8-byte loads), use the base
//! helpers, and must return `NF_DROP` (0) or `NF_ACCEPT` (1).

#[cfg(test)]
use std::ffi::CStr;
use std::{
    collections::{HashMap, HashSet},
    io,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd},
};

use aya::maps::{Map, MapData};
use aya_obj::{
    Object, ParseError,
    btf::{BtfError as ObjectBtfError, BtfRelocationError},
    generated::{bpf_attach_type, bpf_insn, bpf_prog_type},
    relocation::EbpfRelocationError,
};
use thiserror::Error;
use tracer_common::nf_patch;

use crate::{
    btf::{Btf, KernelBtf, kernel_offsets},
    sys::{self, ProgBtf, ProgLoad},
};

/// `NFPROTO_IPV4` (include/uapi/linux/netfilter.h, v6.4).
pub const NFPROTO_IPV4: u32 = 2;
/// `NFPROTO_IPV6` (include/uapi/linux/netfilter.h, v6.4).
#[cfg(test)]
pub const NFPROTO_IPV6: u32 = 10;
/// `NF_INET_LOCAL_OUT` (include/uapi/linux/netfilter.h, v6.4).
#[cfg(test)]
const NF_INET_LOCAL_OUT: u32 = 3;
/// Programs of the object whose names start with this are netfilter programs.
pub const PROGRAM_PREFIX: &str = "nf_";

/// Verifier log sizes tried, in turn, after a load without a log failed. Kernels from 6.4 keep
/// the log's end when it overflows (`ENOSPC`), which is the part that says what failed.
const LOG_SIZES: [usize; 2] = [1 << 20, 16 << 20];

/// Failures to load or attach BPF netfilter programs.
#[derive(Debug, Error)]
pub enum AttachError {
    /// The kernel object is not an eBPF ELF aya-obj can read.
    #[error("parsing the eBPF object failed")]
    Parse(#[source] ParseError),
    /// A global does not exist in the object or has the wrong size.
    #[error("setting the eBPF object's globals failed (names and sizes must match the object)")]
    Globals(#[source] ParseError),
    /// The object's BTF could not be fixed up for the kernel.
    #[error("preparing the eBPF object's BTF failed")]
    ObjectBtf(#[source] ObjectBtfError),
    /// CO-RE relocations need the kernel's BTF, which could not be read.
    #[error("reading /sys/kernel/btf/vmlinux for the object's CO-RE relocations failed")]
    KernelBtf(#[source] ObjectBtfError),
    /// CO-RE relocations could not be applied.
    #[error("applying the eBPF object's CO-RE relocations failed")]
    CoreRelocation(#[source] BtfRelocationError),
    /// A map of the object is not among the maps aya created.
    #[error(
        "map {name} of the eBPF object is not in the aya `Ebpf`: load the same object with aya \
         first, and load the netfilter programs before taking maps out with `Ebpf::take_map`"
    )]
    MissingMap { name: String },
    /// Map or call relocation failed.
    #[error("relocating the eBPF object's {what} failed")]
    Relocation {
        what: &'static str,
        #[source]
        source: EbpfRelocationError,
    },
    /// The object has no program named `nf_*`.
    #[error("the eBPF object has no netfilter programs (functions named {PROGRAM_PREFIX}*)")]
    NoPrograms,
    /// A program's code is missing from the object.
    #[error("program {program} has no code in the eBPF object")]
    MissingFunction { program: String },
    /// The verifier rejected a program; its log says why.
    #[error("the kernel rejected netfilter program {program} ({errno}); verifier log:\n{log}")]
    Verifier {
        program: String,
        errno: io::Error,
        log: String,
    },
    /// Loading failed before verification (no log): privileges or an old kernel.
    #[error("loading netfilter program {program} failed{hint}")]
    Load {
        program: String,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    /// The kernel's BTF could not be read for the programs' typed loads.
    #[error(
        "reading /sys/kernel/btf/vmlinux for the netfilter programs failed (they need a kernel \
         built with CONFIG_DEBUG_INFO_BTF)"
    )]
    Btf(#[source] crate::btf::BtfError),
    /// The kernel's BTF lacks something the programs need.
    #[error("this kernel's BTF has no {what}, which the netfilter programs need")]
    BtfMissing { what: &'static str },
    /// A placeholder instruction could not be patched.
    #[error(
        "netfilter program {program}, instruction {index}: {what} (the kernel object and its \
         loader disagree: rebuild pktrace)"
    )]
    Patch {
        program: String,
        index: usize,
        what: String,
    },
    /// A placeholder was in none of the netfilter programs.
    #[error(
        "no netfilter program holds the placeholder for {what} (the kernel object and its \
         loader disagree: rebuild pktrace)"
    )]
    PatchUnused { what: &'static str },
    /// Netfilter refuses hooks at `NF_IP_PRI_FIRST` and `NF_IP_PRI_LAST`.
    #[error(
        "netfilter priority {priority} is reserved (NF_IP_PRI_FIRST/NF_IP_PRI_LAST); use a \
         priority strictly between them"
    )]
    ReservedPriority { priority: i32 },
    /// The kernel refused the link.
    #[error(
        "attaching {program} to netfilter (pf {pf}, hook {hook}, priority {priority}) failed{hint}"
    )]
    Link {
        program: String,
        pf: u32,
        hook: u32,
        priority: i32,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
}

/// A loaded BPF netfilter program (`BPF_PROG_TYPE_NETFILTER`); attach it with
/// [`NetfilterProgram::attach`]. Dropping it unloads it once no link uses it.
///
/// # Minimum kernel version
/// 6.4 with `CONFIG_NETFILTER_BPF_LINK` (net/netfilter/nf_bpf_link.c, v6.4).
#[derive(Debug)]
pub struct NetfilterProgram {
    fd: OwnedFd,
    name: String,
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
    /// [`load_netfilter_programs`]); `name` is truncated to 15 bytes in the kernel.
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
    /// ([`NFPROTO_IPV4`] or `NFPROTO_IPV6`), hook `hook` (`NF_INET_*`, see
    /// [`tracer_common::hook`]) at `priority` (lower runs first; the nat table sits at -100 in
    /// PRE_ROUTING/LOCAL_OUT and 100 in POST_ROUTING/LOCAL_IN).
    ///
    /// # Minimum kernel version
    /// 6.4 (`BPF_LINK_TYPE_NETFILTER`, net/netfilter/nf_bpf_link.c, v6.4).
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

impl AttachError {
    /// True when the kernel refused a link because another BPF netfilter program holds the
    /// priority: each BPF netfilter link needs a priority of its own on its hook
    /// (`nf_hook_entries_grow`, net/netfilter/core.c, v6.4: `EBUSY`).
    #[must_use]
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Link { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
    }
}

/// What a load failure without a verifier log usually means.
fn load_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => {
            ": run as root or with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON"
        }
        Some(libc::EINVAL) => {
            ": no verifier log, so most likely this kernel has no BPF netfilter programs (needs \
             Linux 6.4+ built with CONFIG_NETFILTER_BPF_LINK)"
        }
        _ => "",
    }
}

/// What a link failure means (`bpf_nf_check_pf_and_hooks`, net/netfilter/nf_bpf_link.c, v6.4).
fn link_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => ": run as root or with CAP_BPF and CAP_NET_ADMIN",
        Some(libc::EAFNOSUPPORT) => ": the family must be NFPROTO_IPV4 (2) or NFPROTO_IPV6 (10)",
        Some(libc::EPROTO) => ": the hook number must be below NF_INET_NUMHOOKS (5)",
        Some(libc::ERANGE) => ": priority reserved (NF_IP_PRI_FIRST/LAST)",
        Some(libc::EBUSY) => {
            ": another BPF netfilter program holds this priority (each needs one of its own)"
        }
        Some(libc::EINVAL | libc::EOPNOTSUPP) => {
            ": this kernel has no BPF netfilter links (needs Linux 6.4+ built with \
             CONFIG_NETFILTER_BPF_LINK)"
        }
        _ => "",
    }
}

/// The map data behind any kind of aya map.
fn map_data(map: &Map) -> &MapData {
    match map {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    }
}

/// Why the kernel did not load a program: the first error (without a log) and the verifier
/// log of the retry, empty when the kernel refused before verification.
#[derive(Debug)]
pub struct LoadFailure {
    pub errno: io::Error,
    pub log: String,
}

/// Loads without a verifier log (fast); on failure loads again with one to say why.
pub fn load_with_log(req: &ProgLoad<'_>) -> Result<OwnedFd, LoadFailure> {
    let errno = match sys::prog_load(req, &mut [], 0) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = Vec::new();
    for size in LOG_SIZES {
        log = vec![0u8; size];
        match sys::prog_load(req, &mut log, 1) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(_) => break,
        }
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let log = String::from_utf8_lossy(&log[..end]).trim_end().to_owned();
    Err(LoadFailure { errno, log })
}

/// A netfilter program load failure as an [`AttachError`].
fn refused(program: String, errno: io::Error, log: String) -> AttachError {
    if log.is_empty() {
        AttachError::Load {
            program,
            hint: load_hint(&errno),
            source: errno,
        }
    } else {
        AttachError::Verifier {
            program,
            errno,
            log,
        }
    }
}

/// What a program of a [`PreparedObject`] is loaded as.
#[derive(Clone, Copy, Debug)]
pub struct LoadAs<'a> {
    pub prog_type: bpf_prog_type,
    pub expected_attach_type: bpf_attach_type,
    /// Tracing programs: the kernel function's BTF id, and the module BTF holding it.
    pub attach_btf_id: u32,
    pub attach_btf_obj_fd: Option<BorrowedFd<'a>>,
}

/// The kernel object parsed again and prepared exactly as aya prepared it (globals, BTF,
/// relocations against aya's maps), to load the programs aya cannot: the netfilter programs
/// here, the fentry/fexit programs in [`super::probe`].
pub struct PreparedObject {
    obj: Object,
    btf_fd: Option<OwnedFd>,
}

impl PreparedObject {
    /// Prepares the kernel object `bytes`, using the maps `ebpf` created from the same bytes.
    ///
    /// `globals` must be what was given to `EbpfLoader::override_global` (name and the value's
    /// bytes, e.g. `KernelOffsets` through [`crate::btf::kernel_offsets_bytes`]): the values the
    /// programs see are in aya's `.rodata`/`.data` maps, and are patched here too so the object
    /// is prepared exactly as aya prepared it (sizes are checked, every name must exist). Call
    /// this before taking maps out of `ebpf` with `take_map`. The steps follow
    /// `EbpfLoader::load` (aya 0.14, src/bpf.rs): patch globals, fix up and load the object's
    /// BTF (for `func_info` and `line_info`; the programs load without it if the kernel refuses
    /// it), CO-RE relocations when there are any, map and call relocations, helper sanitising.
    pub fn new(
        bytes: &[u8],
        globals: &[(&str, &[u8])],
        ebpf: &aya::Ebpf,
    ) -> Result<Self, AttachError> {
        let mut obj = Object::parse(bytes).map_err(AttachError::Parse)?;
        let patches: HashMap<&str, (&[u8], bool)> =
            globals.iter().map(|&(n, b)| (n, (b, true))).collect();
        obj.patch_map_data(patches).map_err(AttachError::Globals)?;
        let btf_fd = load_object_btf(&mut obj)?;
        if obj.has_btf_relocations() {
            let kernel = aya_obj::btf::Btf::from_sys_fs().map_err(AttachError::KernelBtf)?;
            obj.relocate_btf(&kernel)
                .map_err(AttachError::CoreRelocation)?;
        }
        relocate(&mut obj, ebpf)?;
        Ok(Self { obj, btf_fd })
    }

    /// Rewrites the placeholders of program `name` ([`nf_patch`]) as `patches` says; `used`
    /// collects which placeholders it held. No-op for a program the object does not have.
    fn patch(
        &mut self,
        name: &str,
        patches: &NfPatches,
        used: &mut Used,
    ) -> Result<(), AttachError> {
        let Some(program) = self.obj.programs.get(name) else {
            return Ok(());
        };
        let key = program.function_key();
        let Some(function) = self.obj.functions.get_mut(&key) else {
            return Ok(());
        };
        patch_instructions(&mut function.instructions, patches, used).map_err(|(index, what)| {
            AttachError::Patch {
                program: name.to_owned(),
                index,
                what,
            }
        })
    }

    /// The names of the object's programs that start with `prefix`, sorted.
    #[must_use]
    pub fn program_names(&self, prefix: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .obj
            .programs
            .keys()
            .map(String::as_str)
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort_unstable();
        names
    }

    /// Loads program `name` as `how`; `Ok(None)` when the object has no such program.
    pub fn load(&self, name: &str, how: LoadAs<'_>) -> Result<Option<OwnedFd>, LoadFailure> {
        let Some(program) = self.obj.programs.get(name) else {
            return Ok(None);
        };
        let Some(function) = self.obj.functions.get(&program.function_key()) else {
            return Ok(None);
        };
        let func_info = function.func_info.func_info_bytes();
        let line_info = function.line_info.line_info_bytes();
        let btf = self.btf_fd.as_ref().map(|fd| ProgBtf {
            fd: fd.as_fd(),
            func_info: &func_info,
            func_info_rec_size: u32::try_from(function.func_info_rec_size).unwrap_or(0),
            line_info: &line_info,
            line_info_rec_size: u32::try_from(function.line_info_rec_size).unwrap_or(0),
        });
        load_with_log(&ProgLoad {
            prog_type: how.prog_type,
            expected_attach_type: how.expected_attach_type,
            name,
            insns: &function.instructions,
            license: &program.license,
            btf,
            attach_btf_id: how.attach_btf_id,
            attach_btf_obj_fd: how.attach_btf_obj_fd,
        })
        .map(Some)
    }
}

/// Loads every `nf_*` program of the kernel object `bytes` as a BPF netfilter program, using
/// the maps `ebpf` created from the same bytes (see [`PreparedObject::new`] for `globals`).
///
/// # Minimum kernel version
/// 6.4 with `CONFIG_NETFILTER_BPF_LINK` (net/netfilter/nf_bpf_link.c, v6.4).
///
/// The flag is [`NfPatches::conntrack`]: false when the enter programs cannot read conntrack
/// entries on this kernel and read every packet instead.
pub fn load_netfilter_programs(
    bytes: &[u8],
    globals: &[(&str, &[u8])],
    ebpf: &aya::Ebpf,
    kernel_btf: &KernelBtf,
) -> Result<(Vec<NetfilterProgram>, bool), AttachError> {
    let patches = NfPatches::from_btf(kernel_btf.get().map_err(AttachError::Btf)?)?;
    let mut prepared = PreparedObject::new(bytes, globals, ebpf)?;
    let names: Vec<String> = prepared
        .program_names(PROGRAM_PREFIX)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        return Err(AttachError::NoPrograms);
    }
    let mut used = Used::default();
    for name in &names {
        prepared.patch(name, &patches, &mut used)?;
    }
    used.check()?;
    let how = LoadAs {
        prog_type: bpf_prog_type::BPF_PROG_TYPE_NETFILTER,
        expected_attach_type: bpf_attach_type::BPF_NETFILTER,
        attach_btf_id: 0,
        attach_btf_obj_fd: None,
    };
    let load = |name: &String| match prepared.load(name, how) {
        Ok(Some(fd)) => Ok(NetfilterProgram {
            fd,
            name: name.to_owned(),
        }),
        Ok(None) => Err(AttachError::MissingFunction {
            program: name.to_owned(),
        }),
        Err(LoadFailure { errno, log }) => Err(refused(name.to_owned(), errno, log)),
    };
    super::side_by_side(&names, load)
        .into_iter()
        .collect::<Result<_, _>>()
        .map(|programs| (programs, patches.conntrack))
}

/// `BPF_PSEUDO_KFUNC_CALL`: a call's `src_reg` for a kernel function (include/uapi/linux/bpf.h).
const PSEUDO_KFUNC_CALL: u8 = 2;
/// Instruction classes, modes and operations (include/uapi/linux/bpf.h, bpf_common.h).
const CLASS_MASK: u8 = 0x07;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU: u8 = 0x04;
const CLASS_ALU64: u8 = 0x07;
const MODE_MASK: u8 = 0xe0;
const MODE_MEM: u8 = 0x60;
const OP_MASK: u8 = 0xf0;
const OP_ADD: u8 = 0x00;
const OP_MOV: u8 = 0xb0;
const SRC_X: u8 = 0x08;
const CALL: u8 = 0x85;
const MOV64_IMM: u8 = 0xb7;
const MOV32_IMM: u8 = 0xb4;

/// Bytes of a load or store of `code` (`BPF_W`, `BPF_H`, `BPF_B`, `BPF_DW`).
const fn access_bytes(code: u8) -> u8 {
    match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => 8,
    }
}

/// One placeholder load ([`nf_patch`]) and what it becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadPatch {
    /// The placeholder offset.
    pub placeholder: i16,
    /// The member's name, for errors.
    pub what: &'static str,
    /// The load's size in bytes (the member's).
    pub bytes: u8,
    /// The member's offset; `None`: this kernel lacks the (optional) member, the load becomes
    /// `dst = 0`.
    pub offset: Option<i16>,
}

/// The `struct nf_conn` members the enter programs read ([`nf_patch`]'s `CT_*`), as offsets
/// in the struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnOffsets {
    pub status: u32,
    pub orig_l3num: u32,
    pub orig_src: u32,
    pub orig_dst: u32,
    pub reply_src: u32,
    pub reply_dst: u32,
    pub orig_sport: u32,
    pub orig_dport: u32,
    pub reply_sport: u32,
    pub reply_dport: u32,
    pub proto: u32,
}

/// The `struct nf_conn` placeholder loads ([`nf_patch`]'s `CT_*`): what each reads, its size in
/// bytes, and its offset in [`ConnOffsets`].
type CtLoad = (i16, &'static str, u8, fn(&ConnOffsets) -> u32);
const CT_LOADS: [CtLoad; 11] = [
    (nf_patch::CT_STATUS, "nf_conn.status", 8, |o| o.status),
    (nf_patch::CT_ORIG_L3NUM, "nf_conn original l3num", 2, |o| {
        o.orig_l3num
    }),
    (nf_patch::CT_ORIG_SRC, "nf_conn original source", 4, |o| {
        o.orig_src
    }),
    (
        nf_patch::CT_ORIG_DST,
        "nf_conn original destination",
        4,
        |o| o.orig_dst,
    ),
    (nf_patch::CT_REPLY_SRC, "nf_conn reply source", 4, |o| {
        o.reply_src
    }),
    (
        nf_patch::CT_REPLY_DST,
        "nf_conn reply destination",
        4,
        |o| o.reply_dst,
    ),
    (
        nf_patch::CT_ORIG_SPORT,
        "nf_conn original source port",
        2,
        |o| o.orig_sport,
    ),
    (
        nf_patch::CT_ORIG_DPORT,
        "nf_conn original destination port",
        2,
        |o| o.orig_dport,
    ),
    (
        nf_patch::CT_REPLY_SPORT,
        "nf_conn reply source port",
        2,
        |o| o.reply_sport,
    ),
    (
        nf_patch::CT_REPLY_DPORT,
        "nf_conn reply destination port",
        2,
        |o| o.reply_dport,
    ),
    (nf_patch::CT_PROTO, "nf_conn protocol", 1, |o| o.proto),
];

impl ConnOffsets {
    /// The offsets from `btf`; `Ok(None)` when it has no `struct nf_conn` or lacks one of the
    /// members (conntrack built as a module keeps its types in the module's BTF, which
    /// `bpf_rdonly_cast` cannot name). `tuplehash` is an array of `IP_CT_DIR_MAX` (2)
    /// `struct nf_conntrack_tuple_hash`: the reply direction's is one element further.
    pub fn from_btf(btf: &Btf) -> Result<Option<Self>, AttachError> {
        let found = (|| {
            let hash = btf.struct_member_offset("nf_conn", "tuplehash")?;
            let stride = btf.struct_size("nf_conntrack_tuple_hash")?;
            let in_hash = |path| btf.struct_member_offset("nf_conntrack_tuple_hash", path);
            let (src, dst) = (in_hash("tuple.src.u3")?, in_hash("tuple.dst.u3")?);
            let (sport, dport) = (in_hash("tuple.src.u")?, in_hash("tuple.dst.u")?);
            Ok(Self {
                status: btf.struct_member_offset("nf_conn", "status")?,
                orig_l3num: hash + in_hash("tuple.src.l3num")?,
                orig_src: hash + src,
                orig_dst: hash + dst,
                reply_src: hash + stride + src,
                reply_dst: hash + stride + dst,
                orig_sport: hash + sport,
                orig_dport: hash + dport,
                reply_sport: hash + stride + sport,
                reply_dport: hash + stride + dport,
                proto: hash + in_hash("tuple.dst.protonum")?,
            })
        })();
        match found {
            Ok(o) => Ok(Some(o)),
            Err(
                crate::btf::BtfError::StructNotFound { .. }
                | crate::btf::BtfError::MemberNotFound { .. },
            ) => Ok(None),
            Err(e) => Err(AttachError::Btf(e)),
        }
    }

    /// The `CT_*` load patches: the offsets, or `dst = 0` for every load without them.
    fn loads(this: Option<Self>) -> [LoadPatch; CT_LOADS.len()] {
        CT_LOADS.map(|(placeholder, what, bytes, member)| LoadPatch {
            placeholder,
            what,
            bytes,
            offset: this.map(|o| i16::try_from(member(&o)).unwrap_or(i16::MAX)),
        })
    }
}

/// What the netfilter programs' placeholders become on one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfPatches {
    /// False when the enter programs cannot read conntrack entries ([`ConnOffsets`]): they
    /// then read every packet.
    pub conntrack: bool,
    pub loads: Vec<LoadPatch>,
    /// BTF id of the kfunc `bpf_rdonly_cast` in vmlinux BTF.
    pub rdonly_cast: u32,
    /// Type-id placeholders and the vmlinux BTF ids they stand for, with names for errors.
    pub types: Vec<(i32, &'static str, u32)>,
}

impl NfPatches {
    /// The patches for the kernel whose BTF `btf` is.
    pub fn from_btf(btf: &Btf) -> Result<Self, AttachError> {
        let o = kernel_offsets(btf).map_err(AttachError::Btf)?;
        let required = |v: u32, what: &'static str| {
            (v != 0)
                .then_some(v)
                .ok_or(AttachError::BtfMissing { what })
        };
        let ctx_skb = required(o.nf_ctx_skb, "struct bpf_nf_ctx member skb")?;
        let member = |placeholder, what, bytes, offset: u32| LoadPatch {
            placeholder,
            what,
            bytes,
            offset: (offset != 0).then(|| i16::try_from(offset).unwrap_or(i16::MAX)),
        };
        let conn = ConnOffsets::from_btf(btf)?;
        // Both members come first in their structs (6.4 to 6.18): `member`'s 0 for "missing"
        // would turn their loads into `dst = 0`.
        let at = |placeholder, what, bytes, found: Result<u32, crate::btf::BtfError>| {
            Ok::<_, AttachError>(LoadPatch {
                placeholder,
                what,
                bytes,
                offset: Some(i16::try_from(found.map_err(AttachError::Btf)?).unwrap_or(i16::MAX)),
            })
        };
        let mut loads = vec![
            member(nf_patch::CTX_SKB, "bpf_nf_ctx.skb", 8, ctx_skb),
            at(
                nf_patch::CTX_STATE,
                "bpf_nf_ctx.state",
                8,
                btf.struct_member_offset("bpf_nf_ctx", "state"),
            )?,
            at(
                nf_patch::STATE_HOOK,
                "nf_hook_state.hook",
                1,
                btf.struct_member_offset("nf_hook_state", "hook"),
            )?,
            member(nf_patch::SKB_LEN, "sk_buff.len", 4, o.skb_len),
            member(
                nf_patch::SKB_DATA_LEN,
                "sk_buff.data_len",
                4,
                o.skb_data_len,
            ),
            member(nf_patch::SKB_DATA, "sk_buff.data", 8, o.skb_data),
            member(nf_patch::SKB_DEV, "sk_buff.dev", 8, o.skb_dev),
            member(nf_patch::SKB_MARK, "sk_buff.mark", 4, o.skb_mark),
            member(nf_patch::SKB_NFCT, "sk_buff._nfct", 8, o.skb_nfct),
            member(
                nf_patch::DEV_IFINDEX,
                "net_device.ifindex",
                4,
                o.dev_ifindex,
            ),
        ];
        loads.extend(ConnOffsets::loads(conn));
        let id = |found: Result<Option<u32>, _>, what| {
            found
                .map_err(AttachError::Btf)?
                .ok_or(AttachError::BtfMissing { what })
        };
        let head = id(btf.struct_id("ipv6hdr"), "struct ipv6hdr")?;
        // Without `struct nf_conn` the cast stays (the program holds it) but nothing loads
        // through it: any struct's id will do.
        let nf_conn = match conn {
            Some(_) => id(btf.struct_id("nf_conn"), "struct nf_conn")?,
            None => head,
        };
        Ok(Self {
            conntrack: conn.is_some(),
            loads,
            rdonly_cast: id(
                btf.func_id("bpf_rdonly_cast"),
                "kfunc bpf_rdonly_cast (Linux 6.2+)",
            )?,
            types: vec![
                (nf_patch::TYPE_HEAD, "struct ipv6hdr", head),
                (nf_patch::TYPE_NF_CONN, "struct nf_conn", nf_conn),
            ],
        })
    }
}

/// Which placeholders the patched programs held, to refuse an object without some of them
/// (a loader and object that disagree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Used {
    loads: HashSet<i16>,
    rdonly_cast: bool,
    types: HashSet<i32>,
}

impl Used {
    /// Errors with the first placeholder of [`nf_patch`] that no program held.
    fn check(&self) -> Result<(), AttachError> {
        let loads = [
            (nf_patch::CTX_SKB, "bpf_nf_ctx.skb"),
            (nf_patch::CTX_STATE, "bpf_nf_ctx.state"),
            (nf_patch::STATE_HOOK, "nf_hook_state.hook"),
            (nf_patch::SKB_LEN, "sk_buff.len"),
            (nf_patch::SKB_DATA_LEN, "sk_buff.data_len"),
            (nf_patch::SKB_DATA, "sk_buff.data"),
            (nf_patch::SKB_DEV, "sk_buff.dev"),
            (nf_patch::SKB_MARK, "sk_buff.mark"),
            (nf_patch::SKB_NFCT, "sk_buff._nfct"),
            (nf_patch::DEV_IFINDEX, "net_device.ifindex"),
        ];
        let ct = CT_LOADS.iter().map(|&(ph, what, _, _)| (ph, what));
        for (ph, what) in loads.into_iter().chain(ct) {
            if !self.loads.contains(&ph) {
                return Err(AttachError::PatchUnused { what });
            }
        }
        if !self.rdonly_cast {
            return Err(AttachError::PatchUnused {
                what: "bpf_rdonly_cast",
            });
        }
        for (ty, what) in [
            (nf_patch::TYPE_HEAD, "struct ipv6hdr"),
            (nf_patch::TYPE_NF_CONN, "struct nf_conn"),
        ] {
            if !self.types.contains(&ty) {
                return Err(AttachError::PatchUnused { what });
            }
        }
        Ok(())
    }
}

/// Rewrites every placeholder of [`nf_patch`] in `insns` as `patches` says and notes it in
/// `used`. Strict: a placeholder load of the wrong size or kind, an unknown placeholder, or a
/// placeholder offset outside a load (the compiler did not fold it into the load) is an
/// error `(instruction index, what)`.
pub fn patch_instructions(
    insns: &mut [bpf_insn],
    patches: &NfPatches,
    used: &mut Used,
) -> Result<(), (usize, String)> {
    let load_range = nf_patch::LOAD_FIRST..=nf_patch::LOAD_LAST;
    let type_range = nf_patch::TYPE_FIRST..=nf_patch::TYPE_LAST;
    for (index, insn) in insns.iter_mut().enumerate() {
        let code = insn.code;
        let class = code & CLASS_MASK;
        let fail = |what: String| Err((index, what));
        if load_range.contains(&insn.off) && matches!(class, CLASS_LDX | CLASS_ST | CLASS_STX) {
            if class != CLASS_LDX || code & MODE_MASK != MODE_MEM {
                return fail(format!(
                    "placeholder offset {:#x} in a store or a non-plain load (code {code:#04x})",
                    insn.off
                ));
            }
            let Some(p) = patches.loads.iter().find(|p| p.placeholder == insn.off) else {
                return fail(format!("unknown placeholder offset {:#x}", insn.off));
            };
            let bytes = access_bytes(code);
            if bytes != p.bytes {
                return fail(format!(
                    "{}: a {bytes}-byte load of a {}-byte member",
                    p.what, p.bytes
                ));
            }
            used.loads.insert(p.placeholder);
            match p.offset {
                Some(off) => insn.off = off,
                None => {
                    let dst = insn.dst_reg();
                    *insn = mov64_imm(dst, 0);
                }
            }
            continue;
        }
        let op = code & OP_MASK;
        let alu = matches!(class, CLASS_ALU | CLASS_ALU64) && code & SRC_X == 0;
        if alu && op == OP_ADD && i16::try_from(insn.imm).is_ok_and(|imm| load_range.contains(&imm))
        {
            return fail(format!(
                "placeholder offset {:#x} added to a register instead of folded into a load",
                insn.imm
            ));
        }
        if code == CALL && insn.src_reg() == 0 && insn.imm == nf_patch::RDONLY_CAST {
            insn.set_src_reg(PSEUDO_KFUNC_CALL);
            insn.off = 0;
            insn.imm = i32::try_from(patches.rdonly_cast)
                .map_err(|_| (index, "bpf_rdonly_cast's BTF id is too large".to_owned()))?;
            used.rdonly_cast = true;
            continue;
        }
        if alu && op == OP_MOV && type_range.contains(&insn.imm) {
            debug_assert!(matches!(code, MOV64_IMM | MOV32_IMM));
            let placeholder = insn.imm;
            let Some(&(_, what, id)) = patches.types.iter().find(|t| t.0 == placeholder) else {
                return fail(format!("unknown type placeholder {placeholder:#x}"));
            };
            insn.imm = i32::try_from(id)
                .map_err(|_| (index, format!("the BTF id of {what} is too large")))?;
            used.types.insert(placeholder);
            continue;
        }
    }
    Ok(())
}

/// `dst = imm` (64-bit).
fn mov64_imm(dst: u8, imm: i32) -> bpf_insn {
    bpf_insn {
        code: MOV64_IMM,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, 0),
        off: 0,
        imm,
    }
}

/// Fixes up the object's BTF for this kernel and loads it; `None` when the kernel has no BTF
/// support or refuses it (aya proceeds the same way for programs that do not need BTF).
fn load_object_btf(obj: &mut Object) -> Result<Option<OwnedFd>, AttachError> {
    let Some(features) = aya::features().btf() else {
        return Ok(None);
    };
    let Some(btf) = obj
        .fixup_and_sanitize_btf(features)
        .map_err(AttachError::ObjectBtf)?
    else {
        return Ok(None);
    };
    Ok(sys::btf_load(&btf.to_bytes()).ok())
}

/// Points the object's map references at aya's maps and links its function calls.
fn relocate(obj: &mut Object, ebpf: &aya::Ebpf) -> Result<(), AttachError> {
    let maps: Vec<(String, aya_obj::Map)> = obj.maps.drain().collect();
    let mut with_fds = Vec::with_capacity(maps.len());
    for (name, map) in &maps {
        let data = ebpf
            .map(name)
            .map(map_data)
            .ok_or_else(|| AttachError::MissingMap { name: name.clone() })?;
        with_fds.push((name.as_str(), data.fd().as_fd().as_raw_fd(), map));
    }
    let text_sections: HashSet<usize> = obj.functions.keys().map(|&(section, _)| section).collect();
    obj.relocate_maps(with_fds.into_iter(), &text_sections)
        .map_err(|source| AttachError::Relocation {
            what: "map references",
            source,
        })?;
    obj.relocate_calls(&text_sections)
        .map_err(|source| AttachError::Relocation {
            what: "function calls",
            source,
        })?;
    obj.sanitize_functions(aya::features());
    Ok(())
}

/// One eBPF instruction.
#[cfg(test)]
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    bpf_insn {
        code,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
        off,
        imm,
    }
}

/// Checks that this kernel loads netfilter programs and links them, without hooking anything:
/// it loads `r0 = NF_ACCEPT; exit` and asks for a link at the reserved priority
/// `NF_IP_PRI_FIRST`, which a kernel with netfilter links refuses with `ERANGE` after checking
/// everything else (`bpf_nf_check_pf_and_hooks`, net/netfilter/nf_bpf_link.c, v6.4). So it is
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

#[cfg(test)]
mod tests {
    use std::{fs, net::UdpSocket, os::fd::AsRawFd as _, time::Duration};

    use tracer_common::{KernelOffsets, hook};

    use super::*;
    use crate::{
        btf::{Btf, kernel_offsets},
        test_support::in_new_netns,
    };

    /// Why these tests cannot run here: a kernel before 6.4 has no BPF netfilter links (the
    /// only case that ends a root-tier test early). Not being root fails the test.
    fn too_old() -> Option<String> {
        crate::test_support::require_root();
        let (new_enough, release) = crate::test_support::kernel_at_least(6, 4);
        (!new_enough).then(|| format!("kernel {release} < 6.4 has no BPF netfilter links"))
    }

    /// Sends `n` UDP datagrams of `payload` bytes with socket mark `mark` over loopback and
    /// waits until they arrived.
    fn send_udp(n: usize, payload: usize, mark: u32) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let len = libc::socklen_t::try_from(size_of::<u32>()).unwrap();
        // SAFETY: SO_MARK reads a u32 from the pointer for `len` bytes.
        let ret = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                std::ptr::from_ref(&mark).cast(),
                len,
            )
        };
        assert_eq!(ret, 0, "{}", io::Error::last_os_error());
        let mut buf = vec![0u8; payload + 1];
        for _ in 0..n {
            tx.send_to(&buf[..payload], rx.local_addr().unwrap())
                .unwrap();
            assert_eq!(rx.recv(&mut buf).unwrap(), payload);
        }
    }

    /// `BPF_LD | BPF_IMM | BPF_DW` of a map fd: two instructions.
    fn ld_map_fd(dst: u8, map: &OwnedFd) -> [bpf_insn; 2] {
        [insn(0x18, dst, 1, 0, map.as_raw_fd()), insn(0, 0, 0, 0, 0)]
    }

    fn off(bytes: u32) -> i16 {
        i16::try_from(bytes).unwrap()
    }

    /// A netfilter program that adds to the `[count, sum of skb->len, skb->mark,
    /// skb->dev->ifindex]` u64s at index `slot` of array `map`, reading `skb` through the
    /// offsets from BTF: the verifier checks those reads against the kernel's own types.
    fn counter(map: &OwnedFd, slot: i32, o: &KernelOffsets) -> Vec<bpf_insn> {
        let [ld0, ld1] = ld_map_fd(1, map);
        vec![
            insn(0xbf, 6, 1, 0, 0),                 // r6 = ctx
            insn(0x79, 7, 6, off(o.nf_ctx_skb), 0), // r7 = ctx->skb
            insn(0x62, 10, 0, -4, slot),            // *(u32 *)(r10 - 4) = slot
            insn(0xbf, 2, 10, 0, 0),                // r2 = r10
            insn(0x07, 2, 0, 0, -4),                // r2 += -4
            ld0,
            ld1,                                     // r1 = map
            insn(0x85, 0, 0, 0, 1),                  // r0 = bpf_map_lookup_elem(r1, r2)
            insn(0x15, 0, 0, 10, 0),                 // if r0 == 0 goto exit
            insn(0xb7, 1, 0, 0, 1),                  // r1 = 1
            insn(0xdb, 0, 1, 0, 0),                  // lock *(u64 *)(r0 + 0) += r1
            insn(0x61, 1, 7, off(o.skb_len), 0),     // r1 = skb->len
            insn(0xdb, 0, 1, 8, 0),                  // lock *(u64 *)(r0 + 8) += r1
            insn(0x61, 1, 7, off(o.skb_mark), 0),    // r1 = skb->mark
            insn(0x7b, 0, 1, 16, 0),                 // *(u64 *)(r0 + 16) = r1
            insn(0x79, 1, 7, off(o.skb_dev), 0),     // r1 = skb->dev
            insn(0x15, 1, 0, 2, 0),                  // if r1 == 0 goto exit
            insn(0x61, 1, 1, off(o.dev_ifindex), 0), // r1 = dev->ifindex
            insn(0x7b, 0, 1, 24, 0),                 // *(u64 *)(r0 + 24) = r1
            insn(0xb7, 0, 0, 0, 1),                  // exit: r0 = NF_ACCEPT
            insn(0x95, 0, 0, 0, 0),                  // return r0
        ]
    }

    /// `[count, sum of len, mark, ifindex]` at `slot`.
    fn counts(map: &OwnedFd, slot: u32) -> [u64; 4] {
        let mut raw = [0u8; 32];
        // SAFETY: the map's values are 32 bytes (`array_map_create(32, ..)` below).
        unsafe { sys::array_map_lookup(map.as_fd(), slot, &mut raw) }.unwrap();
        let mut out = [0; 4];
        for (v, chunk) in out.iter_mut().zip(raw.chunks_exact(8)) {
            *v = u64::from_ne_bytes(chunk.try_into().unwrap());
        }
        out
    }

    #[test]
    #[ignore = "root tier: loads and attaches netfilter programs"]
    fn links_count_packets_in_a_new_namespace_until_dropped() {
        if let Some(why) = too_old() {
            println!("not applicable: {why}");
            return;
        }
        let o = kernel_offsets(&Btf::from_sys_fs().unwrap()).unwrap();
        let map = sys::array_map_create(32, 2).unwrap();
        let out = NetfilterProgram::load("pkt_test_out", &counter(&map, 0, &o), c"GPL").unwrap();
        let post = NetfilterProgram::load("pkt_test_post", &counter(&map, 1, &o), c"GPL").unwrap();
        in_new_netns(|| {
            probe_netfilter_links().unwrap();
            let links = [
                out.attach(NFPROTO_IPV4, u32::from(hook::LOCAL_OUT), -101)
                    .unwrap(),
                post.attach(NFPROTO_IPV4, u32::from(hook::POST_ROUTING), 99)
                    .unwrap(),
            ];
            assert_eq!(
                (links[0].program(), links[0].hook(), links[0].priority()),
                ("pkt_test_out", 3, -101)
            );
            send_udp(5, 100, 0x4000);
            // IPv4 20 + UDP 8 + payload 100 bytes; `lo` is ifindex 1 in a new namespace. At
            // LOCAL_OUT skb->dev is not set yet (ip_output sets it just before POST_ROUTING,
            // net/ipv4/ip_output.c, v6.1), so only POST_ROUTING checks dev->ifindex.
            assert_eq!(counts(&map, 0)[..3], [5, 5 * 128, 0x4000]);
            assert_eq!(counts(&map, 1), [5, 5 * 128, 0x4000, 1]);
            drop(links);
            send_udp(3, 10, 0);
            assert_eq!(counts(&map, 0)[0], 5, "a dropped link still counted");
            assert_eq!(counts(&map, 1)[0], 5, "a dropped link still counted");
        });
    }

    #[test]
    #[ignore = "root tier: loads and attaches netfilter programs"]
    fn link_and_load_errors_say_why() {
        if let Some(why) = too_old() {
            println!("not applicable: {why}");
            return;
        }
        let accept = [insn(0xb7, 0, 0, 0, 1), insn(0x95, 0, 0, 0, 0)];
        let prog = NetfilterProgram::load("pkt_test_err", &accept, c"GPL").unwrap();
        in_new_netns(|| {
            let err = prog.attach(NFPROTO_IPV4, 3, i32::MIN).unwrap_err();
            assert!(matches!(err, AttachError::ReservedPriority { .. }), "{err}");
            let err = prog.attach(99, 3, 1).unwrap_err();
            assert!(err.to_string().contains("NFPROTO_IPV4"), "{err}");
            let err = prog.attach(NFPROTO_IPV6, 7, 1).unwrap_err();
            assert!(err.to_string().contains("NF_INET_NUMHOOKS"), "{err}");
        });
        // Netfilter programs must return NF_DROP or NF_ACCEPT; the log must say so.
        let bad = [insn(0xb7, 0, 0, 0, 2), insn(0x95, 0, 0, 0, 0)];
        match NetfilterProgram::load("pkt_test_bad", &bad, c"GPL") {
            Err(AttachError::Verifier { program, log, .. }) => {
                assert_eq!(program, "pkt_test_bad");
                assert!(log.contains("R0"), "{log}");
            }
            other => panic!("expected a verifier error, got {other:?}"),
        }
    }

    /// `struct nf_conn` offsets of a kernel, made up.
    const CONN: ConnOffsets = ConnOffsets {
        status: 128,
        orig_l3num: 60,
        orig_src: 40,
        orig_dst: 64,
        reply_src: 96,
        reply_dst: 120,
        orig_sport: 56,
        orig_dport: 80,
        reply_sport: 112,
        reply_dport: 136,
        proto: 82,
    };

    /// Patches as a kernel with these offsets and ids would give them; `_nfct` as `nfct`,
    /// `struct nf_conn` as `conn`.
    fn patches_with(nfct: Option<i16>, conn: Option<ConnOffsets>) -> NfPatches {
        let load = |placeholder, what, bytes, offset| LoadPatch {
            placeholder,
            what,
            bytes,
            offset,
        };
        let mut p = NfPatches {
            conntrack: conn.is_some(),
            loads: vec![
                load(nf_patch::CTX_SKB, "bpf_nf_ctx.skb", 8, Some(8)),
                load(nf_patch::CTX_STATE, "bpf_nf_ctx.state", 8, Some(0)),
                load(nf_patch::STATE_HOOK, "nf_hook_state.hook", 1, Some(0)),
                load(nf_patch::SKB_LEN, "sk_buff.len", 4, Some(112)),
                load(nf_patch::SKB_DATA_LEN, "sk_buff.data_len", 4, Some(116)),
                load(nf_patch::SKB_DATA, "sk_buff.data", 8, Some(200)),
                load(nf_patch::SKB_DEV, "sk_buff.dev", 8, Some(16)),
                load(nf_patch::SKB_MARK, "sk_buff.mark", 4, Some(168)),
                load(nf_patch::SKB_NFCT, "sk_buff._nfct", 8, nfct),
                load(nf_patch::DEV_IFINDEX, "net_device.ifindex", 4, Some(224)),
            ],
            rdonly_cast: 61_234,
            types: vec![
                (nf_patch::TYPE_HEAD, "struct ipv6hdr", 5_001),
                (
                    nf_patch::TYPE_NF_CONN,
                    "struct nf_conn",
                    if conn.is_some() { 5_003 } else { 5_001 },
                ),
            ],
        };
        p.loads.extend(ConnOffsets::loads(conn));
        p
    }

    fn patches(nfct: Option<i16>) -> NfPatches {
        patches_with(nfct, Some(CONN))
    }

    const LDX_DW: u8 = 0x79;
    const LDX_W: u8 = 0x61;
    const STX_W: u8 = 0x63;
    const LDX_H: u8 = 0x69;
    const LDX_B: u8 = 0x71;

    /// A program shaped like the compiled `nf_*` programs: every placeholder once, among
    /// instructions the patcher must leave alone.
    fn placeholder_program() -> Vec<bpf_insn> {
        vec![
            insn(LDX_DW, 6, 1, nf_patch::CTX_SKB, 0), // 0: r6 = ctx->skb
            insn(LDX_W, 2, 6, nf_patch::SKB_LEN, 0),  // 1: r2 = skb->len
            insn(LDX_W, 3, 6, nf_patch::SKB_DATA_LEN, 0), // 2
            insn(LDX_DW, 7, 6, nf_patch::SKB_DATA, 0), // 3
            insn(0x18, 1, 1, 0, nf_patch::TYPE_HEAD), // 4: ld_imm64 (a map fd), left alone
            insn(0, 0, 0, 0, nf_patch::TYPE_NF_CONN), // 5: its second half
            insn(0xbf, 1, 7, 0, 0),                   // 6: r1 = r7
            insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_HEAD), // 7: r2 = type placeholder
            insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 8: call placeholder
            insn(0x07, 7, 0, 0, 20),                  // 9: r7 += 20
            insn(MOV32_IMM, 2, 0, 0, nf_patch::TYPE_HEAD), // 10: w2 = type placeholder
            insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 11
            insn(LDX_DW, 4, 6, nf_patch::SKB_NFCT, 0), // 12
            insn(LDX_DW, 5, 6, nf_patch::SKB_DEV, 0), // 13
            insn(LDX_W, 5, 5, nf_patch::DEV_IFINDEX, 0), // 14
            insn(LDX_W, 8, 6, nf_patch::SKB_MARK, 0), // 15
            insn(LDX_W, 9, 10, -8, 0),                // 16: a stack load, left alone
            insn(CALL, 0, 0, 0, 5),                   // 17: bpf_ktime_get_ns, left alone
            insn(CALL, 0, 1, 0, nf_patch::RDONLY_CAST), // 18: a bpf-to-bpf call, left alone
            insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_NF_CONN), // 19: the nf_conn cast
            insn(CALL, 0, 0, 0, nf_patch::RDONLY_CAST), // 20
            insn(LDX_DW, 1, 0, nf_patch::CT_STATUS, 0), // 21: r1 = ct->status
            insn(LDX_H, 2, 0, nf_patch::CT_ORIG_L3NUM, 0), // 22
            insn(LDX_W, 3, 0, nf_patch::CT_ORIG_SRC, 0), // 23
            insn(LDX_W, 4, 0, nf_patch::CT_ORIG_DST, 0), // 24
            insn(LDX_W, 5, 0, nf_patch::CT_REPLY_SRC, 0), // 25
            insn(LDX_W, 6, 0, nf_patch::CT_REPLY_DST, 0), // 26
            insn(LDX_H, 7, 0, nf_patch::CT_ORIG_SPORT, 0), // 27
            insn(LDX_H, 8, 0, nf_patch::CT_ORIG_DPORT, 0), // 28
            insn(LDX_H, 9, 0, nf_patch::CT_REPLY_SPORT, 0), // 29
            insn(LDX_H, 1, 0, nf_patch::CT_REPLY_DPORT, 0), // 30
            insn(LDX_B, 2, 0, nf_patch::CT_PROTO, 0), // 31
            insn(LDX_DW, 3, 1, nf_patch::CTX_STATE, 0), // 32: r3 = ctx->state
            insn(LDX_B, 3, 3, nf_patch::STATE_HOOK, 0), // 33: r3 = state->hook
            insn(MOV64_IMM, 0, 0, 0, 1),              // 34
            insn(0x95, 0, 0, 0, 0),                   // 35
        ]
    }

    fn fields(i: &bpf_insn) -> (u8, u8, u8, i16, i32) {
        (i.code, i.dst_reg(), i.src_reg(), i.off, i.imm)
    }

    #[test]
    fn placeholders_become_offsets_kfunc_calls_and_type_ids() {
        let original = placeholder_program();
        let mut insns = original.clone();
        let mut used = Used::default();
        patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
        used.check().unwrap();
        let want = [
            (LDX_DW, 6, 1, 8, 0),
            (LDX_W, 2, 6, 112, 0),
            (LDX_W, 3, 6, 116, 0),
            (LDX_DW, 7, 6, 200, 0),
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(fields(&insns[i]), *w, "instruction {i}");
        }
        assert_eq!(fields(&insns[7]), (MOV64_IMM, 2, 0, 0, 5_001));
        assert_eq!(fields(&insns[8]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
        assert_eq!(fields(&insns[10]), (MOV32_IMM, 2, 0, 0, 5_001));
        assert_eq!(fields(&insns[11]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
        assert_eq!(fields(&insns[12]), (LDX_DW, 4, 6, 128, 0));
        assert_eq!(fields(&insns[13]), (LDX_DW, 5, 6, 16, 0));
        assert_eq!(fields(&insns[14]), (LDX_W, 5, 5, 224, 0));
        assert_eq!(fields(&insns[15]), (LDX_W, 8, 6, 168, 0));
        assert_eq!(fields(&insns[19]), (MOV64_IMM, 2, 0, 0, 5_003));
        assert_eq!(fields(&insns[20]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
        let want = [
            (LDX_DW, 1, 0, 128, 0),
            (LDX_H, 2, 0, 60, 0),
            (LDX_W, 3, 0, 40, 0),
            (LDX_W, 4, 0, 64, 0),
            (LDX_W, 5, 0, 96, 0),
            (LDX_W, 6, 0, 120, 0),
            (LDX_H, 7, 0, 56, 0),
            (LDX_H, 8, 0, 80, 0),
            (LDX_H, 9, 0, 112, 0),
            (LDX_H, 1, 0, 136, 0),
            (LDX_B, 2, 0, 82, 0),
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(fields(&insns[21 + i]), *w, "instruction {}", 21 + i);
        }
        // Members at offset 0 (both of these) are offsets, not missing members.
        assert_eq!(fields(&insns[32]), (LDX_DW, 3, 1, 0, 0));
        assert_eq!(fields(&insns[33]), (LDX_B, 3, 3, 0, 0));
        for i in [4, 5, 6, 9, 16, 17, 18, 34, 35] {
            assert_eq!(
                fields(&insns[i]),
                fields(&original[i]),
                "instruction {i} changed"
            );
        }
    }

    #[test]
    fn a_missing_optional_member_loads_zero() {
        let mut insns = placeholder_program();
        let mut used = Used::default();
        patch_instructions(&mut insns, &patches(None), &mut used).unwrap();
        used.check().unwrap();
        assert_eq!(fields(&insns[12]), (MOV64_IMM, 4, 0, 0, 0));
    }

    /// A kernel whose vmlinux BTF has no `struct nf_conn` (conntrack as a module): the cast
    /// gets another struct's id, every conntrack load becomes `dst = 0` (status 0: the
    /// programs read the packet), the rest is patched as usual.
    #[test]
    fn without_nf_conn_the_conntrack_loads_read_zero() {
        let mut insns = placeholder_program();
        let mut used = Used::default();
        let p = patches_with(Some(128), None);
        assert!(!p.conntrack);
        patch_instructions(&mut insns, &p, &mut used).unwrap();
        used.check().unwrap();
        assert_eq!(fields(&insns[19]), (MOV64_IMM, 2, 0, 0, 5_001));
        assert_eq!(fields(&insns[20]), (CALL, 0, PSEUDO_KFUNC_CALL, 0, 61_234));
        for (i, dst) in (21..32).zip([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]) {
            assert_eq!(
                fields(&insns[i]),
                (MOV64_IMM, dst, 0, 0, 0),
                "instruction {i}"
            );
        }
        assert_eq!(fields(&insns[12]), (LDX_DW, 4, 6, 128, 0));
    }

    /// The conntrack offsets from this kernel's BTF, where it has `struct nf_conn`: the reply
    /// tuple is one `nf_conntrack_tuple_hash` after the original, both before `status`.
    #[test]
    #[ignore = "root tier: reads the running kernel's BTF"]
    fn conntrack_offsets_from_this_kernel() {
        let btf = Btf::from_sys_fs().expect("the running kernel's BTF");
        let Some(o) = ConnOffsets::from_btf(&btf).unwrap() else {
            // nf_conntrack built as a module: its types are in the module's BTF, not vmlinux's.
            assert!(
                std::path::Path::new("/sys/kernel/btf/nf_conntrack").exists(),
                "no struct nf_conn in vmlinux BTF, and no nf_conntrack module BTF either"
            );
            println!("not applicable: nf_conntrack is a module (its BTF is not vmlinux's)");
            return;
        };
        let stride = btf.struct_size("nf_conntrack_tuple_hash").unwrap();
        assert_eq!(o.reply_src - o.orig_src, stride);
        assert_eq!(o.reply_dst - o.orig_dst, stride);
        // `src` (address, ports, l3num) then `dst` (address first).
        assert!(
            o.orig_src < o.orig_l3num && o.orig_l3num < o.orig_dst,
            "{o:?}"
        );
        assert!(o.reply_dst < o.status, "{o:?}");
        // Each address's ports right after it (`union nf_inet_addr` is 16 bytes), the
        // protocol after the destination port.
        assert_eq!(
            (o.orig_sport, o.orig_dport),
            (o.orig_src + 16, o.orig_dst + 16)
        );
        assert_eq!(o.reply_sport - o.orig_sport, stride);
        assert_eq!(o.reply_dport - o.orig_dport, stride);
        assert_eq!(o.proto, o.orig_dport + 2, "{o:?}");
    }

    #[test]
    fn wrong_or_unknown_placeholders_are_refused() {
        let p = patches(Some(128));
        let refused = |i: bpf_insn| {
            let mut insns = vec![insn(MOV64_IMM, 0, 0, 0, 1), i];
            patch_instructions(&mut insns, &p, &mut Used::default()).unwrap_err()
        };
        // A 4-byte load of the 8-byte `data`.
        let (index, what) = refused(insn(LDX_W, 1, 6, nf_patch::SKB_DATA, 0));
        assert_eq!(index, 1);
        assert!(
            what.contains("sk_buff.data") && what.contains("4-byte"),
            "{what}"
        );
        let (_, what) = refused(insn(LDX_W, 1, 6, nf_patch::LOAD_LAST, 0));
        assert!(what.contains("unknown placeholder offset"), "{what}");
        let (_, what) = refused(insn(STX_W, 6, 1, nf_patch::SKB_MARK, 0));
        assert!(what.contains("store"), "{what}");
        let (_, what) = refused(insn(0x07, 1, 0, 0, i32::from(nf_patch::SKB_LEN)));
        assert!(what.contains("folded"), "{what}");
        let (_, what) = refused(insn(MOV64_IMM, 2, 0, 0, nf_patch::TYPE_LAST));
        assert!(what.contains("unknown type placeholder"), "{what}");
    }

    #[test]
    fn a_placeholder_no_program_holds_is_an_error() {
        let mut insns = placeholder_program();
        // Without the `mark` load.
        insns.remove(15);
        let mut used = Used::default();
        patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
        let err = used.check().unwrap_err();
        assert!(err.to_string().contains("sk_buff.mark"), "{err}");
        let mut insns = placeholder_program();
        insns.retain(|i| {
            i.imm != nf_patch::TYPE_HEAD || (i.code != MOV32_IMM && i.code != MOV64_IMM)
        });
        let mut used = Used::default();
        patch_instructions(&mut insns, &patches(Some(128)), &mut used).unwrap();
        assert!(used.check().unwrap_err().to_string().contains("ipv6hdr"));
    }

    #[test]
    fn reserved_priorities_are_refused_before_the_kernel() {
        let fd = OwnedFd::from(fs::File::open("/dev/null").unwrap());
        let prog = NetfilterProgram {
            fd,
            name: "none".into(),
        };
        for priority in [i32::MIN, i32::MAX] {
            assert!(matches!(
                prog.attach(NFPROTO_IPV4, 0, priority),
                Err(AttachError::ReservedPriority { .. })
            ));
        }
    }

    /// The real kernel object, loaded the way pktrace does: maps by aya, `nf_*` programs here,
    /// attached around the nat priorities in a new namespace; every packet must pass `nf_enter`
    /// once per hook and find its pending entry in `nf_exit` there.
    #[test]
    #[ignore = "root tier: loads pktrace's kernel object"]
    fn the_kernel_object_loads_and_its_brackets_pair_up() {
        let object = crate::attach::object();
        assert!(
            !object.is_empty(),
            "built with AYA_BUILD_SKIP=1: no kernel object"
        );
        if let Some(why) = too_old() {
            println!("not applicable: {why}");
            return;
        }
        let offsets = crate::btf::kernel_offsets_bytes(
            &kernel_offsets(&Btf::from_sys_fs().unwrap()).unwrap(),
        );
        let (mode, wake) = (
            tracer_common::filter::ALL.to_ne_bytes(),
            4096u64.to_ne_bytes(),
        );
        let globals: [(&str, &[u8]); 3] = [
            ("FILTER_MODE", &mode),
            ("WAKE_BYTES", &wake),
            ("OFFSETS", &offsets),
        ];
        let mut loader = aya::EbpfLoader::new();
        for (name, bytes) in globals {
            loader.override_global(name, bytes, true);
        }
        let ebpf = loader.load(object).unwrap();
        let programs = match load_netfilter_programs(object, &globals, &ebpf, &KernelBtf::default())
        {
            Ok((p, _)) => p,
            Err(e) => panic!("{e}"),
        };
        let names: Vec<&str> = programs.iter().map(NetfilterProgram::name).collect();
        assert_eq!(names, ["nf_enter", "nf_exit"]);
        let find = |name: &str| programs.iter().find(|p| p.name() == name).unwrap();
        in_new_netns(|| {
            let mut links = Vec::new();
            for (hook, nat) in [(0, -100), (3, -100), (4, 100), (1, 100)] {
                links.push(
                    find("nf_enter")
                        .attach(NFPROTO_IPV4, hook, nat - 1)
                        .unwrap(),
                );
                links.push(find("nf_exit").attach(NFPROTO_IPV4, hook, nat + 1).unwrap());
            }
            send_udp(7, 64, 0);
        });
        let counters: aya::maps::PerCpuArray<_, u64> =
            aya::maps::PerCpuArray::try_from(ebpf.map("COUNTERS").unwrap()).unwrap();
        let total = |i: u32| counters.get(&i, 0).unwrap().iter().sum::<u64>();
        let (seen, unpaired, unparsed) = (
            total(tracer_common::counter::NAT_SEEN),
            total(tracer_common::counter::NAT_UNPAIRED),
            total(tracer_common::counter::UNPARSED),
        );
        // A hook read wrong (no pending slot of that number) would count as unparsed.
        assert_eq!(
            (seen, unpaired, unparsed),
            (7 * 4, 0, 0),
            "NAT_SEEN, NAT_UNPAIRED, UNPARSED after 7 packets through 4 hooks"
        );
    }
}
