//! Loading pktrace's kernel object: its maps and load-time globals ([`Globals`], [`load`]),
//! the in-kernel filter's tracked addresses ([`track_addrs`], [`untrack_addrs`]), and what
//! every attaching module shares ([`object`](fn@object), [`side_by_side`],
//! [`verifier_reason`]). The programs are attached by `crate::interfaces` (tc), `crate::nat`
//! (the NAT hooks) and `crate::drops` (`skb:kfree_skb`). What is attached lives as long as the loaded object
//! (`aya::Ebpf`, which owns the tc links and filters), the NAT attachment
//! (`crate::nat::NatAttachment`) and the record of the clsact qdiscs pktrace created
//! (`interfaces::clsact::CreatedQdiscs`): dropping them detaches it (tcx and netfilter links
//! also die with the process, even by SIGKILL).

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array as BpfArray, HashMap as BpfHashMap},
};
use tracer_common::{
    AddrKey, AddrSetV4, ExprFilter, FAMILY_IPV4, FAMILY_IPV6, KernelOffsets, filter,
};

use crate::config::Knobs;

/// The kernel object built by build.rs from tracer-ebpf, embedded so that the binary is the only
/// file to copy to a node.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

/// Ring-buffer fill (bytes) at which the kernel wakes the reader; below it the collector drains
/// on its timer.
pub const WAKE_BYTES: u64 = 256 << 10;

/// Failures to load the kernel object.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "this pktrace was built without its kernel programs (AYA_BUILD_SKIP=1); rebuild without it"
    )]
    NoObject,
    #[error(
        "not allowed to load eBPF programs: run as root (sudo) or with CAP_BPF, CAP_NET_ADMIN \
         and CAP_PERFMON"
    )]
    Permission(#[source] aya::EbpfError),
    #[error("loading the eBPF object failed")]
    Ebpf(#[source] aya::EbpfError),
    #[error("map {0} is missing from the eBPF object")]
    MissingMap(&'static str),
    #[error("seeding the tracked addresses failed")]
    Seed(#[source] aya::maps::MapError),
}

/// Values patched into the object's globals before verification.
#[derive(Clone, Copy, Debug)]
pub struct Globals {
    /// `tracer_common::filter` mode.
    pub filter_mode: u32,
    /// Kernel structure offsets for the NAT programs.
    pub offsets: KernelOffsets,
    pub wake_bytes: u64,
    /// The filter expression's IP versions and protocols (`ExprFilter::ANY` without one).
    pub expr_filter: ExprFilter,
    /// `-w`: bytes of each traced frame the tc programs copy (`--snaplen`); 0 without `-w`.
    pub snaplen: u32,
    /// 1 when the drop program names its sites itself (the kernel has `bpf_snprintf`,
    /// [`crate::drops::attach::kernel_names_sites`]); 0 leaves that code dead.
    pub site_names: u32,
    /// The fill (bytes) at which a CPU writes the records it staged to the ring as one batch
    /// (`tracer_common::batch`); 0, the default, stages none. Only for a session that has
    /// CPUs flush what they left staged ([`crate::collect::flush`]).
    pub batch_bytes: u32,
}

impl Globals {
    #[must_use]
    pub fn new(trace_all: bool, offsets: KernelOffsets) -> Self {
        let filter_mode = if trace_all {
            filter::ALL
        } else {
            filter::TRACKED
        };
        Self {
            filter_mode,
            offsets,
            wake_bytes: WAKE_BYTES,
            expr_filter: ExprFilter::ANY,
            snaplen: 0,
            site_names: 0,
            batch_bytes: 0,
        }
    }

    /// The same globals with the filter expression's kernel part.
    #[must_use]
    pub const fn with_expr(self, expr_filter: ExprFilter) -> Self {
        Self {
            expr_filter,
            ..self
        }
    }

    /// The globals as (symbol, bytes), for loaders other than aya's.
    #[must_use]
    pub fn as_bytes(&self) -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("FILTER_MODE", self.filter_mode.to_ne_bytes().to_vec()),
            ("WAKE_BYTES", self.wake_bytes.to_ne_bytes().to_vec()),
            ("EXPR_FILTER", self.expr_filter.to_ne_bytes().to_vec()),
            ("SNAPLEN", self.snaplen.to_ne_bytes().to_vec()),
            ("SITE_NAMES", self.site_names.to_ne_bytes().to_vec()),
            ("BATCH_BYTES", self.batch_bytes.to_ne_bytes().to_vec()),
            (
                "OFFSETS",
                crate::kernel::btf::kernel_offsets_bytes(&self.offsets).to_vec(),
            ),
        ]
    }
}

/// The embedded kernel object.
#[must_use]
pub fn object() -> &'static [u8] {
    OBJECT
}

/// Loads the object: creates its maps and patches its globals (programs are loaded when they
/// are attached). `knobs` may make the ring buffer and the followed-flows table smaller or
/// larger than the object's (tests that overrun them on purpose).
pub fn load(globals: &Globals, knobs: &Knobs) -> Result<Ebpf, LoadError> {
    if OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    let mut loader = EbpfLoader::new();
    // aya reads and parses the kernel's BTF (tens of milliseconds) only for CO-RE relocations;
    // an object without any is loaded without it.
    if !has_btf_relocations(OBJECT) {
        loader.btf(None);
    }
    loader
        .override_global("FILTER_MODE", &globals.filter_mode, true)
        .override_global("WAKE_BYTES", &globals.wake_bytes, true)
        .override_global("EXPR_FILTER", &globals.expr_filter, true)
        .override_global("SNAPLEN", &globals.snaplen, true)
        .override_global("SITE_NAMES", &globals.site_names, true)
        .override_global("BATCH_BYTES", &globals.batch_bytes, true)
        .override_global("OFFSETS", &globals.offsets, true);
    if let Some(bytes) = knobs.ring_bytes {
        loader.map_max_entries("EVENTS", bytes);
    }
    if let Some(entries) = knobs.flow_table {
        loader.map_max_entries("FOLLOWED_FLOWS", entries);
    }
    loader.load(OBJECT).map_err(|e| {
        if is_permission(&e) {
            LoadError::Permission(e)
        } else {
            LoadError::Ebpf(e)
        }
    })
}

/// `load` of every item, each on a thread of its own, in the items' order (a panic in one is
/// raised again here): program loads side by side, since the verifier is most of pktrace's
/// start-up and privileged loads do not wait for one another.
pub(crate) fn side_by_side<T: Send, R: Send>(
    items: impl IntoIterator<Item = T>,
    load: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let load = &load;
    std::thread::scope(|s| {
        let threads: Vec<_> = items
            .into_iter()
            .map(|item| s.spawn(move || load(item)))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Whether the object holds CO-RE relocations (then aya needs the kernel's BTF); true when it
/// cannot be parsed (aya then says why).
fn has_btf_relocations(object: &[u8]) -> bool {
    aya_obj::Object::parse(object).map_or(true, |o| o.has_btf_relocations())
}

/// Whether a syscall under `e` failed with `EPERM` or `EACCES` (the kernel's "not allowed"):
/// the first `io::Error` in its chain of sources decides.
fn is_permission(e: &aya::EbpfError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(io.raw_os_error(), Some(libc::EPERM | libc::EACCES));
        }
        source = err.source();
    }
    false
}

/// Where a verifier log says why it rejected the program: its last non-empty line that is not
/// one of the statistics the verifier appends (`processed N insns …`, `verification time …`,
/// `stack depth …`; kernel/bpf/verifier.c `print_verification_stats`, v6.1).
#[must_use]
pub fn verifier_reason(log: &str) -> &str {
    let stats = ["processed ", "verification time ", "stack depth "];
    let mut lines = log.lines().map(str::trim).filter(|l| !l.is_empty());
    let last = lines.clone().next_back().unwrap_or("");
    lines
        .rfind(|l| !stats.iter().any(|s| l.starts_with(s)))
        .unwrap_or(last)
}

/// The in-kernel filter's address map (`TRACKED_ADDRS`).
fn tracked_addrs_map(
    ebpf: &mut Ebpf,
) -> Result<BpfHashMap<&mut aya::maps::MapData, AddrKey, u32>, LoadError> {
    let map = ebpf
        .map_mut("TRACKED_ADDRS")
        .ok_or(LoadError::MissingMap("TRACKED_ADDRS"))?;
    BpfHashMap::try_from(map).map_err(LoadError::Seed)
}

/// Puts the traced pod's addresses into the in-kernel filter.
pub fn track_addrs(ebpf: &mut Ebpf, addrs: &[std::net::IpAddr]) -> Result<(), LoadError> {
    let mut map = tracked_addrs_map(ebpf)?;
    for addr in addrs {
        map.insert(addr_key(*addr), 1, 0).map_err(LoadError::Seed)?;
    }
    sync_v4_set(ebpf)
}

/// Rewrites the kernel's IPv4 fast filter (`TRACKED_V4`, see [`AddrSetV4`]) from
/// `TRACKED_ADDRS`, in three writes that a program reading concurrently never sees mixed:
/// "ask the map" with the old addresses, the new addresses still saying so, then "exact".
fn sync_v4_set(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    let map = ebpf
        .map("TRACKED_ADDRS")
        .ok_or(LoadError::MissingMap("TRACKED_ADDRS"))?;
    let addrs: BpfHashMap<_, AddrKey, u32> = BpfHashMap::try_from(map).map_err(LoadError::Seed)?;
    let mut v4: Vec<[u8; 4]> = Vec::new();
    for key in addrs.keys() {
        let key = key.map_err(LoadError::Seed)?;
        if key.family == FAMILY_IPV4 {
            v4.push([key.addr[0], key.addr[1], key.addr[2], key.addr[3]]);
        }
    }
    v4.sort_unstable();
    let new = AddrSetV4::of(&v4);
    let map = ebpf
        .map_mut("TRACKED_V4")
        .ok_or(LoadError::MissingMap("TRACKED_V4"))?;
    let mut set: BpfArray<_, AddrSetV4> = BpfArray::try_from(map).map_err(LoadError::Seed)?;
    let old = set.get(&0, 0).map_err(LoadError::Seed)?;
    if old == new {
        return Ok(());
    }
    set.set(0, AddrSetV4 { exact: 0, ..old }, 0)
        .map_err(LoadError::Seed)?;
    set.set(0, AddrSetV4 { exact: 0, ..new }, 0)
        .map_err(LoadError::Seed)?;
    if new.exact == 1 {
        set.set(0, new, 0).map_err(LoadError::Seed)?;
    }
    Ok(())
}

/// The filter's key for an address.
#[must_use]
pub fn addr_key(addr: std::net::IpAddr) -> AddrKey {
    let mut key = AddrKey::default();
    match addr {
        std::net::IpAddr::V4(a) => {
            key.addr[..4].copy_from_slice(&a.octets());
            key.family = FAMILY_IPV4;
        }
        std::net::IpAddr::V6(a) => {
            key.addr = a.octets();
            key.family = FAMILY_IPV6;
        }
    }
    key
}

/// Takes addresses out of the in-kernel filter (a followed pod that moved to another IP).
/// Flows already tracked stay tracked until the LRU ages them out.
pub fn untrack_addrs(ebpf: &mut Ebpf, addrs: &[std::net::IpAddr]) -> Result<(), LoadError> {
    let mut map = tracked_addrs_map(ebpf)?;
    for addr in addrs {
        // Absent already is as good as removed.
        let _ = map.remove(&addr_key(*addr));
    }
    sync_v4_set(ebpf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_is_told_by_the_errno_under_the_error() {
        let map = |errno| {
            aya::EbpfError::MapError(aya::maps::MapError::CreateError {
                name: "EVENTS".into(),
                io_error: std::io::Error::from_raw_os_error(errno),
            })
        };
        assert!(is_permission(&map(libc::EPERM)));
        assert!(is_permission(&map(libc::EACCES)));
        assert!(!is_permission(&map(libc::EINVAL)));
        let program = aya::EbpfError::ProgramError(aya::programs::ProgramError::SyscallError(
            aya::sys::SyscallError {
                call: "bpf_prog_load",
                io_error: std::io::Error::from_raw_os_error(libc::EPERM),
            },
        ));
        assert!(is_permission(&program));
        assert!(!is_permission(&aya::EbpfError::NoBTF));
    }

    #[test]
    fn the_verifier_reason_is_the_line_before_its_statistics() {
        // Debian 6.1 booted with `lockdown=confidentiality`, nat_kprobe_enter.
        let log = "44: (85) call bpf_probe_read#4\nunknown func bpf_probe_read#4\n\
                   verification time 1711 usec\nstack depth 40+0+0\n\
                   processed 42 insns (limit 1000000) max_states_per_insn 0 total_states 1\n\n";
        assert_eq!(verifier_reason(log), "unknown func bpf_probe_read#4");
        assert_eq!(
            verifier_reason("R1 invalid mem access 'scalar'\n"),
            "R1 invalid mem access 'scalar'"
        );
        // Nothing but statistics: those, rather than nothing.
        assert_eq!(verifier_reason("processed 1 insns\n"), "processed 1 insns");
        assert_eq!(verifier_reason(""), "");
    }

    /// Start-up skips aya's parse of the kernel's BTF only for an object without CO-RE
    /// relocations: this one (a relocation added later is still applied, at that cost).
    #[test]
    #[cfg_attr(
        no_ebpf_object,
        ignore = "built with AYA_BUILD_SKIP=1: no kernel object"
    )]
    fn the_object_needs_no_kernel_btf_to_load() {
        assert!(!OBJECT.is_empty(), "built without the kernel object");
        assert!(!has_btf_relocations(OBJECT));
        assert!(has_btf_relocations(b"not an ELF object"));
    }
}
