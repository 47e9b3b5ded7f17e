//! The short-lived pod that runs pktrace on the target's node, like `kubectl debug node/…`:
//! pinned to the node, in the node's network and PID namespaces, privileged, with the host
//! paths pktrace reads. The same mounts as `deploy/daemonset.yaml`.

use serde_json::{Value, json};

/// The container's name (for the log).
pub const CONTAINER: &str = "pktrace";
/// Label on every pod the plugin creates (`kubectl delete pod -l …` cleans up by hand).
pub const LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "kubectl-pktrace");

/// Host paths mounted at the same place in the container: (volume name, path, hostPath
/// type, read-only).
pub const HOST_MOUNTS: [(&str, &str, &str, bool); 4] = [
    // pktrace pins nothing today; mounted so a pinned program or map would outlive the pod.
    ("bpffs", "/sys/fs/bpf", "Directory", false),
    // The kernel's BTF: NAT programs read struct offsets from it.
    ("btf", "/sys/kernel/btf", "Directory", true),
    // Azure CNI's state: `--pod` resolves through it.
    ("azure-cni-state", "/var/run/azure-vnet.json", "File", true),
    // The container runtime: pod resolution when the CNI state does not know the pod.
    (
        "cri-socket",
        "/run/containerd/containerd.sock",
        "Socket",
        false,
    ),
];

/// What to run where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugPod {
    /// Node to run on (the target pod's).
    pub node: String,
    /// Namespace to create the pod in.
    pub namespace: String,
    pub image: String,
    /// pktrace's arguments.
    pub args: Vec<String>,
    /// `namespace/name` of the traced pod, for the pod's annotation and name.
    pub target: (String, String),
}

impl DebugPod {
    /// The pod manifest (`v1/Pod`).
    #[must_use]
    pub fn manifest(&self) -> Value {
        let (mounts, volumes): (Vec<Value>, Vec<Value>) = HOST_MOUNTS
            .iter()
            .map(|&(name, path, kind, read_only)| {
                (
                    json!({"name": name, "mountPath": path, "readOnly": read_only}),
                    json!({"name": name, "hostPath": {"path": path, "type": kind}}),
                )
            })
            .unzip();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": generate_name(&self.target.1),
                "namespace": self.namespace,
                "labels": {LABEL.0: LABEL.1, "app.kubernetes.io/name": "pktrace"},
                "annotations": {"pktrace/target": format!("{}/{}", self.target.0, self.target.1)},
            },
            "spec": {
                "nodeName": self.node,
                "hostNetwork": true,
                "hostPID": true,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "restartPolicy": "Never",
                // SIGTERM on delete: pktrace prints its summary and exits well within this.
                "terminationGracePeriodSeconds": 10,
                // Run on tainted nodes too: the target pod runs there.
                "tolerations": [{"operator": "Exists"}],
                "automountServiceAccountToken": false,
                "containers": [{
                    "name": CONTAINER,
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": self.args,
                    "securityContext": {"privileged": true},
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            },
        })
    }
}

/// `pktrace-<pod>-`, cut so that the server's five random characters keep the name within 63.
fn generate_name(pod: &str) -> String {
    let mut base: String = format!("pktrace-{pod}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(57)
        .collect();
    while base.ends_with('-') {
        base.pop();
    }
    base.push('-');
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_are_dns_labels() {
        assert_eq!(generate_name("ubuntu"), "pktrace-ubuntu-");
        assert_eq!(generate_name("web_0.x"), "pktrace-web-0-x-");
        let long = generate_name(&"a".repeat(100));
        assert!(long.len() <= 58 && long.ends_with("a-"), "{long}");
    }
}
