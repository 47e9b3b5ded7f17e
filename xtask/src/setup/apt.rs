//! Debian packages the lab and the tests use, installed with apt when missing.

use std::process::Command;

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::{find_program, is_root, run};

/// Packages `setup` makes sure are installed (`iputils-ping`: the integration tests' `ping`;
/// `musl-tools`, `gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross`: the C code of ring in the
/// static builds of `cargo xtask dist`, and the aarch64 linker; `python3-venv`: the
/// kubernetes-validate virtualenv; `qemu-system-x86`, `kmod`, `lz4`: `cargo xtask vm-test`
/// boots a Debian kernel (`qemu-system-arm`: its `qemu-system-aarch64` boots the arm64 one), indexes its modules with depmod and packs the initramfs; `tshark`:
/// the integration test of `-w` reads the pcapng file back; `netbase`: `/etc/protocols`, which
/// `iptables-restore` reads for protocol names such as Calico's `-p ipencap`, on the host and in
/// the VM guests).
pub const PACKAGES: [&str; 21] = [
    "iptables",
    "conntrack",
    "ipset",
    "tcpdump",
    "tshark",
    "bpftool",
    "iperf3",
    "iproute2",
    "busybox-static",
    "procps",
    "iputils-ping",
    "musl-tools",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "python3-venv",
    "qemu-system-x86",
    "qemu-system-arm",
    "kmod",
    "lz4",
    "netbase",
    // libFuzzer, which cargo-fuzz builds, is C++.
    "g++",
];

/// Installs the packages of `PACKAGES` that are missing (one `apt-get update` first).
pub fn ensure_packages() -> Result<()> {
    if find_program("dpkg-query").is_none() {
        bail!("dpkg-query not found: `cargo xtask setup` supports Debian and Ubuntu only");
    }
    let missing: Vec<&str> = PACKAGES.into_iter().filter(|p| !is_installed(p)).collect();
    if missing.is_empty() {
        eprintln!("setup: packages already installed: {}", PACKAGES.join(" "));
        return Ok(());
    }
    if !is_root() {
        bail!(
            "packages missing: {}; installing them needs root: run `cargo xtask setup` as root",
            missing.join(" ")
        );
    }
    eprintln!("setup: installing {}", missing.join(" "));
    run(Command::new("apt-get").arg("update")).context("apt-get update")?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing))
    .context("installing packages")?;
    let still: Vec<&str> = missing.into_iter().filter(|p| !is_installed(p)).collect();
    if !still.is_empty() {
        bail!("apt-get did not install {}", still.join(" "));
    }
    Ok(())
}

fn is_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout == b"install ok installed")
}
