//! Private apt configurations of the VM tier: one per Debian suite the machine's own apt
//! sources do not have (bookworm-backports, bullseye, bookworm for arm64), each with its sources, lists and
//! package cache under `~/.cache/pktrace/vm/apt-<name>`, so that `apt-get download` fetches
//! a kernel package from that suite while the machine's apt sources stay as they are.

use std::{fs, process::Command};

use anyhow::{Context as _, Result};
use xtask_common::cmd::{output, run};

use super::cache_dir;

/// A Debian suite the VM tier fetches kernels from through its own apt configuration.
#[derive(Debug, Clone, Copy)]
pub struct Suite {
    /// Names the configuration's directory (`apt-<name>`) and the suite in messages.
    pub name: &'static str,
    /// The deb822 sources, signed by Debian's archive keyring.
    pub sources: &'static str,
    /// Extended regular expression of the cloud kernel packages' names (`apt-cache search`).
    pub pattern: &'static str,
    /// A foreign architecture (`arm64`) this configuration alone knows: apt takes it as the
    /// native one here, with an empty package status (the machine's dpkg stays as it is).
    pub architecture: Option<&'static str>,
}

/// bookworm-backports: the 6.12 cloud kernels (`linux-image-6.12.74+deb12-cloud-amd64`).
pub const BOOKWORM_BACKPORTS: Suite = Suite {
    name: "backports",
    sources: "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\n\
              Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    pattern: "^linux-image-[0-9.]+\\+deb12-cloud-amd64$",
    architecture: None,
};

/// bullseye (Debian 11): the 5.10 cloud kernels (`linux-image-5.10.0-32-cloud-amd64`).
pub const BULLSEYE: Suite = Suite {
    name: "bullseye",
    sources: "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bullseye\n\
              Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    pattern: "^linux-image-5\\.10\\.0-[0-9]+-cloud-amd64$",
    architecture: None,
};

/// bookworm (with its updates and security suites) for arm64: the 6.1 arm64 cloud kernels
/// (`linux-image-6.1.0-56-cloud-arm64`) and the arm64 tools and libraries of the guest.
pub const BOOKWORM_ARM64: Suite = Suite {
    name: "arm64",
    sources: "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
              Components: main\nArchitectures: arm64\n\
              Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
              Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\
              Components: main\nArchitectures: arm64\n\
              Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    pattern: "^linux-image-6\\.1\\.0-[0-9]+-cloud-arm64$",
    architecture: Some("arm64"),
};

/// How old a suite's index may be before `apt-get update` fetches it again.
const INDEX_MAX_AGE_SECS: u64 = 86_400;

impl Suite {
    /// The `-o` options that point apt at this suite's configuration, creating its
    /// directories and sources file; the index is fetched when it is older than a day (a
    /// failed fetch is said and the cached index used).
    ///
    /// # Errors
    /// If the configuration's directories or files cannot be written.
    pub fn options(&self) -> Result<Vec<String>> {
        let apt = cache_dir().join(format!("apt-{}", self.name));
        let lists = apt.join("lists");
        fs::create_dir_all(lists.join("partial"))
            .with_context(|| format!("creating {}", lists.display()))?;
        fs::create_dir_all(apt.join("cache/archives/partial"))?;
        fs::create_dir_all(apt.join("sources.d"))?;
        fs::write(
            apt.join("sources.d").join(format!("{}.sources", self.name)),
            self.sources,
        )?;
        fs::write(apt.join("empty.list"), "")?;
        let mut options = vec![
            format!("Dir::Etc::SourceList={}", apt.join("empty.list").display()),
            format!("Dir::Etc::SourceParts={}", apt.join("sources.d").display()),
            format!("Dir::State::Lists={}", lists.display()),
            format!("Dir::Cache={}", apt.join("cache").display()),
        ];
        if let Some(arch) = self.architecture {
            fs::write(apt.join("status"), "")?;
            options.extend([
                format!("APT::Architecture={arch}"),
                format!("APT::Architectures={arch}"),
                format!("Dir::State::status={}", apt.join("status").display()),
            ]);
        }
        let stamp = lists.join(".updated");
        let fresh = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .is_ok_and(|t| {
                t.elapsed()
                    .is_ok_and(|age| age.as_secs() < INDEX_MAX_AGE_SECS)
            });
        if !fresh {
            eprintln!(
                "vm-test: apt-get update of {} (into {})",
                self.name,
                apt.display()
            );
            match run(apt_get(&options).args(["update", "-qq"])) {
                Ok(()) => fs::write(&stamp, "")?,
                Err(e) => eprintln!("vm-test: {e:#}; using the index and kernels already cached"),
            }
        }
        Ok(options)
    }

    /// The cloud kernel packages this suite's index lists (`apt-cache search` lines; empty
    /// when apt cannot tell).
    #[must_use]
    pub fn listing(&self, options: &[String]) -> String {
        let mut search = with_options(Command::new("apt-cache"), options);
        output(search.args(["search", "--names-only", self.pattern])).unwrap_or_default()
    }
}

/// `apt-get` with `-o` `options`, run as root in the sandbox root's downloads need.
#[must_use]
pub fn apt_get(options: &[String]) -> Command {
    let mut cmd = Command::new("apt-get");
    if xtask_common::cmd::is_root() {
        // Root's downloads otherwise warn that the `_apt` user cannot write the cache.
        cmd.args(["-o", "APT::Sandbox::User=root"]);
    }
    with_options(cmd, options)
}

/// `cmd` (apt-get, apt-cache) with each of `options` as `-o`.
#[must_use]
pub fn with_options(mut cmd: Command, options: &[String]) -> Command {
    for o in options {
        cmd.args(["-o", o]);
    }
    cmd
}
