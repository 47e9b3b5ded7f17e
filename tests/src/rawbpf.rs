//! A tc program that is not pktrace's, built from raw BPF instructions and loaded over the
//! bpf(2) syscall, to stand for "another program on the same hook" (a CNI's, a firewall's).
//!
//! It counts, per category, IPv4 packets it sees: ICMP echo requests, TCP SYNs to one port
//! ("allowed") and TCP SYNs to another ("dropped"); in drop mode it also drops the latter
//! (`TC_ACT_SHOT`). Everything else passes on (`TCX_NEXT`). Attribute layouts are
//! include/uapi/linux/bpf.h (v6.6) `union bpf_attr`.

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

/// Counter slots of the program's array map.
pub const ECHO_REQUESTS: u32 = 0;
pub const SYN_ALLOWED: u32 = 1;
pub const SYN_DROPPED: u32 = 2;
const SLOTS: u32 = 3;

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_LOOKUP_ELEM: i64 = 1;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;
const ATTR_SIZE: usize = 144;
/// Helpers (include/uapi/linux/bpf.h `___BPF_FUNC_MAPPER`).
const MAP_LOOKUP_ELEM: i32 = 1;
const SKB_LOAD_BYTES: i32 = 26;
/// Verdicts: `TCX_NEXT` (= `TC_ACT_UNSPEC`) and `TCX_DROP` (= `TC_ACT_SHOT`).
const NEXT: i32 = -1;
const DROP: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

/// An instruction, or a jump to a label resolved at assembly.
enum Op {
    I(Insn),
    Jump {
        code: u8,
        dst: u8,
        imm: i32,
        to: &'static str,
    },
    Label(&'static str),
}

fn mov(dst: u8, imm: i32) -> Op {
    Op::I(insn(0xb7, dst, 0, 0, imm))
}
fn mov_reg(dst: u8, src: u8) -> Op {
    Op::I(insn(0xbf, dst, src, 0, 0))
}
fn add(dst: u8, imm: i32) -> Op {
    Op::I(insn(0x07, dst, 0, 0, imm))
}
fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Op {
    Op::I(insn(size, dst, src, off, 0))
}
fn call(helper: i32) -> Op {
    Op::I(insn(0x85, 0, 0, 0, helper))
}
fn jeq(dst: u8, imm: i32, to: &'static str) -> Op {
    Op::Jump {
        code: 0x15,
        dst,
        imm,
        to,
    }
}
fn jne(dst: u8, imm: i32, to: &'static str) -> Op {
    Op::Jump {
        code: 0x55,
        dst,
        imm,
        to,
    }
}
fn ja(to: &'static str) -> Op {
    Op::Jump {
        code: 0x05,
        dst: 0,
        imm: 0,
        to,
    }
}
const LDXB: u8 = 0x71;
const LDXH: u8 = 0x69;

/// `bpf_skb_load_bytes(skb = r6, offset = r2 (set by the caller), fp + at, len)`; leaves to
/// `out` if it fails.
fn load_bytes(at: i32, len: i32) -> Vec<Op> {
    vec![
        mov_reg(1, 6),
        mov_reg(3, 10),
        add(3, at),
        mov(4, len),
        call(SKB_LOAD_BYTES),
        jne(0, 0, "out"),
    ]
}

fn program(map_fd: i32, allowed_port: u16, dropped_port: u16, drop: bool) -> Vec<Insn> {
    let mut ops = vec![mov_reg(6, 1), mov(2, 12)];
    // EtherType at fp-8: IPv4 only.
    ops.extend(load_bytes(-8, 2));
    ops.extend([
        ldx(LDXH, 1, 10, -8),
        jne(1, i32::from(0x0800u16.to_be()), "out"),
        mov(2, 14),
    ]);
    // The IPv4 header's first 20 bytes at fp-32; r8 = offset of the L4 header; r7 = protocol.
    ops.extend(load_bytes(-32, 20));
    ops.extend([
        ldx(LDXB, 8, 10, -32),
        Op::I(insn(0x57, 8, 0, 0, 0xf)),
        Op::I(insn(0x67, 8, 0, 0, 2)),
        add(8, 14),
        ldx(LDXB, 7, 10, -23),
        mov_reg(2, 8),
    ]);
    // The L4 header's first 14 bytes at fp-48.
    ops.extend(load_bytes(-48, 14));
    ops.extend([
        jeq(7, 1, "icmp"),
        jne(7, 6, "out"),
        // TCP: flags (offset 13) exactly SYN, then the destination port (offset 2).
        ldx(LDXB, 1, 10, -35),
        jne(1, 0x02, "out"),
        ldx(LDXH, 1, 10, -46),
        jeq(1, i32::from(allowed_port.to_be()), "allowed"),
        jeq(1, i32::from(dropped_port.to_be()), "dropped"),
        ja("out"),
        Op::Label("icmp"),
        ldx(LDXB, 1, 10, -48),
        jne(1, 8, "out"),
        mov(9, ECHO_REQUESTS.cast_signed()),
        ja("count"),
        Op::Label("allowed"),
        mov(9, SYN_ALLOWED.cast_signed()),
        ja("count"),
        Op::Label("dropped"),
        mov(9, SYN_DROPPED.cast_signed()),
        Op::Label("count"),
        // key = r9 at fp-4; value += 1.
        Op::I(insn(0x63, 10, 9, -4, 0)),
        Op::I(insn(0x18, 1, 1, 0, map_fd)),
        Op::I(insn(0, 0, 0, 0, 0)),
        mov_reg(2, 10),
        add(2, -4),
        call(MAP_LOOKUP_ELEM),
        jeq(0, 0, "verdict"),
        mov(1, 1),
        Op::I(insn(0xdb, 0, 1, 0, 0)),
        Op::Label("verdict"),
    ]);
    if drop {
        ops.extend([
            jne(9, SYN_DROPPED.cast_signed(), "out"),
            mov(0, DROP),
            Op::I(insn(0x95, 0, 0, 0, 0)),
        ]);
    }
    ops.extend([
        Op::Label("out"),
        mov(0, NEXT),
        Op::I(insn(0x95, 0, 0, 0, 0)),
    ]);
    assemble(&ops)
}

/// Resolves labels: a jump's offset counts instructions after the jump.
fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0i16;
    for op in ops {
        match op {
            Op::Label(l) => {
                at.insert(*l, n);
            }
            // The map load is two instructions, both pushed as `Op::I`.
            _ => n += 1,
        }
    }
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::I(i) => out.push(*i),
            Op::Jump { code, dst, imm, to } => {
                let here = i16::try_from(out.len()).expect("short program");
                let target = at.get(to).unwrap_or_else(|| panic!("no label {to}"));
                out.push(insn(*code, *dst, 0, target - here - 1, *imm));
            }
            Op::Label(_) => {}
        }
    }
    out
}

fn sys_bpf(cmd: i64, attr: &mut [u8; ATTR_SIZE]) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-initialised bpf_attr of ATTR_SIZE bytes; pointers stored in it
    // point to buffers that outlive the call.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_SIZE) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn put(attr: &mut [u8; ATTR_SIZE], at: usize, bytes: &[u8]) {
    attr[at..at + bytes.len()].copy_from_slice(bytes);
}

fn fd(ret: i64) -> OwnedFd {
    // SAFETY: the command returned a new fd that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(i32::try_from(ret).expect("fd")) }
}

/// The loaded program and its counters.
pub struct CountingProgram {
    map: OwnedFd,
    prog: OwnedFd,
}

impl CountingProgram {
    /// Loads the program (see the module doc).
    ///
    /// # Panics
    /// If the kernel refuses the map or the program (with the verifier's log).
    #[must_use]
    pub fn load(allowed_port: u16, dropped_port: u16, drop: bool) -> Self {
        let mut attr = [0u8; ATTR_SIZE];
        for (at, v) in [(0, BPF_MAP_TYPE_ARRAY), (4, 4), (8, 8), (12, SLOTS)] {
            put(&mut attr, at, &v.to_ne_bytes());
        }
        let map = fd(sys_bpf(BPF_MAP_CREATE, &mut attr).expect("BPF_MAP_CREATE"));
        let insns = program(map.as_raw_fd(), allowed_port, dropped_port, drop);
        let mut log = vec![0u8; 1 << 16];
        let license = c"GPL";
        let mut attr = [0u8; ATTR_SIZE];
        put(&mut attr, 0, &BPF_PROG_TYPE_SCHED_CLS.to_ne_bytes());
        put(
            &mut attr,
            4,
            &u32::try_from(insns.len()).expect("count").to_ne_bytes(),
        );
        put(&mut attr, 8, &(insns.as_ptr() as u64).to_ne_bytes());
        put(&mut attr, 16, &(license.as_ptr() as u64).to_ne_bytes());
        put(&mut attr, 24, &1u32.to_ne_bytes());
        put(
            &mut attr,
            28,
            &u32::try_from(log.len()).expect("len").to_ne_bytes(),
        );
        put(&mut attr, 32, &(log.as_mut_ptr() as u64).to_ne_bytes());
        put(
            &mut attr,
            48,
            if drop {
                b"test_dropper\0"
            } else {
                b"test_counter\0"
            },
        );
        let prog = match sys_bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(ret) => fd(ret),
            Err(e) => {
                let log = String::from_utf8_lossy(&log);
                panic!("BPF_PROG_LOAD: {e}\n{}", log.trim_end_matches('\0'));
            }
        };
        Self { map, prog }
    }

    /// Attaches at tcx ingress of `ifindex` (in the calling thread's network namespace), after
    /// the programs already there; the link lasts as long as the returned fd.
    ///
    /// # Errors
    /// `BPF_LINK_CREATE` failed.
    pub fn attach_tcx_ingress(&self, ifindex: u32) -> io::Result<OwnedFd> {
        let mut attr = [0u8; ATTR_SIZE];
        put(
            &mut attr,
            0,
            &self.prog.as_raw_fd().cast_unsigned().to_ne_bytes(),
        );
        put(&mut attr, 4, &ifindex.to_ne_bytes());
        put(&mut attr, 8, &BPF_TCX_INGRESS.to_ne_bytes());
        sys_bpf(BPF_LINK_CREATE, &mut attr).map(fd)
    }

    /// The counter in `slot`.
    ///
    /// # Panics
    /// If the lookup fails.
    #[must_use]
    pub fn count(&self, slot: u32) -> u64 {
        let mut value = 0u64;
        let mut attr = [0u8; ATTR_SIZE];
        put(
            &mut attr,
            0,
            &self.map.as_raw_fd().cast_unsigned().to_ne_bytes(),
        );
        put(
            &mut attr,
            8,
            &(std::ptr::from_ref(&slot) as u64).to_ne_bytes(),
        );
        put(
            &mut attr,
            16,
            &(std::ptr::from_mut(&mut value) as u64).to_ne_bytes(),
        );
        sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).expect("BPF_MAP_LOOKUP_ELEM");
        value
    }

    /// All counters, by slot.
    #[must_use]
    pub fn counts(&self) -> [u64; 3] {
        [
            self.count(ECHO_REQUESTS),
            self.count(SYN_ALLOWED),
            self.count(SYN_DROPPED),
        ]
    }
}

/// Runs `f` on a thread that has joined network namespace `ns` (`/run/netns/<ns>`).
///
/// # Panics
/// If the namespace cannot be joined or `f` panics.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns);
            f()
        })
        .join()
        .expect("thread in netns")
    })
}

/// Moves the calling thread into network namespace `ns` for good.
///
/// # Panics
/// If the namespace cannot be joined.
pub fn enter_netns(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}"))
        .unwrap_or_else(|e| panic!("netns {ns}: {e}"));
    // SAFETY: setns on an fd we hold, for this thread only (CLONE_NEWNET).
    let ret = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(ret, 0, "setns {ns}: {}", io::Error::last_os_error());
}

/// The index of interface `name` in the calling thread's network namespace.
///
/// # Panics
/// If there is no such interface.
#[must_use]
pub fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(index, 0, "no interface {name}");
    index
}
