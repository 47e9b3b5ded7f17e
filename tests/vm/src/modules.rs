//! The kernel modules the guest loads: what the lab (veth, bridge, `br_netfilter`, iptables nat
//! in both its nft and legacy flavours, for IPv4 and IPv6, the kube-proxy matches) and pktrace (clsact, `cls_bpf`,
//! conntrack over netlink) need, with their dependencies from `modules.dep`, resolved on the
//! host with `modprobe -d ROOT -S VERSION --show-depends`.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};
use xtask_common::cmd::capture;

use super::kernel::{Kernel, find_sbin};

/// Modules `/init` loads, in this order (`modprobe -a`).
pub const MODULES: [&str; 29] = [
    "veth",
    "bridge",
    "br_netfilter",
    "sch_ingress",
    "cls_bpf",
    "nf_conntrack",
    "nf_nat",
    "nf_conntrack_netlink",
    "nf_tables",
    "nft_compat",
    "nft_chain_nat",
    "ip_tables",
    "iptable_nat",
    "iptable_filter",
    // The dual-stack lab: ip6tables' nat table (legacy; the nft flavour uses nft_chain_nat).
    "ip6_tables",
    "ip6table_nat",
    "xt_statistic",
    "xt_comment",
    "xt_mark",
    "xt_addrtype",
    "xt_MASQUERADE",
    "xt_nat",
    "xt_tcpudp",
    "xt_conntrack",
    "xt_iprange",
    // The lab's calico variant: -m set on hash:net ipsets.
    "xt_set",
    "ip_set_hash_net",
    "nf_defrag_ipv4",
    "nf_defrag_ipv6",
];

/// Directories (under `lib/modules/<version>/kernel`) packed whole, so that what the kernel
/// or iptables asks `/sbin/modprobe` for on its own is there too.
pub const AUTOLOAD_DIRS: [&str; 4] = [
    "net/netfilter",
    "net/ipv4/netfilter",
    "net/ipv6/netfilter",
    "net/sched",
];

/// The modules to pack and to load.
#[derive(Debug, Default)]
pub struct ModuleSet {
    /// `.ko` files on the host (dependencies included).
    pub files: BTreeSet<PathBuf>,
    /// Names `/init` loads: the wanted ones the kernel has, as module or built in.
    pub load: Vec<String>,
    /// Wanted names the kernel has neither as module nor built in.
    pub missing: Vec<String>,
}

/// Resolves `names` and their dependencies for `kernel`.
///
/// # Errors
/// If `modprobe` is missing or fails for a module.
pub fn resolve(kernel: &Kernel, names: &[&str]) -> Result<ModuleSet> {
    let modprobe = find_sbin("modprobe")
        .context("modprobe not found: install kmod (`cargo xtask setup` does)")?;
    let mut set = ModuleSet::default();
    for name in names {
        let mut cmd = Command::new(&modprobe);
        cmd.arg("-d")
            .arg(&kernel.root)
            .args(["-S", &kernel.version, "--show-depends", name]);
        let out = capture(&mut cmd)?;
        if !out.status.success() {
            set.missing.push((*name).to_owned());
            continue;
        }
        let (files, _builtin) = parse_show_depends(&String::from_utf8_lossy(&out.stdout));
        set.files.extend(files);
        set.load.push((*name).to_owned());
    }
    let kernel_dir = kernel.modules_dir().join("kernel");
    for dir in AUTOLOAD_DIRS {
        collect_ko(&kernel_dir.join(dir), &mut set.files);
    }
    Ok(set)
}

/// The `.ko` paths (`insmod PATH [options]`) and built-in names (`builtin NAME`) in
/// `modprobe --show-depends` output.
#[must_use]
pub fn parse_show_depends(text: &str) -> (Vec<PathBuf>, Vec<String>) {
    let (mut files, mut builtin) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("insmod"), Some(path)) => files.push(PathBuf::from(path)),
            (Some("builtin"), Some(name)) => builtin.push(name.to_owned()),
            _ => {}
        }
    }
    (files, builtin)
}

fn collect_ko(dir: &Path, into: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            collect_ko(&path, into);
        } else if path
            .extension()
            .is_some_and(|e| e == "ko" || e == "xz" || e == "zst")
        {
            into.insert(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_insmod_and_builtin_lines() {
        let text = "insmod /k/lib/modules/6.1/kernel/net/llc/llc.ko \n\
                    insmod /k/lib/modules/6.1/kernel/net/bridge/bridge.ko\n\
                    insmod /k/lib/modules/6.1/kernel/net/netfilter/nf_conntrack.ko hashsize=1\n\
                    builtin unix\n";
        let (files, builtin) = parse_show_depends(text);
        assert_eq!(
            files,
            [
                PathBuf::from("/k/lib/modules/6.1/kernel/net/llc/llc.ko"),
                PathBuf::from("/k/lib/modules/6.1/kernel/net/bridge/bridge.ko"),
                PathBuf::from("/k/lib/modules/6.1/kernel/net/netfilter/nf_conntrack.ko"),
            ]
        );
        assert_eq!(builtin, ["unix"]);
    }
}
