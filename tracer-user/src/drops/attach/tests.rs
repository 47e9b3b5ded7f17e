//! Root tier: the drop programs load and attach on this kernel, `tp_btf` first, and the raw
//! tracepoint fallbacks (with and without the reason argument) pass the verifier here too,
//! with the sites named by the kernel and without.

use super::*;
use crate::{attach::Globals, kernel::btf::Btf};

/// The kernel object loaded as pktrace loads it, and its globals; `site_names` as the loader
/// sets it.
fn loaded(site_names: u32) -> (Ebpf, Globals) {
    crate::test_support::require_root();
    assert!(
        !object().is_empty(),
        "built with AYA_BUILD_SKIP=1: no kernel object"
    );
    let btf = Btf::from_sys_fs().expect("the running kernel's BTF");
    let offsets = crate::kernel::btf::kernel_offsets(&btf).expect("kernel offsets");
    assert!(offsets.skb_head != 0 && offsets.skb_network_header != 0);
    let mut globals = Globals::new(false, offsets);
    globals.site_names = site_names;
    let ebpf = crate::attach::load(&globals, &crate::config::Knobs::default())
        .expect("loading the object");
    (ebpf, globals)
}

#[test]
#[ignore = "root tier: loads and attaches pktrace's drop programs"]
fn drop_programs_attach_tp_btf_first_and_the_raw_fallbacks_verify() {
    let (new_enough, release) = crate::test_support::kernel_at_least(5, 17);
    assert!(new_enough, "kernel {release}: no drop reason before 5.17");
    assert!(
        kernel_names_sites(),
        "kernel {release}: bpf_snprintf (5.13+) not found by the probe"
    );
    for site_names in [1, 0] {
        let (mut ebpf, globals) = loaded(site_names);
        let bytes = globals.as_bytes();
        let refs: Vec<(&str, &[u8])> = bytes.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        let attached =
            attach(&mut ebpf, &refs, &KernelBtf::default(), true).unwrap_or_else(|why| {
                let why: Vec<String> = why
                    .iter()
                    .map(|(w, e)| format!("{w}: {}", e.line()))
                    .collect();
                panic!("site names {site_names}: {}", why.join("; "))
            });
        assert!(matches!(attached.link, Link::Btf { .. }), "{attached:?}");
        drop(attached);
        for program in [RAW_PROGRAM, RAW_OLD_PROGRAM] {
            let link = attach_raw(&mut ebpf, program)
                .unwrap_or_else(|e| panic!("site names {site_names}: {}", e.line()));
            drop(link);
        }
    }
}
