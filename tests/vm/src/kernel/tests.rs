//! Picking the kernel: versions, packages and the suites they come from.

use super::*;

#[test]
fn picks_the_highest_abi_of_the_cloud_flavour() {
    let listing = "linux-image-6.1.0-9-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)\n\
                   linux-image-6.1.0-41-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)\n\
                   linux-image-6.1.0-41-cloud-amd64-unsigned - Linux 6.1\n\
                   linux-image-6.1.0-50-amd64 - Linux 6.1 for 64-bit PCs\n";
    assert_eq!(newest_in(listing).as_deref(), Some("6.1.0-41-cloud-amd64"));
    assert_eq!(newest_in(""), None);
}

#[test]
fn picks_the_highest_release_of_the_backports_cloud_flavour() {
    let listing = "linux-image-6.12.9+deb12-cloud-amd64 - Linux 6.12 for x86-64 cloud\n\
                   linux-image-6.12.74+deb12-cloud-amd64 - Linux 6.12 for x86-64 cloud\n\
                   linux-image-6.12.73+deb12-cloud-amd64 - Linux 6.12 for x86-64 cloud\n\
                   linux-image-6.12.80+deb12-cloud-amd64-dbg - debug symbols\n\
                   linux-image-6.12.81+deb12-amd64 - Linux 6.12 for 64-bit PCs\n\
                   linux-image-6.1.0-41-cloud-amd64 - Linux 6.1 for x86-64 cloud\n";
    assert_eq!(
        newest_backport(listing).as_deref(),
        Some("6.12.74+deb12-cloud-amd64")
    );
    assert_eq!(newest_backport("linux-image-6.1.0-41-cloud-amd64"), None);
    assert_eq!(regex_escape("+deb12-cloud.x"), "\\+deb12-cloud\\.x");
}

#[test]
fn picks_the_highest_abi_of_bullseyes_cloud_flavour() {
    let listing = "linux-image-5.10.0-30-cloud-amd64 - Linux 5.10 for x86-64 cloud (signed)\n\
                   linux-image-5.10.0-32-cloud-amd64 - Linux 5.10 for x86-64 cloud (signed)\n\
                   linux-image-5.10.0-33-amd64 - Linux 5.10 for 64-bit PCs\n";
    assert_eq!(
        newest_abi(listing, BULLSEYE_PREFIX).as_deref(),
        Some("5.10.0-32-cloud-amd64")
    );
    assert_eq!(newest_abi(listing, DEFAULT_PREFIX), None);
}

#[test]
fn picks_the_highest_abi_of_the_arm64_cloud_flavour() {
    let listing = "linux-image-6.1.0-9-cloud-arm64 - Linux 6.1 for arm64 cloud (signed)\n\
                   linux-image-6.1.0-56-cloud-arm64 - Linux 6.1 for arm64 cloud (signed)\n\
                   linux-image-6.1.0-60-arm64 - Linux 6.1 for 64-bit ARMv8 machines\n\
                   linux-image-6.1.0-61-cloud-amd64 - Linux 6.1 for x86-64 cloud\n";
    assert_eq!(
        newest_abi_of(listing, DEFAULT_PREFIX, ARM64_SUFFIX).as_deref(),
        Some("6.1.0-56-cloud-arm64")
    );
    assert_eq!(newest_in(listing).as_deref(), Some("6.1.0-61-cloud-amd64"));
}

#[test]
fn reads_the_version_from_a_bzimage_header() {
    let mut image = vec![0u8; 0x1000];
    image[0x202..0x206].copy_from_slice(b"HdrS");
    image[0x20e..0x210].copy_from_slice(&0x0400u16.to_le_bytes());
    let text = b"6.1.0-41-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP\0";
    image[0x600..0x600 + text.len()].copy_from_slice(text);
    assert_eq!(
        bzimage_version(&image).as_deref(),
        Some("6.1.0-41-cloud-amd64")
    );
    image[0x202] = 0;
    assert_eq!(bzimage_version(&image), None);
}
