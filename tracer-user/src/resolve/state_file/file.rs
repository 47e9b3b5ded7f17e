//! Reading the state file (bounded: [`super::MAX_STATE_FILE`]) and the part of its JSON shape
//! pktrace reads; every field optional, unknown ones ignored.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{self, Read as _},
    net::IpAddr,
    path::Path,
};

use serde::Deserialize;

use super::{CniLayout, MAX_STATE_FILE, PodTarget, StateFileError};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct StateFile {
    #[serde(rename = "Network")]
    network: Option<Network>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Network {
    #[serde(rename = "ExternalInterfaces")]
    external_interfaces: Option<BTreeMap<String, ExternalInterface>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ExternalInterface {
    #[serde(rename = "BridgeName")]
    bridge_name: Option<String>,
    #[serde(rename = "Networks")]
    networks: Option<BTreeMap<String, NetworkInfo>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct NetworkInfo {
    #[serde(rename = "Mode")]
    mode: Option<String>,
    #[serde(rename = "Endpoints")]
    endpoints: Option<BTreeMap<String, Endpoint>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Endpoint {
    #[serde(rename = "PODName")]
    pod_name: Option<String>,
    #[serde(rename = "PODNameSpace")]
    pod_namespace: Option<String>,
    #[serde(rename = "IPAddresses")]
    ip_addresses: Option<Vec<Option<IpEntry>>>,
    #[serde(rename = "HostIfName")]
    host_ifname: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct IpEntry {
    #[serde(rename = "IP")]
    ip: Option<String>,
}

/// Reads the state file, refusing one over `limit` bytes without reading it (or, when its size
/// says less than it holds, as soon as the limit is passed).
pub(super) fn read(path: &Path, limit: u64) -> Result<Vec<u8>, StateFileError> {
    let failed = |err: io::Error| match err.kind() {
        io::ErrorKind::NotFound => StateFileError::Missing {
            path: path.to_owned(),
        },
        _ => StateFileError::Unreadable {
            path: path.to_owned(),
            err,
        },
    };
    let too_large = |size: u64| StateFileError::TooLarge {
        path: path.to_owned(),
        size,
        limit,
    };
    let file = File::open(path).map_err(failed)?;
    let declared = file.metadata().map_err(failed)?.len();
    if declared > limit {
        return Err(too_large(declared));
    }
    // The size can be wrong (a file being rewritten, a device, a FIFO): read at most one byte
    // past the limit.
    let mut bytes = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit {
        return Err(too_large(read));
    }
    Ok(bytes)
}

/// Parses state-file contents; `path` only names the file in errors.
pub(super) fn parse(path: &Path, bytes: &[u8]) -> Result<StateFile, StateFileError> {
    let state: Option<StateFile> =
        serde_json::from_slice(bytes).map_err(|err| StateFileError::Corrupt {
            path: path.to_owned(),
            line: err.line(),
            column: err.column(),
            err,
        })?;
    Ok(state.unwrap_or_default())
}

pub(super) fn load(path: &Path) -> Result<StateFile, StateFileError> {
    parse(path, &read(path, MAX_STATE_FILE)?)
}

fn networks(state: &StateFile) -> impl Iterator<Item = (&ExternalInterface, &NetworkInfo)> {
    let ifs = state
        .network
        .as_ref()
        .and_then(|n| n.external_interfaces.as_ref());
    ifs.into_iter().flat_map(BTreeMap::values).flat_map(|ext| {
        ext.networks
            .iter()
            .flat_map(BTreeMap::values)
            .map(move |net| (ext, net))
    })
}

/// Every pod endpoint of the file, merged per `namespace/name`, sorted.
pub(super) fn pods(state: &StateFile) -> Vec<PodTarget> {
    let mut by_name: BTreeMap<(String, String), PodTarget> = BTreeMap::new();
    let endpoints =
        networks(state).flat_map(|(_, net)| net.endpoints.iter().flat_map(BTreeMap::values));
    for ep in endpoints {
        let (Some(name), Some(namespace)) = (
            nonempty(ep.pod_name.as_ref()),
            nonempty(ep.pod_namespace.as_ref()),
        ) else {
            continue;
        };
        let pod = by_name
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| PodTarget {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                ips: Vec::new(),
                host_ifname: None,
            });
        let ips = ep.ip_addresses.iter().flatten().flatten();
        for ip in ips.filter_map(|e| e.ip.as_deref()?.trim().parse::<IpAddr>().ok()) {
            if !pod.ips.contains(&ip) {
                pod.ips.push(ip);
            }
        }
        if pod.host_ifname.is_none() {
            pod.host_ifname = nonempty(ep.host_ifname.as_ref()).map(str::to_owned);
        }
    }
    by_name.into_values().collect()
}

fn nonempty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

/// The mode and bridge of the first network that names a mode.
pub(super) fn layout(state: &StateFile) -> Option<CniLayout> {
    networks(state).find_map(|(ext, net)| {
        let mode = nonempty(net.mode.as_ref())?.to_ascii_lowercase();
        let bridge = nonempty(ext.bridge_name.as_ref()).map(str::to_owned);
        Some(CniLayout { mode, bridge })
    })
}
