//! Raw `bpf(2)` calls that aya 0.14 does not offer: loading a program of a type aya has no
//! loader for (BPF netfilter) or against a kernel module's BTF (fentry/fexit), creating their
//! links, loading an object's BTF for them, and finding a module's BTF object.
//!
//! Every `unsafe` block of the loader lives here. The attribute layouts are aya-obj's generated
//! `union bpf_attr` (include/uapi/linux/bpf.h, v6.12), zeroed before use so that fields a command
//! does not use are zero, as the kernel requires (`CHECK_ATTR`, kernel/bpf/syscall.c, v6.4).

use std::{
    ffi::CStr,
    io, mem,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type};

/// Times `BPF_PROG_LOAD` is retried on `EAGAIN` (libbpf does the same, `sys_bpf_prog_load`).
const PROG_LOAD_ATTEMPTS: usize = 5;

/// Length of a kernel object name including its NUL (`BPF_OBJ_NAME_LEN`).
pub const OBJ_NAME_LEN: usize = 16;

/// The object BTF and per-function records passed with a program (`prog_btf_fd`,
/// `func_info`, `line_info` of `BPF_PROG_LOAD`). Record counts are the slice lengths divided by
/// the record sizes, so the kernel never reads past the slices; a record size of 0 leaves that
/// kind of record out.
#[derive(Clone, Copy, Debug)]
pub struct ProgBtf<'a> {
    pub fd: BorrowedFd<'a>,
    pub func_info: &'a [u8],
    pub func_info_rec_size: u32,
    pub line_info: &'a [u8],
    pub line_info_rec_size: u32,
}

/// How many whole records of `rec_size` bytes `buf` holds.
fn record_count(buf: &[u8], rec_size: u32) -> u32 {
    u32::try_from(buf.len() / rec_size.max(1) as usize).unwrap_or(0)
}

/// What `BPF_PROG_LOAD` needs for one program.
#[derive(Clone, Copy, Debug)]
pub struct ProgLoad<'a> {
    pub prog_type: bpf_prog_type,
    pub expected_attach_type: bpf_attach_type,
    /// Truncated to 15 bytes; the kernel accepts only `[A-Za-z0-9_.]`.
    pub name: &'a str,
    pub insns: &'a [bpf_insn],
    pub license: &'a CStr,
    pub btf: Option<ProgBtf<'a>>,
    /// Tracing programs (fentry/fexit): the BTF type id of the kernel function to attach to, 0
    /// for other program types.
    pub attach_btf_id: u32,
    /// Tracing programs: the kernel BTF object holding `attach_btf_id` when it is a module's
    /// (`None`: vmlinux).
    pub attach_btf_obj_fd: Option<BorrowedFd<'a>>,
}

/// The one `bpf(2)` entry point: runs `cmd` on a fully initialised `attr`.
fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, initialised `bpf_attr` of the size passed; the pointers stored
    // in it by the callers below point to buffers that outlive this call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            std::ptr::from_mut(attr),
            size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Runs a command whose success value is a new file descriptor.
fn fd_sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let ret = sys_bpf(cmd, attr)?;
    let fd = i32::try_from(ret).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the commands passed here return a newly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A zeroed `bpf_attr`.
fn zeroed_attr() -> bpf_attr {
    // SAFETY: `bpf_attr` is a C union of integers and integer arrays: all-zero is valid.
    unsafe { mem::zeroed() }
}

/// Copies `name` (at most 15 bytes) into a NUL-terminated kernel object name.
fn object_name(name: &str) -> [libc::c_char; OBJ_NAME_LEN] {
    let mut out = [0; OBJ_NAME_LEN];
    for (dst, src) in out.iter_mut().zip(name.bytes().take(OBJ_NAME_LEN - 1)) {
        // `c_char` is i8 on x86_64, u8 on aarch64.
        *dst = libc::c_char::from_ne_bytes([src]);
    }
    out
}

/// `BPF_PROG_LOAD`. `log` receives the verifier log when non-empty (at `log_level`).
pub fn prog_load(req: &ProgLoad<'_>, log: &mut [u8], log_level: u32) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_PROG_LOAD` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.__bindgen_anon_3 };
    u.prog_type = req.prog_type as u32;
    u.expected_attach_type = req.expected_attach_type as u32;
    u.prog_name = object_name(req.name);
    u.insns = req.insns.as_ptr() as u64;
    u.insn_cnt =
        u32::try_from(req.insns.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    u.license = req.license.as_ptr() as u64;
    u.attach_btf_id = req.attach_btf_id;
    if let Some(fd) = req.attach_btf_obj_fd {
        u.__bindgen_anon_1.attach_btf_obj_fd = fd.as_raw_fd().cast_unsigned();
    }
    if let Some(btf) = req.btf {
        u.prog_btf_fd = btf.fd.as_raw_fd().cast_unsigned();
        if btf.func_info_rec_size > 0 {
            u.func_info = btf.func_info.as_ptr() as u64;
            u.func_info_rec_size = btf.func_info_rec_size;
            u.func_info_cnt = record_count(btf.func_info, btf.func_info_rec_size);
        }
        if btf.line_info_rec_size > 0 {
            u.line_info = btf.line_info.as_ptr() as u64;
            u.line_info_rec_size = btf.line_info_rec_size;
            u.line_info_cnt = record_count(btf.line_info, btf.line_info_rec_size);
        }
    }
    if !log.is_empty() {
        log[0] = 0;
        u.log_level = log_level;
        u.log_buf = log.as_mut_ptr() as u64;
        u.log_size = u32::try_from(log.len()).unwrap_or(u32::MAX);
    }
    let mut attempt = 1;
    loop {
        match fd_sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && attempt < PROG_LOAD_ATTEMPTS => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// `BPF_BTF_LOAD` of an object's (fixed-up) BTF, without a log.
pub fn btf_load(raw: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_BTF_LOAD` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.__bindgen_anon_7 };
    u.btf = raw.as_ptr() as u64;
    u.btf_size = u32::try_from(raw.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    fd_sys_bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr)
}

/// `BPF_LINK_CREATE` of a BPF netfilter link in the caller's network namespace
/// (`bpf_nf_link_attach`, `net/netfilter/nf_bpf_link.c`, v6.4): `target_fd` and the link flags
/// stay zero; `pf`, `hooknum`, `priority` and `flags` fill `link_create.netfilter`.
pub fn link_create_netfilter(
    prog: BorrowedFd<'_>,
    pf: u32,
    hooknum: u32,
    priority: i32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_LINK_CREATE` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.link_create };
    u.__bindgen_anon_1.prog_fd = prog.as_raw_fd().cast_unsigned();
    u.attach_type = bpf_attach_type::BPF_NETFILTER as u32;
    // SAFETY: as above, for the attach-type specific union inside `link_create`.
    let nf = unsafe { &mut u.__bindgen_anon_3.netfilter };
    nf.pf = pf;
    nf.hooknum = hooknum;
    nf.priority = priority;
    nf.flags = flags;
    fd_sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
}

/// `BPF_RAW_TRACEPOINT_OPEN` without a name: attaches a tracing program (fentry/fexit) to the
/// function it was loaded for and returns the link (`bpf_tracing_prog_attach`,
/// kernel/bpf/syscall.c, v5.5+). Closing the link detaches the program.
pub fn raw_tracepoint_open(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_RAW_TRACEPOINT_OPEN` member of a zeroed union.
    let u = unsafe { &mut attr.raw_tracepoint };
    u.prog_fd = prog.as_raw_fd().cast_unsigned();
    fd_sys_bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// `BPF_PROG_TEST_RUN` of a raw tracepoint program on CPU `cpu` (`BPF_F_TEST_RUN_ON_CPU`,
/// 5.10+), without arguments: the kernel runs it there (by an IPI unless the caller is on that
/// CPU: `bpf_prog_test_run_raw_tp`, `net/bpf/test_run.c`) and returns what it returned.
/// `ENXIO` for a CPU that is not online.
pub fn prog_test_run_on_cpu(prog: BorrowedFd<'_>, cpu: u32) -> io::Result<u32> {
    /// `BPF_F_TEST_RUN_ON_CPU` (include/uapi/linux/bpf.h).
    const ON_CPU: u32 = 1;
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_PROG_TEST_RUN` member of a zeroed union.
    let t = unsafe { &mut attr.test };
    t.prog_fd = prog.as_raw_fd().cast_unsigned();
    t.flags = ON_CPU;
    t.cpu = cpu;
    sys_bpf(bpf_cmd::BPF_PROG_TEST_RUN, &mut attr)?;
    // SAFETY: the kernel wrote the result into the same member.
    Ok(unsafe { attr.test.retval })
}

/// `BPF_BTF_GET_NEXT_ID`: the id of the kernel BTF object after `start` (0: the first);
/// `ENOENT` after the last.
pub fn btf_get_next_id(start: u32) -> io::Result<u32> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_*_GET_NEXT_ID` member of a zeroed union; `next_id` is read back
    // from the same member, which the kernel filled in.
    unsafe {
        attr.__bindgen_anon_6.__bindgen_anon_1.start_id = start;
        sys_bpf(bpf_cmd::BPF_BTF_GET_NEXT_ID, &mut attr)?;
        Ok(attr.__bindgen_anon_6.next_id)
    }
}

/// `BPF_BTF_GET_FD_BY_ID`.
pub fn btf_get_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    attr.__bindgen_anon_6.__bindgen_anon_1.btf_id = id;
    fd_sys_bpf(bpf_cmd::BPF_BTF_GET_FD_BY_ID, &mut attr)
}

/// What `BPF_OBJ_GET_INFO_BY_FD` says of a BTF object: its name (a module's name, `vmlinux`,
/// or empty for BTF that programs loaded) and whether the kernel made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BtfObjInfo {
    pub name: String,
    pub kernel: bool,
}

/// `BPF_OBJ_GET_INFO_BY_FD` of a BTF object (`name` and `kernel_btf` exist from 5.11).
pub fn btf_obj_info(btf: BorrowedFd<'_>) -> io::Result<BtfObjInfo> {
    let mut name = [0u8; 64];
    // SAFETY: `bpf_btf_info` is plain integers: all-zero is valid.
    let mut info: aya_obj::generated::bpf_btf_info = unsafe { mem::zeroed() };
    info.name = name.as_mut_ptr() as u64;
    info.name_len = u32::try_from(name.len()).unwrap_or(0);
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_OBJ_GET_INFO_BY_FD` member of a zeroed union; `info` and `name`
    // outlive the call and are as long as the lengths given.
    unsafe {
        let u = &mut attr.info;
        u.bpf_fd = btf.as_raw_fd().cast_unsigned();
        u.info_len = u32::try_from(size_of_val(&info)).unwrap_or(0);
        u.info = std::ptr::from_mut(&mut info) as u64;
    }
    sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(BtfObjInfo {
        name: String::from_utf8_lossy(&name[..end]).into_owned(),
        kernel: info.kernel_btf != 0,
    })
}

/// `BPF_MAP_CREATE` of a plain array map (for tests).
#[cfg(test)]
pub fn array_map_create(value_size: u32, max_entries: u32) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_MAP_CREATE` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.__bindgen_anon_1 };
    u.map_type = aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_ARRAY as u32;
    u.key_size = 4;
    u.value_size = value_size;
    u.max_entries = max_entries;
    fd_sys_bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr)
}

/// `BPF_MAP_LOOKUP_ELEM` of an array map's value.
///
/// # Safety
/// `value` must be at least as long as the map's value size: the kernel writes that many bytes.
pub unsafe fn array_map_lookup(
    map: BorrowedFd<'_>,
    index: u32,
    value: &mut [u8],
) -> io::Result<()> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_MAP_*_ELEM` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.__bindgen_anon_2 };
    u.map_fd = map.as_raw_fd().cast_unsigned();
    u.key = std::ptr::from_ref(&index) as u64;
    u.__bindgen_anon_1.value = value.as_mut_ptr() as u64;
    sys_bpf(bpf_cmd::BPF_MAP_LOOKUP_ELEM, &mut attr)?;
    Ok(())
}

/// `BPF_MAP_UPDATE_ELEM` of an array map's value (`BPF_ANY`).
///
/// # Safety
/// `value` must be at least as long as the map's value size: the kernel reads that many bytes.
pub unsafe fn array_map_update(map: BorrowedFd<'_>, index: u32, value: &[u8]) -> io::Result<()> {
    let mut attr = zeroed_attr();
    // SAFETY: writing the `BPF_MAP_*_ELEM` member of a zeroed union; no other member is read.
    let u = unsafe { &mut attr.__bindgen_anon_2 };
    u.map_fd = map.as_raw_fd().cast_unsigned();
    u.key = std::ptr::from_ref(&index) as u64;
    u.__bindgen_anon_1.value = value.as_ptr() as u64;
    sys_bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr)?;
    Ok(())
}
