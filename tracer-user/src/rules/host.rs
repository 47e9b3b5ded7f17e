//! The node's own `iptables-save` when pktrace runs in a container without one (its image
//! holds only the static binary): with `hostPID`, `/proc/1/root` is the node's root
//! directory, and the command runs chrooted there, as `nsenter -t 1 -m` would.

use std::{
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
};

/// The host's root as seen through its init process.
const HOST_ROOT: &str = "/proc/1/root";
/// Where the node may keep the command.
const DIRS: [&str; 4] = ["usr/sbin", "sbin", "usr/bin", "bin"];

/// `program` on the host, run chrooted to the host's root, with a name for messages; `None`
/// when pktrace's root already is the host's (on the node itself, in the lab) or the host
/// has no such program.
pub fn command(program: &str) -> Option<(String, Command)> {
    command_in(Path::new("/"), Path::new(HOST_ROOT), program)
}

fn command_in(own_root: &Path, host_root: &Path, program: &str) -> Option<(String, Command)> {
    let (own, host) = (own_root.metadata().ok()?, host_root.metadata().ok()?);
    if (own.dev(), own.ino()) == (host.dev(), host.ino()) {
        return None;
    }
    // `symlink_metadata`: the host's links point into the host's tree, not ours.
    let in_host: PathBuf = DIRS
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|rel| host_root.join(rel).symlink_metadata().is_ok())?;
    let mut cmd = Command::new(Path::new("/").join(&in_host));
    let root = std::ffi::CString::new(host_root.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: between fork and exec the closure only makes two async-signal-safe syscalls
    // on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Some((
        format!("{program} (the node's, via {})", host_root.display()),
        cmd,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_when_the_host_root_is_another_directory() {
        assert!(
            command_in(Path::new("/"), Path::new("/"), "sh").is_none(),
            "same root"
        );
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("usr/sbin")).unwrap();
        std::os::unix::fs::symlink(
            "/etc/alternatives/iptables-save",
            dir.join("usr/sbin/iptables-save"),
        )
        .unwrap();
        let (name, cmd) = command_in(Path::new("/"), dir, "iptables-save").expect("found");
        assert_eq!(
            cmd.get_program(),
            "/usr/sbin/iptables-save",
            "a path inside the host's root"
        );
        assert!(name.contains("the node's"), "{name}");
        assert!(command_in(Path::new("/"), dir, "nft").is_none());
    }
}
