//! A fake Kubernetes API server on 127.0.0.1 (std `TcpListener`, HTTP/1.1 by hand, optionally
//! TLS with rustls) serving the endpoints the plugin uses, recording every request.
//!
//! It plays one [`Scenario`]: the target pod (or 404), the statuses the pktrace pod goes
//! through while it starts, the log pktrace writes (optionally held open until the pod is
//! deleted, as a following log is), and the pod's status once pktrace has ended.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Condvar, Mutex, PoisonError},
    thread,
    time::Duration,
};

use rustls::{
    ServerConfig, ServerConnection, StreamOwned,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use serde_json::{Value, json};

/// The name the fake server gives the created pod (its `generateName` + this).
pub const SUFFIX: &str = "x7k2q";

/// What the fake cluster does.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    /// The target pod (`GET` of any other name than the created pod); `None`: 404.
    pub target: Option<Value>,
    /// `status` of the created pod on each `GET` while it starts; the last one repeats.
    pub starting: Vec<Value>,
    /// Log lines pktrace writes at once.
    pub log: Vec<String>,
    /// Keep the log open until the pod is deleted (pktrace runs until stopped).
    pub log_until_deleted: bool,
    /// Lines written after the deletion (pktrace's summary after SIGTERM).
    pub log_after_delete: Vec<String>,
    /// The container's exit code once the log has ended.
    pub exit_code: i64,
    /// The bearer token every request must carry (`None`: no check).
    pub token: Option<String>,
    /// What `GET …/pods` lists (pod objects; a namespaced list keeps its namespace's).
    pub pods: Vec<Value>,
    /// Service objects (`GET …/services[/NAME]`).
    pub services: Vec<Value>,
    /// `EndpointSlice` objects (`GET /apis/discovery.k8s.io/v1/…/endpointslices`, by the
    /// `kubernetes.io/service-name` label of the selector).
    pub endpoint_slices: Vec<Value>,
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    #[must_use]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// `METHOD path` without the query.
    #[must_use]
    pub fn route(&self) -> String {
        format!(
            "{} {}",
            self.method,
            self.path.split('?').next().unwrap_or("")
        )
    }
}

#[derive(Default)]
struct State {
    requests: Vec<Request>,
    created: Option<Value>,
    gets_while_starting: usize,
    deleted: bool,
    log_ended: bool,
}

struct Shared {
    scenario: Scenario,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake API server; it stops with the test process.
pub struct FakeApi {
    pub url: String,
    shared: Arc<Shared>,
}

/// TLS settings of the fake server.
pub struct Tls {
    pub cert_pem: &'static [u8],
    pub key_pem: &'static [u8],
    /// Require a client certificate signed by this CA.
    pub client_ca_pem: Option<&'static [u8]>,
}

impl FakeApi {
    /// Starts a plain HTTP server.
    #[must_use]
    pub fn start(scenario: Scenario) -> Self {
        Self::start_with(scenario, None)
    }

    /// Starts a server, over TLS when `tls` is given.
    ///
    /// # Panics
    /// If no port on 127.0.0.1 can be bound, or `tls` holds a certificate or key that does not
    /// parse.
    #[must_use]
    pub fn start_with(scenario: Scenario, tls: Option<Tls>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("address").port();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let config = tls.map(server_config);
        let shared = Arc::new(Shared {
            scenario,
            state: Mutex::default(),
            changed: Condvar::new(),
        });
        let serving = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = Arc::clone(&serving);
                let config = config.clone();
                thread::spawn(move || serve_connection(stream, config, &shared));
            }
        });
        Self {
            url: format!("{scheme}://127.0.0.1:{port}"),
            shared,
        }
    }

    /// Every request so far.
    #[must_use]
    pub fn requests(&self) -> Vec<Request> {
        self.shared.lock().requests.clone()
    }

    /// Waits (up to 10 s) until a request satisfies `pred`.
    ///
    /// # Panics
    /// If no such request came within 10 s.
    pub fn wait_for(&self, pred: impl Fn(&Request) -> bool) {
        let mut state = self.shared.lock();
        for _ in 0..100 {
            if state.requests.iter().any(&pred) {
                return;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        panic!("the expected request never came: {:#?}", state.requests);
    }
}

#[expect(
    clippy::needless_pass_by_value,
    reason = "test helper: the fixture's TLS material is handed over whole"
)]
fn server_config(tls: Tls) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(tls.cert_pem)
        .collect::<Result<_, _>>()
        .expect("cert PEM");
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem).expect("key PEM");
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let builder = match tls.client_ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots.add(cert.expect("CA PEM")).expect("CA");
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(
        builder
            .with_single_cert(certs, key)
            .expect("server certificate"),
    )
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

fn serve_connection(tcp: TcpStream, tls: Option<Arc<ServerConfig>>, shared: &Shared) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
    let stream: Box<dyn Stream> = match tls {
        Some(config) => {
            let Ok(conn) = ServerConnection::new(config) else {
                return;
            };
            Box::new(StreamOwned::new(conn, tcp))
        }
        None => Box::new(tcp),
    };
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        {
            let mut state = shared.lock();
            state.requests.push(request.clone());
        }
        shared.changed.notify_all();
        let keep_going = respond(&request, shared, reader.get_mut());
        if !keep_going {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<Box<dyn Stream>>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut words = line.split_whitespace();
    let (method, path) = (words.next()?.to_owned(), words.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

/// Answers one request; false when the connection is done.
fn respond(request: &Request, shared: &Shared, out: &mut Box<dyn Stream>) -> bool {
    let scenario = &shared.scenario;
    if let Some(token) = &scenario.token
        && request.header("authorization") != Some(&format!("Bearer {token}"))
    {
        return send(out, 401, &status(401, "Unauthorized"));
    }
    if let Some(answer) = services(request, scenario, out) {
        return answer;
    }
    let route = request.route();
    let created_name = shared
        .lock()
        .created
        .as_ref()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned());
    let segments: Vec<&str> = route.split('/').collect();
    match (request.method.as_str(), segments.as_slice()) {
        ("POST", [_, "api", "v1", "namespaces", _, "pods"]) => {
            let mut pod = request.json();
            let name = format!(
                "{}{SUFFIX}",
                pod["metadata"]["generateName"].as_str().unwrap_or("pod-")
            );
            pod["metadata"]["name"] = name.into();
            pod["status"] = json!({"phase": "Pending"});
            shared.lock().created = Some(pod.clone());
            send(out, 201, &pod)
        }
        ("GET", [_, "api", "v1", "pods"]) => send(out, 200, &json!({"items": scenario.pods})),
        ("GET", [_, "api", "v1", "namespaces", ns, "pods"]) => {
            let items: Vec<&Value> = scenario
                .pods
                .iter()
                .filter(|p| p["metadata"]["namespace"] == *ns)
                .collect();
            send(out, 200, &json!({ "items": items }))
        }
        ("GET", [_, "api", "v1", "namespaces", _, "pods", name, "log"])
            if Some(*name) == created_name.as_deref() =>
        {
            stream_log(shared, out);
            false
        }
        ("GET", [_, "api", "v1", "namespaces", _, "pods", name])
            if Some(*name) == created_name.as_deref() =>
        {
            let pod = created_pod(shared);
            match pod {
                Some(pod) => send(out, 200, &pod),
                None => send(out, 404, &status(404, "pods not found")),
            }
        }
        ("GET", [_, "api", "v1", "namespaces", _, "pods", _]) => match &scenario.target {
            Some(pod) => send(out, 200, pod),
            None => send(out, 404, &status(404, "pods \"x\" not found")),
        },
        ("DELETE", [_, "api", "v1", "namespaces", _, "pods", name])
            if Some(*name) == created_name.as_deref() =>
        {
            let gone = {
                let mut state = shared.lock();
                let gone = state.deleted && state.log_ended;
                state.deleted = true;
                gone
            };
            shared.changed.notify_all();
            if gone {
                send(out, 404, &status(404, "pods not found"))
            } else {
                send(out, 200, &json!({"kind": "Pod"}))
            }
        }
        _ => send(
            out,
            404,
            &status(404, "no such route in the fake API server"),
        ),
    }
}

/// The created pod as a GET sees it now, `None` once deleted and ended.
fn created_pod(shared: &Shared) -> Option<Value> {
    let mut state = shared.lock();
    let mut pod = state.created.clone()?;
    if state.deleted && state.log_ended {
        return None;
    }
    let status = if state.log_ended {
        json!({"phase": if shared.scenario.exit_code == 0 { "Succeeded" } else { "Failed" },
               "containerStatuses": [{"name": "pktrace",
                   "state": {"terminated": {"exitCode": shared.scenario.exit_code}}}]})
    } else {
        let starting = &shared.scenario.starting;
        let i = state
            .gets_while_starting
            .min(starting.len().saturating_sub(1));
        state.gets_while_starting += 1;
        starting
            .get(i)
            .cloned()
            .unwrap_or_else(|| json!({"phase": "Running"}))
    };
    pod["status"] = status;
    Some(pod)
}

fn stream_log(shared: &Shared, out: &mut Box<dyn Stream>) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = |out: &mut Box<dyn Stream>, text: &str| {
        let _ = write!(out, "{:x}\r\n{text}\r\n", text.len());
        let _ = out.flush();
    };
    let _ = out.write_all(head.as_bytes());
    for line in &shared.scenario.log {
        chunk(out, &format!("{line}\n"));
    }
    if shared.scenario.log_until_deleted {
        let mut state = shared.lock();
        for _ in 0..100 {
            if state.deleted {
                break;
            }
            state = shared
                .changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        for line in &shared.scenario.log_after_delete {
            chunk(out, &format!("{line}\n"));
        }
    }
    shared.lock().log_ended = true;
    let _ = out.write_all(b"0\r\n\r\n");
    let _ = out.flush();
}

/// Services and `EndpointSlice`s; `None` for any other request.
fn services(request: &Request, scenario: &Scenario, out: &mut Box<dyn Stream>) -> Option<bool> {
    let route = request.route();
    let segments: Vec<&str> = route.split('/').collect();
    let in_ns = |list: &[Value], ns: &str| -> Vec<Value> {
        list.iter()
            .filter(|o| o["metadata"]["namespace"] == *ns)
            .cloned()
            .collect()
    };
    Some(match (request.method.as_str(), segments.as_slice()) {
        ("GET", [_, "api", "v1", "namespaces", ns, "services"]) => {
            send(out, 200, &json!({ "items": in_ns(&scenario.services, ns) }))
        }
        ("GET", [_, "api", "v1", "namespaces", ns, "services", name]) => {
            match in_ns(&scenario.services, ns)
                .into_iter()
                .find(|s| s["metadata"]["name"] == *name)
            {
                Some(svc) => send(out, 200, &svc),
                None => send(out, 404, &status(404, "services not found")),
            }
        }
        (
            "GET",
            [
                _,
                "apis",
                "discovery.k8s.io",
                "v1",
                "namespaces",
                ns,
                "endpointslices",
            ],
        ) => {
            let service = request.path.split("service-name%3D").nth(1).unwrap_or("");
            let items: Vec<Value> = in_ns(&scenario.endpoint_slices, ns)
                .into_iter()
                .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == *service)
                .collect();
            send(out, 200, &json!({ "items": items }))
        }
        _ => return None,
    })
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})
}

fn send(out: &mut Box<dyn Stream>, code: u16, body: &Value) -> bool {
    let body = body.to_string();
    let reason = match code {
        200 => "OK",
        201 => "Created",
        401 => "Unauthorized",
        _ => "Not Found",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())
        .and_then(|()| out.write_all(body.as_bytes()))
        .and_then(|()| out.flush())
        .is_ok()
}
