//! Where the Kubernetes API is and how to log in: the kubeconfig files of `$KUBECONFIG` (a
//! `:`-separated list, merged as kubectl does: the first file to set a name wins) or
//! `~/.kube/config`, resolved for one context into a [`ClusterAccess`].
//!
//! Supported: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`, and for
//! users `token`, `tokenFile`, `client-certificate(-data)` with `client-key(-data)`, and
//! `exec` credential plugins (kubelogin on AKS) that return a token or a client certificate.

use std::{
    collections::HashMap,
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use base64::Engine as _;
use serde::Deserialize;

/// Failures to find or use the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error(
        "no kubeconfig: set KUBECONFIG or --kubeconfig, or create ~/.kube/config (e.g. `az aks \
         get-credentials`)"
    )]
    Missing,
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid kubeconfig: {reason}")]
    Parse { path: String, reason: String },
    #[error("no current context in the kubeconfig: pass --context NAME")]
    NoContext,
    #[error("{kind} '{name}' is not in the kubeconfig")]
    NotFound { kind: &'static str, name: String },
    #[error("{what} of {name} is not valid base64")]
    Base64 { what: &'static str, name: String },
    #[error("the credential plugin `{command}` failed: {reason}")]
    Exec { command: String, reason: String },
}

/// Everything needed to talk to one cluster as one user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterAccess {
    /// `https://host:port` (or `http://` for tests), without a trailing slash.
    pub server: String,
    /// PEM of the CA certificates to trust; `None`: the usual web roots.
    pub ca_pem: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    pub token: Option<String>,
    /// PEM of the client certificate chain and of its key.
    pub client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The context's namespace, if it sets one.
    pub namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    current_context: Option<String>,
    #[serde(default)]
    clusters: Option<Vec<Named<Cluster>>>,
    #[serde(default)]
    contexts: Option<Vec<Named<Context>>>,
    #[serde(default)]
    users: Option<Vec<Named<User>>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context", alias = "user")]
    #[serde(default)]
    item: Option<T>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
    namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    exec: Option<Exec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Exec {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Option<Vec<EnvVar>>,
    api_version: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
struct EnvVar {
    name: String,
    value: String,
}

/// An entry and the directory of the file it came from (relative paths are relative to it).
#[derive(Clone, Debug)]
struct Entry<T> {
    item: T,
    dir: PathBuf,
}

/// The merged kubeconfig.
#[derive(Debug, Default)]
pub struct Kubeconfig {
    current_context: Option<String>,
    clusters: HashMap<String, Entry<Cluster>>,
    contexts: HashMap<String, Entry<Context>>,
    users: HashMap<String, Entry<User>>,
}

/// The kubeconfig files to read: `explicit`, else `$KUBECONFIG`'s list, else
/// `~/.kube/config`.
#[must_use]
pub fn paths(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_owned()];
    }
    if let Some(list) = env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    env::var_os("HOME")
        .map(|h| vec![PathBuf::from(h).join(".kube/config")])
        .unwrap_or_default()
}

impl Kubeconfig {
    /// Reads and merges `paths`; files of a `$KUBECONFIG` list that do not exist are skipped
    /// (as kubectl does), but at least one must.
    ///
    /// # Errors
    /// None exists, or one cannot be read or parsed.
    pub fn load(paths: &[PathBuf]) -> Result<Self, KubeconfigError> {
        let mut merged = Self::default();
        let mut found = false;
        for path in paths {
            let text = match fs::read_to_string(path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && paths.len() > 1 => continue,
                Err(source) => {
                    return Err(KubeconfigError::Read {
                        path: path.display().to_string(),
                        source,
                    });
                }
            };
            found = true;
            let dir = path.parent().map_or_else(PathBuf::new, Path::to_owned);
            merged
                .add(&text, &dir)
                .map_err(|reason| KubeconfigError::Parse {
                    path: path.display().to_string(),
                    reason,
                })?;
        }
        if found {
            Ok(merged)
        } else {
            Err(KubeconfigError::Missing)
        }
    }

    /// Adds one file's content (YAML or JSON); names already known keep their first value.
    fn add(&mut self, text: &str, dir: &Path) -> Result<(), String> {
        fn merge<T>(
            into: &mut HashMap<String, Entry<T>>,
            items: Option<Vec<Named<T>>>,
            dir: &Path,
        ) {
            for n in items.unwrap_or_default() {
                if let Some(item) = n.item {
                    into.entry(n.name).or_insert_with(|| Entry {
                        item,
                        dir: dir.to_owned(),
                    });
                }
            }
        }
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
        };
        if self.current_context.is_none() {
            self.current_context = file.current_context.filter(|c| !c.is_empty());
        }
        merge(&mut self.clusters, file.clusters, dir);
        merge(&mut self.contexts, file.contexts, dir);
        merge(&mut self.users, file.users, dir);
        Ok(())
    }

    /// How to reach the cluster of `context` (the current context when `None`).
    ///
    /// # Errors
    /// The context, its cluster or user is missing, a file it names cannot be read, or the
    /// credential plugin failed.
    pub fn access(&self, context: Option<&str>) -> Result<ClusterAccess, KubeconfigError> {
        let name = context
            .or(self.current_context.as_deref())
            .ok_or(KubeconfigError::NoContext)?;
        let ctx = self
            .contexts
            .get(name)
            .ok_or_else(|| not_found("context", name))?;
        let cluster = self
            .clusters
            .get(&ctx.item.cluster)
            .ok_or_else(|| not_found("cluster", &ctx.item.cluster))?;
        let mut access = ClusterAccess {
            server: cluster.item.server.trim_end_matches('/').to_owned(),
            insecure_skip_tls_verify: cluster.item.insecure_skip_tls_verify,
            namespace: ctx.item.namespace.clone().filter(|n| !n.is_empty()),
            ..ClusterAccess::default()
        };
        let c = &cluster.item;
        access.ca_pem = data_or_file(
            c.certificate_authority_data.as_deref(),
            c.certificate_authority.as_deref(),
            &cluster.dir,
            "certificate-authority-data",
            &ctx.item.cluster,
        )?;
        if ctx.item.user.is_empty() {
            return Ok(access);
        }
        let user = self
            .users
            .get(&ctx.item.user)
            .ok_or_else(|| not_found("user", &ctx.item.user))?;
        user_credentials(&user.item, &user.dir, &ctx.item.user, &mut access)?;
        Ok(access)
    }
}

fn not_found(kind: &'static str, name: &str) -> KubeconfigError {
    KubeconfigError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

fn user_credentials(
    u: &User,
    dir: &Path,
    name: &str,
    access: &mut ClusterAccess,
) -> Result<(), KubeconfigError> {
    access.token = match (&u.token, &u.token_file) {
        (Some(t), _) if !t.is_empty() => Some(t.clone()),
        (_, Some(file)) => Some(read(&dir.join(file))?.trim().to_owned()),
        _ => None,
    };
    let cert = data_or_file(
        u.client_certificate_data.as_deref(),
        u.client_certificate.as_deref(),
        dir,
        "client-certificate-data",
        name,
    )?;
    let key = data_or_file(
        u.client_key_data.as_deref(),
        u.client_key.as_deref(),
        dir,
        "client-key-data",
        name,
    )?;
    if let (Some(cert), Some(key)) = (cert, key) {
        access.client_cert_pem = Some((cert, key));
    }
    if let Some(exec) = &u.exec
        && access.token.is_none()
        && access.client_cert_pem.is_none()
    {
        run_exec(exec, dir, access)?;
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, KubeconfigError> {
    fs::read_to_string(path).map_err(|source| KubeconfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Inline base64 `data`, else the content of `file` (relative to `dir`).
fn data_or_file(
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
    what: &'static str,
    name: &str,
) -> Result<Option<Vec<u8>>, KubeconfigError> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let clean: String = data.chars().filter(|c| !c.is_whitespace()).collect();
        return base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map(Some)
            .map_err(|_| KubeconfigError::Base64 {
                what,
                name: name.to_owned(),
            });
    }
    match file.filter(|f| !f.is_empty()) {
        Some(f) => {
            let path = dir.join(f);
            fs::read(&path)
                .map(Some)
                .map_err(|source| KubeconfigError::Read {
                    path: path.display().to_string(),
                    source,
                })
        }
        None => Ok(None),
    }
}

/// Runs an exec credential plugin (client.authentication.k8s.io) and takes the token or
/// client certificate it prints.
fn run_exec(exec: &Exec, dir: &Path, access: &mut ClusterAccess) -> Result<(), KubeconfigError> {
    let command = if exec.command.contains('/') && Path::new(&exec.command).is_relative() {
        dir.join(&exec.command)
    } else {
        PathBuf::from(&exec.command)
    };
    let failed = |reason: String| KubeconfigError::Exec {
        command: exec.command.clone(),
        reason,
    };
    let api = exec
        .api_version
        .as_deref()
        .unwrap_or("client.authentication.k8s.io/v1");
    let info = serde_json::json!({"apiVersion": api, "kind": "ExecCredential",
                                  "spec": {"interactive": false}});
    let mut cmd = Command::new(&command);
    cmd.args(&exec.args)
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for var in exec.env.iter().flatten() {
        cmd.env(&var.name, &var.value);
    }
    let out = cmd.output().map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(format!("it exited with {}", out.status)));
    }
    let cred: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| failed(format!("its output is not an ExecCredential: {e}")))?;
    let status = &cred["status"];
    let text = |k: &str| {
        status[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if let Some(token) = text("token") {
        access.token = Some(token);
    } else if let (Some(cert), Some(key)) = (text("clientCertificateData"), text("clientKeyData")) {
        access.client_cert_pem = Some((cert.into_bytes(), key.into_bytes()));
    } else {
        return Err(failed(
            "it returned neither a token nor a client certificate".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
