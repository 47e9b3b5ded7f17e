//! clsact filters outlive their process (unlike tcx links), so pktrace tags the filters it
//! attaches with its PID in the filter handle and, at start, removes the filters of pktraces
//! that are gone (SIGKILL, OOM). Filters of live pktraces and of anyone else are left alone.
//!
//! This speaks rtnetlink directly (`RTM_GETTFILTER` dump, `RTM_DELTFILTER`) because aya can only
//! detach filters by program name, which would also remove a live pktrace's filters.
//!
//! # Minimum kernel version
//! Any kernel with clsact (4.5); used where tcx (6.6) is missing.

use std::{ffi::CStr, io, path::Path};

use aya::programs::tc::TcHandle;

/// High bits of a tagged handle's major number: `0x5000 | pid >> 16`, minor `pid & 0xffff`.
const TAG: u32 = 0x5000;
/// Our programs' names, as the kernel stores them on the filter (`TCA_BPF_NAME`).
const OURS: [&str; 2] = ["tc_ingress", "tc_egress"];

const RTM_DELQDISC: u16 = 37;
const RTM_GETQDISC: u16 = 38;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const RTM_GETTFILTER: u16 = 46;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_NAME: u16 = 7;
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `TC_H_CLSACT`, the clsact qdisc's parent, and its handle `ffff:`.
const TC_H_CLSACT: u32 = 0xffff_fff1;
const CLSACT_HANDLE: u32 = 0xffff_0000;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS / TC_H_MIN_EGRESS)`.
pub const PARENT_INGRESS: u32 = 0xffff_fff2;
pub const PARENT_EGRESS: u32 = 0xffff_fff3;
const ETH_P_ALL_BE: u32 = 0x0300;

/// The handle that tags a filter as this process's.
#[must_use]
#[expect(clippy::cast_possible_truncation, reason = "pid < 2^22 (pid_max)")]
pub fn handle_for(pid: u32) -> TcHandle {
    TcHandle::new((TAG | (pid >> 16)) as u16, (pid & 0xffff) as u16)
}

/// The PID a tagged handle names, `None` for handles we did not make.
#[must_use]
pub const fn pid_of(handle: u32) -> Option<u32> {
    let major = handle >> 16;
    if major & 0xf000 != TAG {
        return None;
    }
    Some(((major & 0x0fff) << 16) | (handle & 0xffff))
}

/// A filter found on an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub priority: u16,
    pub handle: u32,
    pub name: String,
}

/// Removes filters of ours whose pktrace is gone from `ifindex` at `parent`; returns how many.
pub fn sweep(ifindex: u32, parent: u32) -> io::Result<usize> {
    let mut removed = 0;
    for f in list(ifindex, parent)? {
        if !OURS.contains(&f.name.as_str()) {
            continue;
        }
        let Some(pid) = pid_of(f.handle) else {
            continue;
        };
        if is_live_pktrace(pid) {
            continue;
        }
        delete(ifindex, parent, &f)?;
        removed += 1;
    }
    Ok(removed)
}

fn is_live_pktrace(pid: u32) -> bool {
    let comm = Path::new("/proc").join(pid.to_string()).join("comm");
    std::fs::read_to_string(comm).is_ok_and(|c| c.trim_end().starts_with("pktrace"))
}

/// The bpf filters on `ifindex` at `parent`.
pub fn list(ifindex: u32, parent: u32) -> io::Result<Vec<Filter>> {
    let sock = Socket::open()?;
    sock.send(
        RTM_GETTFILTER,
        NLM_F_REQUEST | NLM_F_DUMP,
        &tcmsg(ifindex, parent, 0, 0),
    )?;
    let mut out = Vec::new();
    sock.recv_all(|ty, payload| {
        if ty == RTM_NEWTFILTER && payload.len() >= TCMSG_LEN {
            let handle = u32::from_ne_bytes(payload[8..12].try_into().unwrap_or_default());
            let info = u32::from_ne_bytes(payload[16..20].try_into().unwrap_or_default());
            let name = bpf_name(&payload[TCMSG_LEN..]).unwrap_or_default();
            out.push(Filter {
                priority: (info >> 16) as u16,
                handle,
                name,
            });
        }
    })?;
    Ok(out)
}

fn delete(ifindex: u32, parent: u32, f: &Filter) -> io::Result<()> {
    let sock = Socket::open()?;
    let info = (u32::from(f.priority) << 16) | ETH_P_ALL_BE;
    sock.send(
        RTM_DELTFILTER,
        NLM_F_REQUEST | NLM_F_ACK,
        &tcmsg(ifindex, parent, f.handle, info),
    )?;
    sock.recv_all(|_, _| {})
}

/// Where each pktrace records the clsact qdiscs it created, one file per process and network
/// namespace (`clsact-<netns inode>-<pid>`, one ifindex per line), so that the next pktrace can
/// remove those a killed one left, and only those.
pub const RECORD_DIR: &str = "/run/pktrace";

/// clsact qdiscs this process created (or adopted from a pktrace that died); dropping it
/// removes each one that no longer holds any filter (ours are detached first: keep this
/// declared before the `aya::Ebpf` that owns them, so it drops after). A qdisc someone else
/// created, or one with filters, is never removed.
///
/// The list is also kept in a file under [`RECORD_DIR`] (replaced atomically), written *before*
/// each qdisc is created, once [`has_clsact`] said there is none: a SIGKILL at any point leaves
/// no unrecorded qdisc of ours, and a qdisc someone else created is never recorded (if one
/// appears between the check and our create, the create fails and the entry is forgotten).
#[derive(Debug, Default)]
pub struct CreatedQdiscs {
    ifindexes: Vec<u32>,
    /// The interface's name when it was recorded, written next to its ifindex: a later pktrace
    /// adopts an entry only while that ifindex still has that name (a namespace inode, like an
    /// ifindex, can be reused once the old one is gone).
    names: std::collections::HashMap<u32, String>,
}

impl CreatedQdiscs {
    /// Remembers a qdisc this process just created.
    pub fn record(&mut self, ifindex: u32) {
        if !self.ifindexes.contains(&ifindex) {
            self.ifindexes.push(ifindex);
        }
        if let Some(name) = if_name(ifindex) {
            self.names.insert(ifindex, name);
        }
        self.save();
    }

    /// Forgets the qdisc of an interface that is gone (it went with the device), so that no
    /// later pktrace acts on its ifindex.
    pub fn forget(&mut self, ifindex: u32) {
        if !self.ifindexes.contains(&ifindex) {
            return;
        }
        self.ifindexes.retain(|&i| i != ifindex);
        self.names.remove(&ifindex);
        if self.ifindexes.is_empty() {
            if let Some(path) = Self::path() {
                let _ = std::fs::remove_file(path);
            }
        } else {
            self.save();
        }
    }

    /// Takes over the qdiscs recorded by pktraces of this network namespace that are gone: they
    /// are removed at our exit once empty (their filters are swept first). An entry is taken
    /// only while its ifindex still has the recorded name. Records of dead pktraces whose
    /// network namespace no longer exists are deleted (their qdiscs went with it). Returns how
    /// many qdiscs were adopted.
    pub fn adopt_orphans(&mut self) -> usize {
        let Some(netns) = netns_inode() else { return 0 };
        let Ok(dir) = std::fs::read_dir(RECORD_DIR) else {
            return 0;
        };
        let mut live_netns = None;
        let mut adopted = 0;
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let (partial, record) = match name.strip_suffix(".tmp") {
                Some(partial) => (true, partial),
                None => (false, name.as_str()),
            };
            let Some((ns, pid)) = parse_record_name(record) else {
                continue;
            };
            if pid == std::process::id() || is_live_pktrace(pid) {
                continue;
            }
            if ns != netns {
                let live = live_netns.get_or_insert_with(live_net_namespaces);
                if netns_is_gone(ns, live.as_ref()) {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            if partial {
                // A record killed mid-write; the renamed one before it, if any, is complete.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for (ifindex, recorded) in parse_record(&text) {
                if recorded.is_some_and(|n| if_name(ifindex).as_deref() != Some(n)) {
                    continue; // that interface is gone; the ifindex is someone else's now
                }
                if !self.ifindexes.contains(&ifindex) {
                    self.ifindexes.push(ifindex);
                    if let Some(n) = recorded {
                        self.names.insert(ifindex, n.to_owned());
                    }
                    adopted += 1;
                }
            }
            // Ours first, then theirs goes: a SIGKILL in between loses no record.
            self.save();
            let _ = std::fs::remove_file(entry.path());
        }
        adopted
    }

    fn path() -> Option<std::path::PathBuf> {
        let netns = netns_inode()?;
        Some(Path::new(RECORD_DIR).join(format!("clsact-{netns}-{}", std::process::id())))
    }

    fn save(&self) {
        use std::os::unix::fs::DirBuilderExt as _;
        let Some(path) = Self::path() else { return };
        if self.ifindexes.is_empty() {
            return;
        }
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(RECORD_DIR);
        let text: String = self
            .ifindexes
            .iter()
            .map(|i| match self.names.get(i) {
                Some(name) => format!("{i} {name}\n"),
                None => format!("{i}\n"),
            })
            .collect();
        // Written aside, then renamed over: a SIGKILL mid-write never leaves a truncated record.
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
}

/// `clsact-<netns>-<pid>` → (netns, pid).
fn parse_record_name(name: &str) -> Option<(u64, u32)> {
    let (ns, pid) = name.strip_prefix("clsact-")?.split_once('-')?;
    Some((ns.parse().ok()?, pid.parse().ok()?))
}

/// A record's lines: `ifindex name` (or a bare `ifindex`, as older pktraces wrote them).
fn parse_record(text: &str) -> impl Iterator<Item = (u32, Option<&str>)> {
    text.lines().filter_map(|line| {
        let mut words = line.split_whitespace();
        let ifindex = words.next()?.parse().ok()?;
        Some((ifindex, words.next()))
    })
}

/// The name `ifindex` has in this network namespace now.
fn if_name(ifindex: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` is IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the kernel's name was copied into `buf`, NUL-terminated.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The network namespaces that still exist, as far as can be seen from here: those of every
/// process and those kept by a bind mount (`ip netns add`). `None` when /proc or mountinfo
/// cannot be read (then no namespace may be called gone). A process whose namespace even root
/// may not see (one of a more privileged user namespace, such as a sandbox's init) is skipped:
/// a record wrongly deleted leaves at worst an empty clsact qdisc, which changes no packet,
/// and a record is only ever acted on while its interface still has the recorded name.
fn live_net_namespaces() -> Option<std::collections::HashSet<u64>> {
    use std::os::unix::fs::MetadataExt as _;
    let mut live = std::collections::HashSet::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // An error: exited meanwhile, or not ours to see.
        if let Ok(m) = std::fs::metadata(entry.path().join("ns/net")) {
            live.insert(m.ino());
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    live.extend(nsfs_net_mounts(&mounts));
    Some(live)
}

/// Network namespace inodes bind-mounted somewhere, from mountinfo's `root` field `net:[N]`.
fn nsfs_net_mounts(mountinfo: &str) -> impl Iterator<Item = u64> + '_ {
    mountinfo.lines().filter_map(|line| {
        let root = line.split_whitespace().nth(3)?;
        root.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
    })
}

/// Whether the namespace `ns` is surely gone: no process is in it and no mount keeps it.
fn netns_is_gone(ns: u64, live: Option<&std::collections::HashSet<u64>>) -> bool {
    live.is_some_and(|live| !live.contains(&ns))
}

/// The inode of this process's network namespace (ifindexes are per namespace).
fn netns_inode() -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

impl Drop for CreatedQdiscs {
    fn drop(&mut self) {
        for &ifindex in &self.ifindexes {
            let empty = [PARENT_INGRESS, PARENT_EGRESS]
                .iter()
                .all(|&p| list(ifindex, p).is_ok_and(|f| f.is_empty()));
            if empty {
                let _ = delete_qdisc(ifindex);
            }
        }
        if let Some(path) = Self::path() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether `ifindex` has a clsact (or ingress) qdisc: a non-dump `RTM_GETQDISC` for handle
/// `ffff:` fails (ENOENT without an ingress queue, EINVAL when the queue holds only the noop
/// qdisc) unless one is there.
pub fn has_clsact(ifindex: u32) -> io::Result<bool> {
    let sock = Socket::open()?;
    sock.send(
        RTM_GETQDISC,
        NLM_F_REQUEST | NLM_F_ACK,
        &tcmsg(ifindex, TC_H_CLSACT, CLSACT_HANDLE, 0),
    )?;
    match sock.recv_all(|_, _| {}) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => Ok(false),
        Err(e) => Err(e),
    }
}

fn delete_qdisc(ifindex: u32) -> io::Result<()> {
    let sock = Socket::open()?;
    sock.send(
        RTM_DELQDISC,
        NLM_F_REQUEST | NLM_F_ACK,
        &tcmsg(ifindex, TC_H_CLSACT, CLSACT_HANDLE, 0),
    )?;
    sock.recv_all(|_, _| {})
}

const TCMSG_LEN: usize = 20;

/// `struct tcmsg` (include/uapi/linux/rtnetlink.h, v6.1).
fn tcmsg(ifindex: u32, parent: u32, handle: u32, info: u32) -> [u8; TCMSG_LEN] {
    let mut m = [0u8; TCMSG_LEN];
    // tcm_family = AF_UNSPEC, then padding.
    m[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    m[8..12].copy_from_slice(&handle.to_ne_bytes());
    m[12..16].copy_from_slice(&parent.to_ne_bytes());
    m[16..20].copy_from_slice(&info.to_ne_bytes());
    m
}

/// Walks netlink attributes (`struct nlattr`: u16 len, u16 type, payload padded to 4).
fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let ty = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return None;
        }
        let payload = &buf[4..len];
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
        Some((ty, payload))
    })
}

fn bpf_name(attributes: &[u8]) -> Option<String> {
    let (_, options) = attrs(attributes).find(|(ty, _)| *ty == TCA_OPTIONS)?;
    let (_, name) = attrs(options).find(|(ty, _)| *ty == TCA_BPF_NAME)?;
    let name = CStr::from_bytes_until_nul(name).ok()?;
    Some(name.to_string_lossy().into_owned())
}

/// A `NETLINK_ROUTE` socket.
struct Socket(std::os::fd::OwnedFd);

impl Socket {
    fn open() -> io::Result<Self> {
        use std::os::fd::FromRawFd as _;
        // SAFETY: plain socket(2); the fd is owned from here on.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(Self(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    #[expect(clippy::cast_possible_truncation, reason = "a small netlink message")]
    fn send(&self, ty: u16, flags: u16, body: &[u8]) -> io::Result<()> {
        use std::os::fd::AsRawFd as _;
        let len = 16 + body.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        msg.extend_from_slice(body);
        // SAFETY: sends `msg.len()` initialised bytes.
        let n = unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Reads replies until DONE or an ACK/error; hands other messages to `f`.
    fn recv_all(&self, mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        use std::os::fd::AsRawFd as _;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: receives into a buffer of `buf.len()` bytes.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut rest = &buf[..n.cast_unsigned()];
            while rest.len() >= 16 {
                let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
                let ty = u16::from_ne_bytes([rest[4], rest[5]]);
                if len < 16 || len > rest.len() {
                    return Err(io::Error::other("malformed netlink reply"));
                }
                let payload = &rest[16..len];
                match ty {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let code = i32::from_ne_bytes(
                            payload
                                .get(0..4)
                                .and_then(|b| b.try_into().ok())
                                .unwrap_or_default(),
                        );
                        return if code == 0 {
                            Ok(())
                        } else {
                            Err(io::Error::from_raw_os_error(-code))
                        };
                    }
                    _ => f(ty, payload),
                }
                rest = &rest[len.next_multiple_of(4).min(rest.len())..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_parse_and_others_do_not() {
        assert_eq!(
            parse_record_name("clsact-4026531840-4242"),
            Some((4_026_531_840, 4242))
        );
        assert_eq!(parse_record_name("clsact-x-1"), None);
        assert_eq!(parse_record_name("other-1-2"), None);
        assert_eq!(parse_record_name("clsact-1"), None);
    }

    #[test]
    fn record_lines_carry_ifindex_and_name_old_ones_only_the_ifindex() {
        let got: Vec<_> = parse_record("7 azv1a2b\n12\nx y\n\n9 eth0 extra\n").collect();
        assert_eq!(got, [(7, Some("azv1a2b")), (12, None), (9, Some("eth0"))]);
    }

    #[test]
    fn bind_mounted_net_namespaces_are_read_from_mountinfo() {
        let mountinfo = "\
25 30 0:4 / /proc rw,nosuid - proc proc rw
612 28 0:4 net:[4026532177] /run/netns/pkt-node rw - nsfs nsfs rw
613 28 0:4 mnt:[4026532180] /run/x rw - nsfs nsfs rw
614 28 0:4 net:[4026532300] /run/netns/pkt-out rw - nsfs nsfs rw
";
        let got: Vec<_> = nsfs_net_mounts(mountinfo).collect();
        assert_eq!(got, [4_026_532_177, 4_026_532_300]);
    }

    #[test]
    fn a_namespace_is_gone_only_when_proc_was_read_and_nothing_holds_it() {
        let live = Some([1, 2].into_iter().collect());
        assert!(netns_is_gone(3, live.as_ref()));
        assert!(!netns_is_gone(2, live.as_ref()));
        assert!(!netns_is_gone(3, None));
    }

    #[test]
    fn this_namespace_is_live() {
        let me = netns_inode().expect("/proc/self/ns/net");
        let live = live_net_namespaces().expect("/proc and mountinfo are readable");
        assert!(live.contains(&me));
    }

    #[test]
    fn handles_round_trip_and_foreign_ones_are_not_ours() {
        for pid in [1, 4242, 65_535, 65_536, 4_194_304] {
            let h: u32 = handle_for(pid).into();
            assert_eq!(pid_of(h), Some(pid), "{pid}");
        }
        assert_eq!(pid_of(0), None);
        assert_eq!(pid_of(0x0001_0000), None);
        assert_eq!(pid_of(0xffff_fff2), None);
    }

    #[test]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "test attributes of a few bytes"
    )]
    fn attributes_are_walked_with_padding_and_bad_lengths_stop() {
        // TCA_KIND "bpf" (len 8), TCA_OPTIONS { TCA_BPF_NAME "tc_egress" }.
        let mut buf = vec![8, 0, 1, 0, b'b', b'p', b'f', 0];
        let name = b"tc_egress\0";
        let inner_len = 4 + name.len();
        let outer_len = 4 + inner_len.next_multiple_of(4);
        buf.extend_from_slice(&(outer_len as u16).to_ne_bytes());
        buf.extend_from_slice(&TCA_OPTIONS.to_ne_bytes());
        buf.extend_from_slice(&(inner_len as u16).to_ne_bytes());
        buf.extend_from_slice(&TCA_BPF_NAME.to_ne_bytes());
        buf.extend_from_slice(name);
        buf.resize(buf.len().next_multiple_of(4), 0);
        assert_eq!(bpf_name(&buf).as_deref(), Some("tc_egress"));
        assert_eq!(bpf_name(&[0xff, 0xff, 2, 0]), None);
        assert_eq!(bpf_name(&[]), None);
    }
}
