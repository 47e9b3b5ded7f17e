//! Pod → addresses → host veth, from the Azure CNI state file (`/var/run/azure-vnet.json`):
//! the first source of [`super::resolve`].
//!
//! The file's shape (see `../shared/fixtures/azure-vnet.json`):
//! `Network.ExternalInterfaces.<if>.Networks.<net>.Endpoints.<id>` with `PODName`,
//! `PODNameSpace`, `IPAddresses[{IP, Mask}]`, `HostIfName`; plus `BridgeName` per external
//! interface and `Mode` per network. Only those fields are read; unknown ones are ignored and
//! null or missing ones tolerated, so other CNI versions parse too.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs::File,
    io::{self, Read as _},
    net::IpAddr,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::util::safe;

/// Names listed in an error message before "… and N more".
const LIST_MAX: usize = 12;

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
    /// print it through [`safe`] (the text sink and the start-up line do; JSON escapes it).
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

/// Why the state file could not resolve a pod.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// The state file does not exist.
    #[error(
        "no Azure CNI state file at {}: not an Azure CNI node? use --state-file PATH, or \
         --pod-ip IP to skip pod resolution",
        path.display()
    )]
    Missing { path: PathBuf },
    /// The state file exists but cannot be read.
    #[error(
        "cannot read the Azure CNI state file {}: {err}; run as root, or use --pod-ip IP to \
         skip pod resolution",
        path.display()
    )]
    Unreadable { path: PathBuf, err: io::Error },
    /// The state file is bigger than any real one ([`MAX_STATE_FILE`]).
    #[error(
        "the Azure CNI state file {} is too large ({size} bytes or more, the limit is {} MiB): \
         is --state-file the right file? use --pod-ip IP to skip pod resolution",
        path.display(),
        limit >> 20
    )]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// The state file is not the JSON we expect.
    #[error(
        "the Azure CNI state file {} is corrupt at line {line}, column {column} ({}); \
         if the CNI was writing it, try again, or use --pod-ip IP",
        path.display(),
        json_reason(err)
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        column: usize,
        err: serde_json::Error,
    },
    /// No such pod on this node.
    #[error("{}", not_found_message(.0))]
    PodNotFound(Box<NotFound>),
    /// The pod is there but has no address.
    #[error(
        "pod '{}' in namespace '{}' has no IP address in {}; is it still starting? use \
         --pod-ip IP once it has one",
        safe(name), safe(namespace), path.display()
    )]
    NoAddress {
        path: PathBuf,
        namespace: String,
        name: String,
    },
}

impl StateFileError {
    /// True when the user asked for something that is not there (exit 2); false for a
    /// problem with the node's files (exit 1).
    #[must_use]
    pub const fn is_usage(&self) -> bool {
        matches!(self, Self::PodNotFound(_))
    }

    /// The failure in a few words, after `state file PATH: ` (the resolver's fallback lines).
    #[must_use]
    pub fn brief(&self) -> String {
        match self {
            Self::Missing { .. } => "not found".into(),
            Self::Unreadable { err, .. } => format!("cannot read it: {err}"),
            Self::TooLarge { size, limit, .. } => {
                format!(
                    "too large ({size} bytes or more, the limit is {} MiB)",
                    limit >> 20
                )
            }
            Self::Corrupt {
                line, column, err, ..
            } => format!(
                "corrupt at line {line}, column {column} ({})",
                json_reason(err)
            ),
            Self::PodNotFound(_) => "no such pod on this node".into(),
            Self::NoAddress { .. } => "the pod has no IP address yet".into(),
        }
    }
}

/// What the "pod not found" message needs.
#[derive(Debug)]
pub struct NotFound {
    /// Where the pods were listed: the state file's path, or `crictl`.
    pub source: String,
    pub namespace: String,
    pub name: String,
    /// Pods of that namespace on this node, sorted.
    pub in_namespace: Vec<String>,
    /// Close names ("did you mean").
    pub suggestions: Vec<String>,
    /// Other namespaces holding a pod of exactly that name.
    pub other_namespaces: Vec<String>,
}

/// The message of a pod that is not there: the pods of its namespace, close names ("did you
/// mean") and other namespaces holding that name.
#[must_use]
pub fn not_found_message(nf: &NotFound) -> String {
    let mut m = format!(
        "pod '{}' not found in namespace '{}' on this node (according to {})",
        safe(&nf.name),
        safe(&nf.namespace),
        nf.source
    );
    if !nf.suggestions.is_empty() {
        let names: Vec<String> = nf
            .suggestions
            .iter()
            .map(|s| format!("'{}'", safe(s)))
            .collect();
        let _ = write!(m, "; did you mean {}?", names.join(" or "));
    }
    if !nf.other_namespaces.is_empty() {
        let ns: Vec<String> = nf.other_namespaces.iter().map(|s| safe(s)).collect();
        let _ = write!(
            m,
            "; a pod '{}' exists in namespace {} (use -n {})",
            safe(&nf.name),
            ns.join(", "),
            ns[0]
        );
    }
    if nf.in_namespace.is_empty() {
        let _ = write!(
            m,
            "; this node has no pods in namespace '{}'",
            safe(&nf.namespace)
        );
    } else {
        let _ = write!(
            m,
            "; pods in '{}' here: {}",
            safe(&nf.namespace),
            list(&nf.in_namespace)
        );
    }
    m.push_str("; pktrace only sees pods scheduled on this node (kubectl get pod -o wide)");
    m
}

/// `a, b, c … and 4 more`, names escaped.
fn list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(LIST_MAX).map(|n| safe(n)).collect();
    let mut s = shown.join(", ");
    if names.len() > LIST_MAX {
        let _ = write!(s, " … and {} more", names.len() - LIST_MAX);
    }
    s
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StateFile {
    #[serde(rename = "Network")]
    network: Option<Network>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Network {
    #[serde(rename = "ExternalInterfaces")]
    external_interfaces: Option<BTreeMap<String, ExternalInterface>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ExternalInterface {
    #[serde(rename = "BridgeName")]
    bridge_name: Option<String>,
    #[serde(rename = "Networks")]
    networks: Option<BTreeMap<String, NetworkInfo>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NetworkInfo {
    #[serde(rename = "Mode")]
    mode: Option<String>,
    #[serde(rename = "Endpoints")]
    endpoints: Option<BTreeMap<String, Endpoint>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Endpoint {
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
struct IpEntry {
    #[serde(rename = "IP")]
    ip: Option<String>,
}

/// serde_json's message without its ` at line L column C` tail (printed separately).
fn json_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Reads the state file, refusing one over `limit` bytes without reading it (or, when its size
/// says less than it holds, as soon as the limit is passed).
fn read(path: &Path, limit: u64) -> Result<Vec<u8>, StateFileError> {
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
fn parse(path: &Path, bytes: &[u8]) -> Result<StateFile, StateFileError> {
    let state: Option<StateFile> =
        serde_json::from_slice(bytes).map_err(|err| StateFileError::Corrupt {
            path: path.to_owned(),
            line: err.line(),
            column: err.column(),
            err,
        })?;
    Ok(state.unwrap_or_default())
}

fn load(path: &Path) -> Result<StateFile, StateFileError> {
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
fn pods(state: &StateFile) -> Vec<PodTarget> {
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

/// What to say about pod `namespace/name` missing from `all` (the pods `source` lists).
#[must_use]
pub fn not_found(source: &str, all: &[PodTarget], namespace: &str, name: &str) -> NotFound {
    let in_namespace: Vec<String> = all
        .iter()
        .filter(|p| p.namespace == namespace)
        .map(|p| p.name.clone())
        .collect();
    let mut other_namespaces: Vec<String> = all
        .iter()
        .filter(|p| p.name == name && p.namespace != namespace)
        .map(|p| p.namespace.clone())
        .collect();
    other_namespaces.dedup();
    NotFound {
        source: source.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        suggestions: suggest(name, &in_namespace),
        in_namespace,
        other_namespaces,
    }
}

/// Names within edit distance 2 of `name` (the closest ones), else the names starting with
/// it (`whereami` → the `whereami-…` pods of a deployment).
fn suggest(name: &str, candidates: &[String]) -> Vec<String> {
    let scored: Vec<(usize, &String)> = candidates
        .iter()
        .filter_map(|c| Some((distance_within(name, c, 2)?, c)))
        .collect();
    if let Some(best) = scored.iter().map(|(d, _)| *d).min() {
        return scored
            .into_iter()
            .filter(|(d, _)| *d == best)
            .map(|(_, c)| c.clone())
            .collect();
    }
    if name.is_empty() {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|c| c.starts_with(name))
        .take(LIST_MAX)
        .cloned()
        .collect()
}

/// Levenshtein distance between `a` and `b` when it is at most `max` (names whose lengths
/// differ by more are not compared: a hostile state file's long names cost nothing).
fn distance_within(a: &str, b: &str, max: usize) -> Option<usize> {
    if a.chars().count().abs_diff(b.chars().count()) > max {
        return None;
    }
    Some(strsim::levenshtein(a, b)).filter(|&d| d <= max)
}

/// The CNI's mode and bridge, from the first network of the state file that names a mode;
/// `None` when the file cannot be read or names none.
#[must_use]
pub fn cni_layout(state_file: &Path) -> Option<CniLayout> {
    let state = load(state_file).ok()?;
    networks(&state).find_map(|(ext, net)| {
        let mode = nonempty(net.mode.as_ref())?.to_ascii_lowercase();
        let bridge = nonempty(ext.bridge_name.as_ref()).map(str::to_owned);
        Some(CniLayout { mode, bridge })
    })
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests {
    use std::{fs, sync::atomic::AtomicU32};

    use super::*;

    const FIXTURE: &str = include_str!("../../tests-data/azure-vnet.json");

    /// Writes `content` to a fresh file in the temp dir and returns its path.
    fn file(content: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pktrace-resolve-{}-{n}.json", std::process::id()));
        fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn resolves_the_fixture_pods() {
        let path = file(FIXTURE);
        let cases = [
            ("default", "ubuntu", "10.13.76.46", "azv47c3ee9d512"),
            (
                "default",
                "whereami-564765b89-qfq2k",
                "10.13.76.26",
                "azva4124965a9b",
            ),
            (
                "default",
                "whereami-564765b89-j7bpw",
                "10.13.76.7",
                "azv1a68ecb6fb1",
            ),
            (
                "kube-system",
                "addon-http-application-routing-nginx-ingress-controller-8fx6v2r",
                "10.13.76.17",
                "azv3cd1b2db354",
            ),
        ];
        for (ns, name, ip, veth) in cases {
            let pod = resolve_pod(&path, ns, name).unwrap();
            assert_eq!(pod.ips, [ip.parse::<IpAddr>().unwrap()], "{name}");
            assert_eq!(pod.host_ifname.as_deref(), Some(veth));
            assert_eq!(pod.label(), format!("{ns}/{name}"));
        }
        let all = list_pods(&path).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[0].label(),
            "default/ubuntu",
            "sorted by namespace, then name"
        );
        assert_eq!(
            cni_layout(&path),
            Some(CniLayout {
                mode: "bridge".into(),
                bridge: Some("azure0".into())
            })
        );
    }

    #[test]
    fn pod_not_found_suggests() {
        let path = file(FIXTURE);
        let cases: &[(&str, &str, &[&str], &[&str])] = &[
            ("default", "ubutnu", &["did you mean 'ubuntu'?"], &[]),
            ("default", "ubunt", &["did you mean 'ubuntu'?"], &[]),
            (
                "default",
                "whereami",
                &["did you mean 'whereami-564765b89-j7bpw' or 'whereami-564765b89-qfq2k'?"],
                &[],
            ),
            (
                "kube-system",
                "ubuntu",
                &["exists in namespace default (use -n default)"],
                &["did you mean"],
            ),
            (
                "nope",
                "x",
                &["this node has no pods in namespace 'nope'"],
                &["did you mean"],
            ),
            (
                "default",
                "zzz",
                &[
                    "pods in 'default' here: ubuntu, whereami-564765b89-j7bpw, whereami-564765b89-qfq2k",
                ],
                &["did you mean", "exists in"],
            ),
            (
                "default",
                "evil\u{1b}[2J",
                &["pod 'evil\\u{1b}[2J' not found"],
                &["\u{1b}"],
            ),
        ];
        for (ns, name, has, lacks) in cases {
            let err = resolve_pod(&path, ns, name).unwrap_err();
            assert!(err.is_usage(), "{name}");
            let msg = err.to_string();
            for want in *has {
                assert!(msg.contains(want), "{name}: {msg}");
            }
            for unwanted in *lacks {
                assert!(!msg.contains(unwanted), "{name}: {msg}");
            }
        }
    }

    #[test]
    fn file_errors() {
        let missing = std::env::temp_dir().join("pktrace-no-such-state-file.json");
        let cases: Vec<(PathBuf, &str)> = vec![
            (missing, "not an Azure CNI node? use --state-file PATH"),
            (
                file("{\"Network\": {\n  \"ExternalInterfaces\": [1,"),
                "corrupt at line 2, column",
            ),
            (
                file("{\"Network\": {\"ExternalInterfaces\": {\"eth0\": {\"Networks\": 5}}}}"),
                "corrupt",
            ),
            (std::env::temp_dir(), "cannot read the Azure CNI state file"),
        ];
        for (path, want) in cases {
            let err = resolve_pod(&path, "default", "ubuntu").unwrap_err();
            assert!(!err.is_usage());
            assert!(err.to_string().contains(want), "{err}");
            assert!(err.to_string().contains("--pod-ip IP"), "{err}");
            assert!(err.to_string().matches("at line").count() <= 1, "{err}");
            assert_eq!(cni_layout(&path), None);
        }
    }

    #[test]
    fn tolerates_nulls_missing_fields_and_odd_entries() {
        let cases: &[(&str, usize)] = &[
            ("{}", 0),
            ("null", 0),
            ("{\"Network\": null}", 0),
            ("{\"Network\": {\"ExternalInterfaces\": null}}", 0),
            (
                "{\"Network\": {\"ExternalInterfaces\": {\"eth0\": {\"Networks\": null}}}}",
                0,
            ),
            (
                r#"{"Network":{"ExternalInterfaces":{"eth0":{"Networks":{"azure":{"Endpoints":{
                    "a":{"PODName":"p","PODNameSpace":"ns","IPAddresses":null,"Extra":[1]},
                    "b":{"PODName":"p","PODNameSpace":"ns","IPAddresses":[null,{"IP":"bad"},
                         {"IP":"10.0.0.9","Mask":"////AA=="},{"IP":"10.0.0.9"},{"IP":"fd00::9"}]},
                    "c":{"PODName":"","PODNameSpace":"ns"},
                    "d":{"PODName":null}}}}}}}}"#,
                1,
            ),
        ];
        for (json, n) in cases {
            let pods = list_pods(&file(json)).unwrap();
            assert_eq!(pods.len(), *n, "{json}");
        }
        let path = file(cases[5].0);
        let pod = resolve_pod(&path, "ns", "p").unwrap();
        assert_eq!(
            pod.ips,
            [
                "10.0.0.9".parse::<IpAddr>().unwrap(),
                "fd00::9".parse().unwrap()
            ]
        );
        assert_eq!((pod.host_ifname, cni_layout(&path)), (None, None));
    }

    #[test]
    fn pod_without_address() {
        let path = file(
            r#"{"Network":{"ExternalInterfaces":{"eth0":{"BridgeName":"",
            "Networks":{"azure":{"Mode":"Transparent","Endpoints":{"a":{"PODName":"p","PODNameSpace":"ns"}}}}}}}}"#,
        );
        let err = resolve_pod(&path, "ns", "p").unwrap_err();
        assert!(
            matches!(err, StateFileError::NoAddress { .. }) && !err.is_usage(),
            "{err}"
        );
        assert_eq!(
            cni_layout(&path),
            Some(CniLayout {
                mode: "transparent".into(),
                bridge: None
            })
        );
    }

    #[test]
    fn edit_distance() {
        let cases = [
            ("ubuntu", "ubuntu", Some(0)),
            ("ubutnu", "ubuntu", Some(2)),
            ("ubunt", "ubuntu", Some(1)),
            ("ubuntux", "ubuntu", Some(1)),
            ("whereami", "whereami-564765b89-qfq2k", None),
            ("", "ab", Some(2)),
            ("", "abc", None),
            ("é", "e", Some(1)),
        ];
        for (a, b, want) in cases {
            assert_eq!(distance_within(a, b, 2), want, "{a} {b}");
        }
    }
}
