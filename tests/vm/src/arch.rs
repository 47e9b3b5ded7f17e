//! The guest architectures of the VM tier: `x86_64` (the host's own, its tools copied from the
//! host) and arm64 (Debian's arm64 cloud kernel and userland, the aarch64 musl binaries, under
//! `qemu-system-aarch64`). Everything that differs between them is here.

use anyhow::{Result, bail};

/// A guest architecture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Arch {
    /// The host's architecture: its tools and libraries are copied into the guest.
    #[default]
    X86_64,
    /// Debian's arm64: its tools come from arm64 packages ([`super::sysroot`]).
    Arm64,
}

impl Arch {
    /// Every architecture, host first.
    pub const ALL: [Self; 2] = [Self::X86_64, Self::Arm64];

    /// Parses `--arch`: `x86_64`/`amd64`, `arm64`/`aarch64`.
    ///
    /// # Errors
    /// On any other name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "x86_64" | "amd64" => Ok(Self::X86_64),
            "arm64" | "aarch64" => Ok(Self::Arm64),
            other => bail!("--arch {other}: use x86_64 or arm64"),
        }
    }

    /// The name in tables and file names (`x86_64`, `arm64`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Arm64 => "arm64",
        }
    }

    /// Debian's name, as in kernel package names (`cloud-amd64`).
    #[must_use]
    pub fn debian(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }

    /// The qemu program and the Debian package that has it.
    #[must_use]
    pub fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Self::X86_64 => ("qemu-system-x86_64", "qemu-system-x86"),
            Self::Arm64 => ("qemu-system-aarch64", "qemu-system-arm"),
        }
    }

    /// qemu's machine and CPU arguments. arm64: `virt` with a Cortex-A72, whose TCG emulation
    /// boots to `/init` in 0.9 s here where `-cpu max` took 6.3 s (pointer authentication is
    /// emulated slowly); it has all the kernel's BPF needs (JIT, trampolines).
    #[must_use]
    pub fn machine(self) -> [&'static str; 4] {
        match self {
            Self::X86_64 => ["-machine", "pc,accel=tcg", "-cpu", "max"],
            Self::Arm64 => ["-machine", "virt,accel=tcg", "-cpu", "cortex-a72"],
        }
    }

    /// The serial console's kernel command-line word.
    #[must_use]
    pub fn console(self) -> &'static str {
        match self {
            Self::X86_64 => "console=ttyS0",
            Self::Arm64 => "console=ttyAMA0",
        }
    }

    /// Whether the guest runs the host's own binaries (tools, libraries, payload).
    #[must_use]
    pub fn is_host(self) -> bool {
        self == Self::X86_64 && cfg!(target_arch = "x86_64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_spellings_of_each_architecture() {
        assert_eq!(Arch::parse("aarch64").unwrap(), Arch::Arm64);
        assert_eq!(Arch::parse("arm64").unwrap(), Arch::Arm64);
        assert_eq!(Arch::parse("amd64").unwrap(), Arch::X86_64);
        assert!(Arch::parse("riscv64").is_err());
        for arch in Arch::ALL {
            assert_eq!(Arch::parse(arch.name()).unwrap(), arch);
        }
    }
}
