//! The floor of the per-hook cost: programs that return at once (`r0 = verdict; exit`),
//! attached by the bench itself on the hook types pktrace uses (tcx ingress and egress on the
//! interfaces pktrace attaches to, and the four IPv4 netfilter hooks of its NAT brackets) in
//! the bench node, and a raw tracepoint on `kfree_skb` (the host's: tracepoints have no
//! namespace) beside pktrace's drop program, and measured with the same BPF run-time statistics in the same streams.
//! What the statistics give such a program is their own clock reads and the call, not work:
//! the part of every pktrace program's figure that no change to pktrace's code can remove.
//!
//! Independent of the pktrace binary measured (loaded from two instructions here), so a
//! before/after comparison with `PKTRACE_BIN` sees the same floor.

use std::{
    collections::BTreeSet,
    ffi::CStr,
    fs,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{Context as _, Result, bail};

use super::net::{INTERFACES, NODE_NS};

/// The floor's program names (as `bpftool prog show` and the per-hook table give them).
pub const TC_NAME: &str = "empty_tc";
pub const NF_NAME: &str = "empty_nf";
pub const DROP_NAME: &str = "empty_drop";

/// bpf(2) commands, program types and attach types (include/uapi/linux/bpf.h, v6.6).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_NETFILTER: u32 = 32;
const BPF_NETFILTER: u32 = 45;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;
/// `NFPROTO_IPV4` and the hooks pktrace brackets (`NF_INET_*`).
const NFPROTO_IPV4: u32 = 2;
const NF_HOOKS: [u32; 4] = [0, 1, 3, 4];
/// Where on each hook: between conntrack (-200) and the nat table (-100 / 100); the position
/// does not change what an empty program costs.
const NF_PRIORITY: i32 = -150;
/// `TC_ACT_UNSPEC` (tcx: next) and `NF_ACCEPT`.
const TC_ACT_UNSPEC: i32 = -1;
const NF_ACCEPT: i32 = 1;

/// The empty programs and their links, detached when dropped.
pub struct Floor {
    /// Program ids, for [`super::bpf::prog_runs`].
    pub prog_ids: BTreeSet<u32>,
    _links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
}

impl Floor {
    /// Loads and attaches the empty programs in the bench node. Kernels without tcx or
    /// netfilter links (< 6.6) get an error; the caller measures without the floor then.
    /// `nf_per_hook` links of the empty netfilter program on each hook (pktrace has two).
    pub fn attach(nf_per_hook: usize) -> Result<Self> {
        std::thread::scope(|s| s.spawn(move || attach_in_node(nf_per_hook)).join())
            .map_err(|_| anyhow::anyhow!("the floor's attach thread panicked"))?
    }

    /// [`Floor::attach`] with one netfilter link per hook, or none (said on stderr): the
    /// floor, kept attached while it lives, and its program ids (empty without one).
    pub fn attach_or_none() -> (Option<Self>, BTreeSet<u32>) {
        let floor = Self::attach(1)
            .inspect_err(|err| eprintln!("bench: no empty-program floor: {err:#}"))
            .ok();
        let ids = floor
            .as_ref()
            .map(|f| f.prog_ids.clone())
            .unwrap_or_default();
        (floor, ids)
    }
}

/// Runs in a thread of its own, which moves into the node's network namespace (only this
/// thread's: the links keep their namespace after it ends).
fn attach_in_node(nf_per_hook: usize) -> Result<Floor> {
    pktrace_lab::netns::enter_on_this_thread(NODE_NS)?;
    let tc = prog_load(BPF_PROG_TYPE_SCHED_CLS, 0, TC_ACT_UNSPEC, TC_NAME)?;
    let nf = prog_load(BPF_PROG_TYPE_NETFILTER, BPF_NETFILTER, NF_ACCEPT, NF_NAME)?;
    let mut links = Vec::new();
    let ifindexes = interfaces()?;
    if ifindexes.is_empty() {
        bail!("no interface of {NODE_NS} matches {INTERFACES}");
    }
    for ifindex in ifindexes {
        for attach_type in [BPF_TCX_INGRESS, BPF_TCX_EGRESS] {
            links.push(link_create(&tc, ifindex, attach_type, [0; 4]).context("tcx link")?);
        }
    }
    for hook in NF_HOOKS {
        // One priority each: the kernel refuses two BPF links at one priority of a hook.
        for i in 0..nf_per_hook {
            let priority = NF_PRIORITY + i32::try_from(i).context("too many links")?;
            #[expect(
                clippy::cast_sign_loss,
                reason = "the kernel reads the priority as s32"
            )]
            let nf_args = [NFPROTO_IPV4, hook, priority as u32, 0];
            links.push(link_create(&nf, 0, BPF_NETFILTER, nf_args).context("netfilter link")?);
        }
    }
    let drop = prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, 0, 0, DROP_NAME)?;
    links.push(raw_tracepoint_open(&drop, c"kfree_skb").context("kfree_skb raw tracepoint")?);
    let prog_ids = [&tc, &nf, &drop]
        .into_iter()
        .map(prog_id)
        .collect::<Result<BTreeSet<u32>>>()?;
    Ok(Floor {
        prog_ids,
        _links: links,
        _progs: vec![tc, nf, drop],
    })
}

/// The ifindexes of this namespace's interfaces that pktrace's `--interfaces` list names
/// (names, or prefixes ending in `*`).
fn interfaces() -> Result<Vec<u32>> {
    let patterns: Vec<&str> = INTERFACES.split(',').collect();
    let matches = |name: &str| {
        patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *p,
        })
    };
    // SAFETY: if_nameindex returns a list ending with a zero entry, freed below.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        bail!("if_nameindex: {}", std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: within the list, which ends with an entry whose index is 0.
        let entry = unsafe { &*list.add(i) };
        if entry.if_index == 0 {
            break;
        }
        // SAFETY: a NUL-terminated name from the kernel.
        let name = unsafe { CStr::from_ptr(entry.if_name) }.to_string_lossy();
        if matches(&name) {
            out.push(entry.if_index);
        }
        i += 1;
    }
    // SAFETY: the list if_nameindex returned, freed once.
    unsafe { libc::if_freenameindex(list) };
    Ok(out)
}

fn sys_bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> Result<OwnedFd> {
    // SAFETY: bpf(2) reads at most `size_of_val(attr)` bytes of a valid, zero-padded buffer.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) };
    if fd < 0 {
        bail!("bpf({cmd}): {}", std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).context("fd out of range")?;
    // SAFETY: the kernel just returned this fd; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Writes `value` at byte `offset` of a `bpf_attr`.
fn put(attr: &mut [u8; 128], offset: usize, value: &[u8]) {
    attr[offset..offset + value.len()].copy_from_slice(value);
}

/// Loads `r0 = ret; exit`.
fn prog_load(prog_type: u32, expected_attach: u32, ret: i32, name: &str) -> Result<OwnedFd> {
    // BPF_ALU64 | BPF_MOV | BPF_K (0xb7) into r0, then BPF_JMP | BPF_EXIT (0x95).
    #[expect(clippy::cast_sign_loss, reason = "the immediate's bits")]
    let insns: [u64; 2] = [0xb7 | (u64::from(ret as u32) << 32), 0x95];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    // struct bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, …, prog_name at
    // 48, expected_attach_type at 68.
    put(&mut attr, 0, &prog_type.to_ne_bytes());
    put(&mut attr, 4, &2u32.to_ne_bytes());
    put(&mut attr, 8, &(insns.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 16, &(license.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 48, name.as_bytes());
    put(&mut attr, 68, &expected_attach.to_ne_bytes());
    sys_bpf(BPF_PROG_LOAD, &mut attr).with_context(|| format!("loading {name}"))
}

/// `BPF_LINK_CREATE`: `prog_fd`, `target_ifindex`, `attach_type`, flags, then the per-type union
/// at 16 (netfilter: pf, hooknum, priority, flags; tcx: zeros = append).
fn link_create(prog: &OwnedFd, target: u32, attach_type: u32, union: [u32; 4]) -> Result<OwnedFd> {
    let mut attr = [0u8; 128];
    #[expect(clippy::cast_sign_loss, reason = "a valid fd is non-negative")]
    put(&mut attr, 0, &(prog.as_raw_fd() as u32).to_ne_bytes());
    put(&mut attr, 4, &target.to_ne_bytes());
    put(&mut attr, 8, &attach_type.to_ne_bytes());
    for (i, v) in union.iter().enumerate() {
        put(&mut attr, 16 + 4 * i, &v.to_ne_bytes());
    }
    sys_bpf(BPF_LINK_CREATE, &mut attr)
}

/// `BPF_RAW_TRACEPOINT_OPEN`: the tracepoint's name at 0, `prog_fd` at 8.
fn raw_tracepoint_open(prog: &OwnedFd, name: &CStr) -> Result<OwnedFd> {
    let mut attr = [0u8; 128];
    put(&mut attr, 0, &(name.as_ptr() as u64).to_ne_bytes());
    #[expect(clippy::cast_sign_loss, reason = "a valid fd is non-negative")]
    put(&mut attr, 8, &(prog.as_raw_fd() as u32).to_ne_bytes());
    sys_bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// A program's id, from this process's fdinfo.
fn prog_id(fd: &OwnedFd) -> Result<u32> {
    let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("prog_id:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no prog_id in {path}"))
}
