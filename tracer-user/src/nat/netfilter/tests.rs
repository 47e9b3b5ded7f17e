use std::{
    fs, io,
    net::UdpSocket,
    os::fd::{AsFd as _, AsRawFd as _, OwnedFd},
    time::Duration,
};

use aya_obj::generated::bpf_insn;
use tracer_common::{KernelOffsets, hook};

use super::*;
use crate::{
    kernel::{
        btf::{Btf, kernel_offsets},
        sys,
    },
    test_support::in_new_netns,
};

/// Fails unless root on a kernel with BPF netfilter links (6.4+): `cargo xtask
/// integration-test` skips the tests that call this by name on older kernels (xtask's
/// `needs::NEEDS`).
fn require_netfilter_links() {
    crate::test_support::require_root();
    let (new_enough, release) = crate::test_support::kernel_at_least(6, 4);
    assert!(
        new_enough,
        "kernel {release} < 6.4 has no BPF netfilter links: the runners skip this test there"
    );
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
/// offsets from BTF (`skb_mark`: `sk_buff.mark`'s, which no pktrace program reads): the
/// verifier checks those reads against the kernel's own types.
fn counter(map: &OwnedFd, slot: i32, o: &KernelOffsets, skb_mark: u32) -> Vec<bpf_insn> {
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
        insn(0x61, 1, 7, off(skb_mark), 0),      // r1 = skb->mark
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
    require_netfilter_links();
    let btf = Btf::from_sys_fs().unwrap();
    let o = kernel_offsets(&btf).unwrap();
    let mark = btf.struct_member_offset("sk_buff", "mark").unwrap();
    let map = sys::array_map_create(32, 2).unwrap();
    let out = NetfilterProgram::load("pkt_test_out", &counter(&map, 0, &o, mark), c"GPL").unwrap();
    let post =
        NetfilterProgram::load("pkt_test_post", &counter(&map, 1, &o, mark), c"GPL").unwrap();
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
    require_netfilter_links();
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
    require_netfilter_links();
    let offsets = crate::kernel::btf::kernel_offsets_bytes(
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
    let programs = match load_netfilter_programs(object, &globals, &ebpf, &KernelBtf::default()) {
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
