//! The lab's Azure CNI state file (`azure-vnet.json`), rendered from a template cut from a
//! real node's file, so field names, nesting, indentation and the base64 masks and MACs are
//! exactly those of Azure CNI (bridge mode; transparent mode changes `Mode`, `BridgeName` and
//! the gateway).

use std::{
    fmt::Write as _,
    net::Ipv4Addr,
    time::{SystemTime, UNIX_EPOCH},
};

use super::topology::{NODE_UPLINK_MAC, Pod, Variant};

const DOCUMENT: &str = include_str!("azure-vnet.json.tmpl");
const ENDPOINT: &str = include_str!("azure-vnet-endpoint.json.tmpl");

/// Renders the state file for `pods` with time stamp `now` (bridge mode).
#[must_use]
pub fn render(pods: &[Pod], now: SystemTime) -> String {
    render_with(Variant::AzureBridge, pods, now)
}

/// Renders the state file of `variant`'s pods (bridge or transparent mode: the network's
/// `Mode`, `BridgeName` and the pods' gateway follow the variant).
#[must_use]
pub fn render_variant(variant: Variant, now: SystemTime) -> String {
    render_with(variant, variant.pods(), now)
}

fn render_with(variant: Variant, pods: &[Pod], now: SystemTime) -> String {
    let (subnet, prefix) = variant.pod_cidr();
    let gateway = variant.pod_gateway();
    let mask = base64(&prefix_mask(prefix).octets());
    let endpoints: Vec<String> = pods
        .iter()
        .map(|pod| endpoint(pod, &mask, &gateway.to_string()))
        .collect();
    fill(
        DOCUMENT,
        &[
            ("@ENDPOINTS@", endpoints.join(",\n")),
            ("@TIMESTAMP@", rfc3339(now)),
            ("@MODE@", variant.cni_mode().to_owned()),
            ("@SUBNET@", subnet.to_string()),
            ("@MASK@", mask),
            ("@GATEWAY@", gateway.to_string()),
            ("@SUBNET_CIDR@", format!("{subnet}/{prefix}")),
            ("@BRIDGE@", variant.bridge().unwrap_or_default().to_owned()),
            ("@UPLINK_MAC@", base64(&NODE_UPLINK_MAC)),
        ],
    )
}

fn endpoint(pod: &Pod, mask: &str, gateway: &str) -> String {
    let container_id = container_id(pod);
    fill(
        ENDPOINT,
        &[
            ("@ID@", format!("{}-eth0", &container_id[..8])),
            ("@NETNS_PATH@", format!("/var/run/netns/{}", pod.netns())),
            ("@HOST_IF@", pod.host_if.to_owned()),
            ("@MAC@", base64(&pod.mac())),
            ("@IP@", pod.ip.to_string()),
            ("@MASK@", mask.to_owned()),
            ("@GATEWAY@", gateway.to_owned()),
            ("@CONTAINER_ID@", container_id),
            ("@POD_NAME@", pod.name.to_owned()),
            ("@POD_NAMESPACE@", pod.namespace.to_owned()),
        ],
    )
}

fn fill(template: &str, values: &[(&str, String)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(key, value)
        })
}

/// A stable 32-hex-digit container ID for `pod` (the runtime's IDs look like this).
#[must_use]
pub fn container_id(pod: &Pod) -> String {
    let key = format!("{}/{}", pod.namespace, pod.name);
    format!(
        "{:016x}{:016x}",
        fnv1a(0xcbf2_9ce4_8422_2325, &key),
        fnv1a(0x6c62_272e_07bb_0142, &key)
    )
}

fn fnv1a(seed: u64, text: &str) -> u64 {
    text.bytes().fold(seed, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The netmask of an IPv4 prefix length.
#[must_use]
pub fn prefix_mask(prefix: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0))
}

/// Standard base64 with padding (how Go's `encoding/json` writes `[]byte`, e.g. masks, MACs).
#[must_use]
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `now` as RFC 3339 in UTC with nanoseconds, like the CNI's `TimeStamp`.
#[must_use]
pub fn rfc3339(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let mut out = String::new();
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_nanos()
    );
    out
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
