//! A minimal fake Kubernetes API server for the lab (`xtask lab serve-api`), so that
//! `pktrace --pod` can resolve pods through the API on a node without a CNI state file.
//!
//! `lab up` writes the lab's pod table to [`PODS_FILE`] and a kubeconfig to [`KUBECONFIG`],
//! then starts the server in the node namespace on 127.0.0.1:[`PORT`] (plain HTTP, that
//! namespace's loopback only). It serves, to requests bearing [`TOKEN`]:
//! `GET /api/v1/namespaces/{ns}/pods/{name}`, `GET /api/v1/namespaces/{ns}/pods` and
//! `GET /api/v1/pods`, as Pod and `PodList` objects (`spec.nodeName`, `status.hostIP(s)`,
//! `status.podIP(s)`, `phase: Running`). The pod table is re-read on every request, so a
//! rewritten [`PODS_FILE`] (pods added or removed while the lab runs) shows at once. Besides
//! the node's pods it knows [`REMOTE_POD`], scheduled on another node.

use std::{
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use super::{
    servers,
    topology::{NODE_IP, NODE_NS, Pod},
};

/// The kubeconfig pointing at the lab's API server (from inside `pkt-node`).
pub const KUBECONFIG: &str = "/run/pktrace-lab/kubeconfig";
/// The pod table the server answers from (JSON lines are not needed: one array).
pub const PODS_FILE: &str = "/run/pktrace-lab/pods.json";
/// The port on `pkt-node`'s 127.0.0.1 (kubectl proxy's, as it is plain HTTP too).
pub const PORT: u16 = 8001;
/// The bearer token the server requires.
pub const TOKEN: &str = "pktrace-lab-token";
/// The namespace the server runs in.
pub const NETNS: &str = NODE_NS;
/// The lab node's name (`spec.nodeName` of its pods).
pub const NODE_NAME: &str = "pkt-node";
/// A pod the API knows on another node: `default/remote-web` on `pkt-node-2`.
pub const REMOTE_POD: RemotePod = RemotePod {
    namespace: "default",
    name: "remote-web",
    ip: Ipv4Addr::new(10, 13, 77, 12),
    node: "pkt-node-2",
    host_ip: Ipv4Addr::new(10, 13, 77, 4),
};
/// The key of the server's pid, ready and log files (`pids/kube-api.pid`, …).
pub const KEY: &str = "kube-api";

/// Connections handled at once; beyond this, connections are closed unanswered.
const MAX_CONNECTIONS: usize = 32;
/// Socket time-out for reading a request and writing the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request head read.
const MAX_HEAD: u64 = 16 << 10;

/// A pod on another node, known only to the API.
#[derive(Clone, Copy, Debug)]
pub struct RemotePod {
    pub namespace: &'static str,
    pub name: &'static str,
    pub ip: Ipv4Addr,
    pub node: &'static str,
    pub host_ip: Ipv4Addr,
}

/// The pod table of `pods` (this node) plus [`REMOTE_POD`].
#[must_use]
pub fn pod_table(pods: &[Pod]) -> Value {
    let mut rows: Vec<Value> = pods
        .iter()
        .map(|p| row(p.namespace, p.name, p.ip, NODE_NAME, NODE_IP))
        .collect();
    let r = REMOTE_POD;
    rows.push(row(r.namespace, r.name, r.ip, r.node, r.host_ip));
    Value::Array(rows)
}

fn row(namespace: &str, name: &str, ip: Ipv4Addr, node: &str, host_ip: Ipv4Addr) -> Value {
    json!({"namespace": namespace, "name": name, "ip": ip.to_string(), "node": node,
           "hostIP": host_ip.to_string()})
}

/// The kubeconfig of the lab's API server.
#[must_use]
pub fn kubeconfig() -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: pktrace-lab\nclusters:\n- name: \
         pktrace-lab\n  cluster:\n    server: http://127.0.0.1:{PORT}\ncontexts:\n- name: \
         pktrace-lab\n  context:\n    cluster: pktrace-lab\n    user: lab\n    namespace: \
         default\nusers:\n- name: lab\n  user:\n    token: {TOKEN}\n"
    )
}

/// Writes [`PODS_FILE`] for `pods` and [`KUBECONFIG`].
///
/// # Errors
/// If either file cannot be written.
pub fn write_files(pods: &[Pod]) -> Result<()> {
    write_pods(pods)?;
    fs::write(KUBECONFIG, kubeconfig()).with_context(|| format!("writing {KUBECONFIG}"))
}

/// Replaces [`PODS_FILE`] atomically with the table of `pods` (the running server answers
/// from it at its next request: `lab pod add|del` call this).
///
/// # Errors
/// If the table cannot be written or moved into place.
pub fn write_pods(pods: &[Pod]) -> Result<()> {
    let table = serde_json::to_string_pretty(&pod_table(pods))?;
    let tmp = format!("{PODS_FILE}.tmp");
    fs::write(&tmp, table).with_context(|| format!("writing {tmp}"))?;
    fs::rename(&tmp, PODS_FILE).with_context(|| format!("replacing {PODS_FILE}"))
}

/// The Pod object of a row of the table (a dual-stack pod's row has `ip6` too: its second
/// `podIPs` entry).
fn pod_object(row: &Value) -> Value {
    let s = |k: &str| row[k].as_str().unwrap_or("").to_owned();
    let mut pod_ips = vec![json!({"ip": s("ip")})];
    if let Some(ip6) = row["ip6"].as_str() {
        pod_ips.push(json!({"ip": ip6}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": s("name"), "namespace": s("namespace"),
                     "uid": format!("00000000-0000-4000-8000-{:012x}", fnv(&format!("{}/{}", s("namespace"), s("name"))))},
        "spec": {"nodeName": s("node"), "containers": [{"name": s("name")}]},
        "status": {"phase": "Running", "hostIP": s("hostIP"), "hostIPs": [{"ip": s("hostIP")}],
                   "podIP": s("ip"), "podIPs": pod_ips}
    })
}

/// A stable 48-bit hash for made-up UIDs.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) & 0xffff_ffff_ffff
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// The answer to `GET path` with the table `pods`: status code and body.
fn route(path: &str, pods: &[Value]) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let list = |items: Vec<Value>| {
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"},
               "items": items})
    };
    match parts.as_slice() {
        ["api", "v1", "pods"] => (200, list(pods.iter().map(pod_object).collect())),
        ["api", "v1", "namespaces", ns, "pods"] => {
            let items = pods.iter().filter(|p| p["namespace"] == *ns);
            (200, list(items.map(pod_object).collect()))
        }
        ["api", "v1", "namespaces", ns, "pods", name] => {
            match pods
                .iter()
                .find(|p| p["namespace"] == *ns && p["name"] == *name)
            {
                Some(p) => (200, pod_object(p)),
                None => (
                    404,
                    status(404, "NotFound", &format!("pods \"{name}\" not found")),
                ),
            }
        }
        _ => (
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    }
}

/// Serves on 127.0.0.1:`port` from `pods_file` until killed; creates `ready_file` once
/// listening.
///
/// # Errors
/// If the port cannot be bound or `ready_file` cannot be created.
pub fn serve(port: u16, pods_file: &Path, ready_file: Option<&Path>) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    if let Some(ready) = ready_file {
        fs::write(ready, b"").with_context(|| format!("creating {}", ready.display()))?;
    }
    let busy = Arc::new(AtomicUsize::new(0));
    let pods_file: Arc<Path> = Arc::from(pods_file);
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (busy, pods_file) = (Arc::clone(&busy), Arc::clone(&pods_file));
        thread::spawn(move || {
            let _ = answer(stream, &pods_file);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(())
}

/// Reads one request and answers it (`Connection: close`).
#[expect(
    clippy::needless_pass_by_value,
    reason = "owns the connection so that it closes once answered (`Connection: close`)"
)]
fn answer(stream: TcpStream, pods_file: &Path) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new((&stream).take(MAX_HEAD));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let mut authorized = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.trim().eq_ignore_ascii_case("authorization")
            && v.trim() == format!("Bearer {TOKEN}")
        {
            authorized = true;
        }
    }
    let (code, body) = if !authorized {
        (401, status(401, "Unauthorized", "Unauthorized"))
    } else if method != "GET" {
        (
            405,
            status(
                405,
                "MethodNotAllowed",
                "the lab API server only reads pods",
            ),
        )
    } else {
        let pods: Vec<Value> = fs::read(pods_file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        route(path, &pods)
    };
    let body = body.to_string();
    let reason = match code {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// Writes the pod table of `pods` and the kubeconfig, then starts the server in [`NETNS`]
/// and waits until it listens.
///
/// # Errors
/// If the files cannot be written, or the server does not start and listen.
pub fn start(pods: &[Pod]) -> Result<i32> {
    write_files(pods)?;
    let args = [
        "lab",
        "serve-api",
        "--port",
        &PORT.to_string(),
        "--pods",
        PODS_FILE,
    ];
    servers::spawn(KEY, NETNS, args.iter().map(|a| (*a).to_owned()).collect())
}

/// Whether the server runs (its recorded pid is alive in [`NETNS`]).
#[must_use]
pub fn is_running() -> bool {
    servers::is_running_as(KEY, NETNS)
}

/// The server's recorded pid.
#[must_use]
pub fn pid() -> Option<i32> {
    servers::recorded_pid(KEY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{PODS, UBUNTU};

    #[test]
    fn answers_pods_lists_and_errors_like_the_api() {
        let table = pod_table(&PODS);
        let pods = table.as_array().unwrap();
        let (code, pod) = route("/api/v1/namespaces/default/pods/ubuntu", pods);
        assert_eq!(code, 200);
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["status"]["podIPs"][0]["ip"], UBUNTU.ip.to_string());
        assert_eq!(pod["status"]["hostIP"], NODE_IP.to_string());
        assert_eq!(pod["spec"]["nodeName"], NODE_NAME);
        let (code, remote) = route("/api/v1/namespaces/default/pods/remote-web?x=1", pods);
        assert_eq!(
            (code, remote["spec"]["nodeName"].as_str()),
            (200, Some("pkt-node-2"))
        );
        let (code, status) = route("/api/v1/namespaces/default/pods/nope", pods);
        assert_eq!((code, status["code"].as_i64()), (404, Some(404)));
        assert_eq!(status["message"], "pods \"nope\" not found");
        let (_, list) = route("/api/v1/namespaces/kube-system/pods", pods);
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        let (_, all) = route("/api/v1/pods", pods);
        assert_eq!(all["items"].as_array().unwrap().len(), PODS.len() + 1);
        assert_eq!(route("/apis/apps/v1/deployments", pods).0, 404);
    }

    #[test]
    fn a_dual_stack_row_has_both_pod_ips() {
        let mut table = pod_table(&PODS);
        table[0]["ip6"] = "fd13:76::2e".into();
        let (_, pod) = route(
            "/api/v1/namespaces/default/pods/ubuntu",
            table.as_array().unwrap(),
        );
        let ips: Vec<&str> = pod["status"]["podIPs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["ip"].as_str())
            .collect();
        assert_eq!(ips, [UBUNTU.ip.to_string().as_str(), "fd13:76::2e"]);
        assert_eq!(pod["status"]["podIP"], UBUNTU.ip.to_string());
    }

    #[test]
    fn serves_over_http_with_the_token() {
        let dir = std::env::temp_dir().join(format!("xtask-api-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (pods_file, ready) = (dir.join("pods.json"), dir.join("ready"));
        fs::write(&pods_file, pod_table(&PODS).to_string()).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (p, r) = (pods_file.clone(), ready.clone());
        thread::spawn(move || serve(port, &p, Some(&r)));
        for _ in 0..200 {
            if ready.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let get = |auth: &str| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                s,
                "GET /api/v1/namespaces/default/pods/ubuntu HTTP/1.1\r\nHost: x\r\n{auth}\r\n"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get(&format!("Authorization: Bearer {TOKEN}\r\n"));
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\"podIP\":\"10.13.76.46\""), "{ok}");
        let denied = get("");
        assert!(
            denied.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{denied}"
        );
        // The table is re-read: a pod removed from the file is gone at once.
        fs::write(&pods_file, "[]").unwrap();
        assert!(get(&format!("Authorization: Bearer {TOKEN}\r\n")).starts_with("HTTP/1.1 404"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_kubeconfig_points_at_the_server() {
        let kc = kubeconfig();
        assert!(
            kc.contains(&format!("server: http://127.0.0.1:{PORT}")),
            "{kc}"
        );
        assert!(kc.contains(&format!("token: {TOKEN}")), "{kc}");
    }
}
