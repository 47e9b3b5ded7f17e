//! A service through the Kubernetes API: `GET` the Service (its cluster IPs, external IPs,
//! load balancer ingress IPs, ports and node ports) and its `EndpointSlice`s (label
//! `kubernetes.io/service-name`: the ready endpoints' addresses and ports).

use std::net::IpAddr;

use serde_json::Value;

use super::{Endpoint, Front, FrontKind, Service};
use crate::{kubernetes::api::Api, resolve::api::KubeApi};

/// Why the API did not give the service.
#[derive(Debug)]
pub enum ApiMiss {
    /// The API answered: no such service; `names` are the services of the namespace (empty
    /// when it does not list them to us).
    Absent { line: String, names: Vec<String> },
    /// The API could not be asked.
    Unavailable(String),
}

/// Service `namespace/name` and the server that answered.
///
/// # Errors
/// [`ApiMiss`]: absent, or the API could not be asked.
pub fn resolve(kube: &KubeApi, namespace: &str, name: &str) -> Result<(Service, String), ApiMiss> {
    let unavailable = |e: String| ApiMiss::Unavailable(format!("kubernetes API: {e}"));
    let access = kube.access().map_err(|e| unavailable(e.to_string()))?;
    let server = access.server.clone();
    let api = Api::new(&access, kube.timeout, "pktrace").map_err(|e| unavailable(e.to_string()))?;
    let svc_path = format!("/api/v1/namespaces/{namespace}/services");
    let service = match api.get(&format!("{svc_path}/{name}")) {
        Ok(v) => v,
        Err(e) if e.code() == Some(404) => {
            let names = api
                .get(&svc_path)
                .map(|list| item_names(&list))
                .unwrap_or_default();
            return Err(ApiMiss::Absent {
                line: format!(
                    "kubernetes API {server}: service {namespace}/{name} does not exist (404)"
                ),
                names,
            });
        }
        Err(e) => {
            return Err(ApiMiss::Unavailable(format!(
                "kubernetes API {server}: {e}"
            )));
        }
    };
    let slices = api
        .get(&format!(
            "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{name}"
        ))
        .map_err(|e| ApiMiss::Unavailable(format!("kubernetes API {server}: {e}")))?;
    let items = slices["items"].as_array().map_or(&[][..], Vec::as_slice);
    Ok((
        from_objects(&format!("{namespace}/{name}"), &service, items),
        server,
    ))
}

fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn proto_number(p: &Value) -> u8 {
    match p.as_str().unwrap_or("TCP") {
        "UDP" => 17,
        "SCTP" => 132,
        _ => 6,
    }
}

fn port_of(v: &Value) -> Option<u16> {
    v.as_u64().and_then(|p| u16::try_from(p).ok())
}

fn ips(v: &Value) -> Vec<IpAddr> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// The service `label` from its Service object and `EndpointSlice`s (endpoints whose
/// `conditions.ready` is false are left out, as kube-proxy leaves them out).
#[must_use]
pub fn from_objects(label: &str, service: &Value, slices: &[Value]) -> Service {
    let mut fronts = fronts(service);
    let mut endpoints: Vec<Endpoint> = slices.iter().flat_map(slice_endpoints).collect();
    fronts.sort();
    fronts.dedup();
    endpoints.sort();
    endpoints.dedup();
    Service {
        label: label.to_owned(),
        fronts,
        endpoints,
    }
}

/// Every address and port of the Service, and its node ports.
fn fronts(service: &Value) -> Vec<Front> {
    let spec = &service["spec"];
    let mut cluster = ips(&spec["clusterIPs"]);
    if cluster.is_empty() {
        cluster = ips(&Value::Array(vec![spec["clusterIP"].clone()]));
    }
    let lb: Vec<IpAddr> = service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["ip"].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let addrs = [
        (FrontKind::ClusterIp, cluster),
        (FrontKind::External, ips(&spec["externalIPs"])),
        (FrontKind::LoadBalancer, lb),
    ];
    let mut fronts = Vec::new();
    for port in spec["ports"].as_array().map_or(&[][..], Vec::as_slice) {
        let proto = proto_number(&port["protocol"]);
        for (kind, list) in &addrs {
            fronts.extend(list.iter().map(|&a| Front {
                kind: *kind,
                addr: Some(a),
                proto,
                port: port_of(&port["port"]),
            }));
        }
        if let Some(node_port) = port_of(&port["nodePort"]) {
            fronts.push(Front {
                kind: FrontKind::NodePort,
                addr: None,
                proto,
                port: Some(node_port),
            });
        }
    }
    fronts
}

/// The ready endpoints of one `EndpointSlice`, each with each of its ports.
fn slice_endpoints(slice: &Value) -> Vec<Endpoint> {
    let mut ports: Vec<Option<u16>> = slice["ports"]
        .as_array()
        .map(|a| a.iter().map(|p| port_of(&p["port"])).collect())
        .unwrap_or_default();
    if ports.is_empty() {
        ports.push(None);
    }
    let mut out = Vec::new();
    for ep in slice["endpoints"].as_array().map_or(&[][..], Vec::as_slice) {
        if ep["conditions"]["ready"] == Value::Bool(false) {
            continue;
        }
        for addr in ips(&ep["addresses"]) {
            out.extend(ports.iter().map(|&port| Endpoint {
                addr,
                port,
                rule: None,
            }));
        }
    }
    out
}
