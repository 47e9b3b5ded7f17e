//! The few Kubernetes API calls the plugin makes, over a blocking HTTP client (ureq, rustls):
//! read a pod, create one, follow its log, delete it.

use std::{fmt::Write as _, io::Read, time::Duration};

use serde_json::Value;
use ureq::{
    Agent,
    tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig},
};

use super::kubeconfig::ClusterAccess;

/// How long connecting and each non-streaming call may take, unless the caller says.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Failures talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the kubeconfig's {what} is not usable PEM")]
    Pem { what: &'static str },
    #[error("{method} {path}: cannot reach the API server {server}: {source}")]
    Transport {
        method: &'static str,
        path: String,
        server: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("{method} {path}: the API server answered {code}: {message}")]
    Status {
        method: &'static str,
        path: String,
        code: u16,
        message: String,
    },
    #[error("{method} {path}: the answer is not JSON: {reason}")]
    Decode {
        method: &'static str,
        path: String,
        reason: String,
    },
}

impl ApiError {
    /// The HTTP status, for answers that were errors.
    #[must_use]
    pub const fn code(&self) -> Option<u16> {
        match self {
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A client for one API server as one user.
pub struct Api {
    agent: Agent,
    /// Limit of each non-streaming call, connecting and name resolution included.
    call_timeout: Duration,
    server: String,
    authorization: Option<String>,
}

impl Api {
    /// A client for `access`: its CA (or no verification when `insecure-skip-tls-verify`),
    /// client certificate and bearer token. Connecting and each non-streaming call (name
    /// resolution included) end after `call_timeout` ([`CALL_TIMEOUT`] for most callers).
    /// The User-Agent is `program/VERSION` (`program`: the calling binary's name).
    ///
    /// # Errors
    /// A certificate or key is not PEM.
    pub fn new(
        access: &ClusterAccess,
        call_timeout: Duration,
        program: &str,
    ) -> Result<Self, ApiError> {
        let mut tls = TlsConfig::builder().disable_verification(access.insecure_skip_tls_verify);
        if let Some(ca) = &access.ca_pem {
            let certs = certificates(ca, "certificate authority")?;
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        if let Some((cert, key)) = &access.client_cert_pem {
            let chain = certificates(cert, "client certificate")?;
            let key =
                PrivateKey::from_pem(key).map_err(|_| ApiError::Pem { what: "client key" })?;
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        let config = Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_connect(Some(call_timeout))
            .timeout_resolve(Some(call_timeout))
            .user_agent(format!("{program}/{}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            agent: config.new_agent(),
            call_timeout,
            server: access.server.clone(),
            authorization: access.token.as_ref().map(|t| format!("Bearer {t}")),
        })
    }

    /// `GET /api/v1/namespaces/NS/pods/NAME`.
    ///
    /// # Errors
    /// Transport errors, or any answer but 200 (404 included: see [`ApiError::code`]).
    pub fn get_pod(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.json("GET", &pod_path(namespace, Some(name)), None)
    }

    /// The pods of `namespace` (all namespaces: `None`) that `field_selector` (e.g.
    /// `metadata.name=web`, URL-safe) selects, at most [`LIST_LIMIT`] of them.
    ///
    /// # Errors
    /// As [`Api::get_pod`].
    #[allow(
        dead_code,
        reason = "pktrace's pod resolution lists; kubectl-pktrace, which shares this file, does not"
    )]
    pub fn list_pods(
        &self,
        namespace: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let mut path = match namespace {
            Some(ns) => pod_path(ns, None),
            None => "/api/v1/pods".to_owned(),
        };
        let _ = write!(path, "?limit={LIST_LIMIT}");
        if let Some(selector) = field_selector {
            let _ = write!(path, "&fieldSelector={}", selector.replace('=', "%3D"));
        }
        let list = self.json("GET", &path, None)?;
        Ok(match list {
            Value::Object(mut o) => match o.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        })
    }

    /// `GET path` (path and query, URL-safe): any object or list as JSON.
    ///
    /// # Errors
    /// As [`Api::get_pod`].
    #[allow(
        dead_code,
        reason = "pktrace's service resolution reads services; kubectl-pktrace, which shares this file, does not"
    )]
    pub fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.json("GET", path, None)
    }

    /// `POST /api/v1/namespaces/NS/pods`: creates `pod`, returns it as created.
    ///
    /// # Errors
    /// As [`Api::get_pod`] (201 is success).
    pub fn create_pod(&self, namespace: &str, pod: &Value) -> Result<Value, ApiError> {
        self.json("POST", &pod_path(namespace, None), Some(pod))
    }

    /// `DELETE /api/v1/namespaces/NS/pods/NAME`; a pod already gone is not an error.
    ///
    /// # Errors
    /// As [`Api::get_pod`].
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        match self.json("DELETE", &pod_path(namespace, Some(name)), None) {
            Err(e) if e.code() == Some(404) => Ok(()),
            other => other.map(drop),
        }
    }

    /// `GET …/pods/NAME/log?container=C&follow=true`: the log as it is written, until the
    /// container ends.
    ///
    /// # Errors
    /// As [`Api::get_pod`].
    pub fn follow_log(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> Result<impl Read + use<>, ApiError> {
        let path = format!(
            "{}/log?container={container}&follow=true",
            pod_path(namespace, Some(name))
        );
        let response = self.send("GET", &path, None, None)?;
        let (code, body) = (response.status().as_u16(), response.into_body());
        if code != 200 {
            return Err(status_error("GET", &path, code, body.into_reader()));
        }
        Ok(body.into_reader())
    }

    fn json(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        // A little over the resolve and connect limits, so that those report themselves.
        let limit = self.call_timeout + self.call_timeout / 4;
        let response = self.send(method, path, body, Some(limit))?;
        let code = response.status().as_u16();
        let reader = response.into_body().into_reader();
        if !(200..300).contains(&code) {
            return Err(status_error(method, path, code, reader));
        }
        serde_json::from_reader(reader).map_err(|e| ApiError::Decode {
            method,
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
        timeout: Option<Duration>,
    ) -> Result<ureq::http::Response<ureq::Body>, ApiError> {
        let url = format!("{}{path}", self.server);
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Accept", "application/json");
        if let Some(auth) = &self.authorization {
            request = request.header("Authorization", auth);
        }
        let transport = |source| ApiError::Transport {
            method,
            path: path.to_owned(),
            server: self.server.clone(),
            source: Box::new(source),
        };
        let result = match body {
            None => {
                let request = request.body(()).map_err(|e| transport(e.into()))?;
                self.agent.run(
                    self.agent
                        .configure_request(request)
                        .timeout_global(timeout)
                        .build(),
                )
            }
            Some(body) => {
                let request = request
                    .header("Content-Type", "application/json")
                    .body(body.to_string().into_bytes())
                    .map_err(|e| transport(e.into()))?;
                self.agent.run(
                    self.agent
                        .configure_request(request)
                        .timeout_global(timeout)
                        .build(),
                )
            }
        };
        result.map_err(transport)
    }
}

/// The API path of pods in `namespace`, or of one pod.
/// Most pods one list asks for (a "did you mean" needs names, not a whole cluster).
#[allow(
    dead_code,
    reason = "pktrace's pod resolution lists; kubectl-pktrace, which shares this file, does not"
)]
pub const LIST_LIMIT: usize = 500;

fn pod_path(namespace: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("/api/v1/namespaces/{namespace}/pods/{n}"),
        None => format!("/api/v1/namespaces/{namespace}/pods"),
    }
}

/// An error from an answer: the `message` of a Kubernetes `Status` body, else the body.
fn status_error(method: &'static str, path: &str, code: u16, body: impl Read) -> ApiError {
    let mut text = String::new();
    let _ = body.take(64 << 10).read_to_string(&mut text);
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.trim().chars().take(300).collect());
    ApiError::Status {
        method,
        path: path.to_owned(),
        code,
        message,
    }
}

fn certificates(pem: &[u8], what: &'static str) -> Result<Vec<Certificate<'static>>, ApiError> {
    let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(_) => Some(Err(ApiError::Pem { what })),
        })
        .collect::<Result<_, _>>()?;
    if certs.is_empty() {
        return Err(ApiError::Pem { what });
    }
    Ok(certs)
}
