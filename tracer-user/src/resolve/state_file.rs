//! Pod → addresses → host veth, from the Azure CNI state file (`/var/run/azure-vnet.json`):
//! the first source of [`super::resolve`].
//!
//! The file's shape (see `../shared/fixtures/azure-vnet.json`):
//! `Network.ExternalInterfaces.<if>.Networks.<net>.Endpoints.<id>` with `PODName`,
//! `PODNameSpace`, `IPAddresses[{IP, Mask}]`, `HostIfName`; plus `BridgeName` per external
//! interface and `Mode` per network. Only those fields are read; unknown ones are ignored and
//! null or missing ones tolerated, so other CNI versions parse too.
//!
//! Reading and walking the file: `file`; its errors: [`StateFileError`]; what is said of a
//! pod that is not there (also for crictl): `not_found`.

mod error;
mod file;
mod not_found;

use std::{net::IpAddr, path::Path};

use self::file::{layout, load, parse, pods, read};
pub use self::{
    error::StateFileError,
    not_found::{NotFound, not_found, not_found_message},
};

/// Largest state file pktrace reads (64 MiB). A real one holds a few hundred bytes per
/// endpoint, well under a megabyte at 250 pods; anything this big is not a state file, and
/// reading it whole would cost that much memory before the first packet is traced.
pub const MAX_STATE_FILE: u64 = 64 << 20;

/// A pod found in the state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTarget {
    pub namespace: String,
    pub name: String,
    /// Its addresses, in file order, without duplicates.
    pub ips: Vec<IpAddr>,
    /// Host side of its veth (`azv…`), when the file names one.
    pub host_ifname: Option<String>,
}

impl PodTarget {
    /// `namespace/name`, as the JSON `pod` field writes it. Raw, as the state file has it:
    /// print it through [`crate::util::safe`] (the text sink and the start-up line do; JSON
    /// escapes it).
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// How Azure CNI wires pods on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniLayout {
    /// `bridge` or `transparent` (lower case, as found).
    pub mode: String,
    /// The bridge holding the pod veths (`azure0`), bridge mode only.
    pub bridge: Option<String>,
}

/// Every pod the state file lists, sorted by namespace and name.
///
/// # Errors
/// The file is missing, unreadable, too large or corrupt.
pub fn list_pods(state_file: &Path) -> Result<Vec<PodTarget>, StateFileError> {
    Ok(pods(&load(state_file)?))
}

/// Every pod in state-file contents `bytes`, sorted by namespace and name; `path` only names
/// the file in errors. Pure: the fuzz target's entry point.
///
/// # Errors
/// [`StateFileError::Corrupt`].
pub fn parse_pods(path: &Path, bytes: &[u8]) -> Result<Vec<PodTarget>, StateFileError> {
    Ok(pods(&parse(path, bytes)?))
}

/// Finds pod `namespace/name` in the state file.
///
/// # Errors
/// File errors; [`StateFileError::PodNotFound`] (with suggestions) when it is not there;
/// [`StateFileError::NoAddress`] when it has no IP yet.
pub fn resolve_pod(
    state_file: &Path,
    namespace: &str,
    name: &str,
) -> Result<PodTarget, StateFileError> {
    find_pod(
        state_file,
        &read(state_file, MAX_STATE_FILE)?,
        namespace,
        name,
    )
}

/// [`resolve_pod`] on state-file contents already read; `path` only names the file in errors.
///
/// # Errors
/// As [`resolve_pod`], except for reading.
pub fn find_pod(
    path: &Path,
    bytes: &[u8],
    namespace: &str,
    name: &str,
) -> Result<PodTarget, StateFileError> {
    let all = parse_pods(path, bytes)?;
    let found = all
        .iter()
        .find(|p| p.namespace == namespace && p.name == name);
    match found {
        Some(pod) if pod.ips.is_empty() => Err(StateFileError::NoAddress {
            path: path.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }),
        Some(pod) => Ok(pod.clone()),
        None => Err(StateFileError::PodNotFound(Box::new(not_found(
            &path.display().to_string(),
            &all,
            namespace,
            name,
        )))),
    }
}

/// The CNI's mode and bridge, from the first network of the state file that names a mode;
/// `None` when the file cannot be read or names none.
#[must_use]
pub fn cni_layout(state_file: &Path) -> Option<CniLayout> {
    layout(&load(state_file).ok()?)
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
