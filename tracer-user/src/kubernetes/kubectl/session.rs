//! One `kubectl pktrace` run: find the pod's node, start pktrace there in a privileged pod,
//! stream its output, and delete the pod when pktrace ends, when the user stops (Ctrl-C,
//! SIGTERM: the pod is deleted, pktrace gets SIGTERM and prints its summary, the log ends),
//! or when anything fails.

use std::{
    io::{self, Write},
    sync::{Arc, Mutex, PoisonError},
    thread::sleep,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::pod_spec::{CONTAINER, DebugPod};
use crate::kubernetes::api::{Api, ApiError};

/// How often the pod's status is polled while it starts and ends.
const POLL: Duration = Duration::from_millis(300);
/// How long to wait for the container's exit code once its log has ended.
const EXIT_WAIT: Duration = Duration::from_secs(15);
/// Reasons a container waits for that will not resolve by themselves.
const FATAL_WAITING: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// What the user asked for, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub pod: String,
    /// The node to run on; `None`: the pod's, from the API.
    pub node: Option<String>,
    pub namespace: String,
    /// Where the pktrace pod goes.
    pub debug_namespace: String,
    pub image: String,
    /// pktrace's flags after `--pod POD -n NS`.
    pub pktrace_args: Vec<String>,
    pub start_timeout: Duration,
    /// Print the pod manifest instead of creating it.
    pub dry_run: bool,
}

/// Failures of a run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("pod '{pod}' not found in namespace '{namespace}': check the name and -n NAMESPACE")]
    PodNotFound { namespace: String, pod: String },
    #[error("pod {namespace}/{pod} is not scheduled on a node yet: try again once it is")]
    NotScheduled { namespace: String, pod: String },
    #[error("the API server created a pod without a name")]
    Unnamed,
    #[error(
        "pod {pod} cannot start: {reason}: {message} (check --image; `kubectl describe pod {pod}` \
         has the details)"
    )]
    StartFailed {
        pod: String,
        reason: String,
        message: String,
    },
    #[error(
        "pod {pod} did not start within {secs} s (phase {phase}): `kubectl describe pod {pod}` \
         shows why, e.g. a host path missing on the node"
    )]
    StartTimeout {
        pod: String,
        secs: u64,
        phase: String,
    },
    #[error("writing the output")]
    Output(#[source] io::Error),
}

impl SessionError {
    /// The exit code: 2 for a pod that does not exist (a usage error, as in pktrace), else 1.
    #[must_use]
    pub const fn exit_code(&self) -> u8 {
        match self {
            Self::PodNotFound { .. } => 2,
            _ => 1,
        }
    }
}

/// The pktrace pod, once created.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Created {
    namespace: String,
    name: String,
}

#[derive(Default)]
struct StopState {
    requests: u32,
    created: Option<(Arc<Api>, Created)>,
}

/// Stops a run from another thread (the signal handler, tests): the first request deletes the
/// pktrace pod (now, or as soon as it exists), which ends its log and so the run.
#[derive(Clone, Default)]
pub struct Stop(Arc<Mutex<StopState>>);

impl Stop {
    /// Asks the run to stop; returns how many times it was asked.
    pub fn request(&self) -> u32 {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.requests += 1;
        if state.requests == 1
            && let Some((api, created)) = &state.created
        {
            eprintln!(
                "kubectl-pktrace: stopping: deleting pod {}/{}",
                created.namespace, created.name
            );
            delete(api, created);
        }
        state.requests
    }

    /// True once stopping was asked for.
    #[must_use]
    pub fn requested(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            > 0
    }

    /// Records the created pod; deletes it at once if a stop came first.
    fn created(&self, api: &Arc<Api>, created: &Created) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.created = Some((Arc::clone(api), created.clone()));
        if state.requests > 0 {
            delete(api, created);
        }
    }
}

fn delete(api: &Api, created: &Created) {
    if let Err(e) = api.delete_pod(&created.namespace, &created.name) {
        eprintln!(
            "kubectl-pktrace: deleting pod {}/{} failed: {e}; delete it by hand",
            created.namespace, created.name
        );
    }
}

/// Deletes the pod when the run ends, however it ends.
struct Cleanup<'a> {
    api: &'a Api,
    created: Created,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        delete(self.api, &self.created);
    }
}

/// Runs `plan`: returns pktrace's exit code (0 after a stop), writing its output to `out`.
///
/// # Errors
/// [`SessionError`]; the pod is deleted before returning.
pub fn run(
    plan: &Plan,
    api: &Arc<Api>,
    stop: &Stop,
    out: &mut dyn Write,
) -> Result<u8, SessionError> {
    let node = match &plan.node {
        Some(node) => node.clone(),
        None => node_of(api, plan)?,
    };
    let node = node.as_str();
    let manifest = debug_pod(plan, node).manifest();
    if plan.dry_run {
        let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
        writeln!(out, "{text}").map_err(SessionError::Output)?;
        return Ok(0);
    }
    if stop.requested() {
        return Ok(0);
    }
    let created = api.create_pod(&plan.debug_namespace, &manifest)?;
    let name = created["metadata"]["name"]
        .as_str()
        .ok_or(SessionError::Unnamed)?;
    let created = Created {
        namespace: plan.debug_namespace.clone(),
        name: name.to_owned(),
    };
    let _cleanup = Cleanup {
        api,
        created: created.clone(),
    };
    stop.created(api, &created);
    eprintln!(
        "kubectl-pktrace: pktrace runs on node {node} in pod {}/{} ({})",
        created.namespace, created.name, plan.image
    );
    if !wait_started(api, &created, plan.start_timeout, stop)? {
        return Ok(0);
    }
    let log = api.follow_log(&created.namespace, &created.name, CONTAINER)?;
    match copy(log, out) {
        Ok(()) => {}
        // `| head`: the reader is gone; stop pktrace (the cleanup deletes the pod).
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(0),
        Err(e) if stop.requested() => eprintln!("kubectl-pktrace: log stream ended: {e}"),
        Err(e) => return Err(SessionError::Output(e)),
    }
    let code = exit_code(api, &created, stop);
    Ok(code)
}

/// The node the target pod runs on.
fn node_of(api: &Api, plan: &Plan) -> Result<String, SessionError> {
    let target = match api.get_pod(&plan.namespace, &plan.pod) {
        Err(e) if e.code() == Some(404) => {
            return Err(SessionError::PodNotFound {
                namespace: plan.namespace.clone(),
                pod: plan.pod.clone(),
            });
        }
        other => other?,
    };
    let node = target["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty());
    node.map(str::to_owned)
        .ok_or_else(|| SessionError::NotScheduled {
            namespace: plan.namespace.clone(),
            pod: plan.pod.clone(),
        })
}

fn debug_pod(plan: &Plan, node: &str) -> DebugPod {
    let mut args = vec![
        "--pod".to_owned(),
        plan.pod.clone(),
        "-n".to_owned(),
        plan.namespace.clone(),
    ];
    args.extend(plan.pktrace_args.iter().cloned());
    DebugPod {
        node: node.to_owned(),
        namespace: plan.debug_namespace.clone(),
        image: plan.image.clone(),
        args,
        target: (plan.namespace.clone(), plan.pod.clone()),
    }
}

/// The pktrace container's status in `pod`.
fn container_status(pod: &Value) -> Option<&Value> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == CONTAINER)
}

/// Waits until the container runs (or already ended); false when stopped meanwhile.
fn wait_started(
    api: &Api,
    created: &Created,
    timeout: Duration,
    stop: &Stop,
) -> Result<bool, SessionError> {
    let start = Instant::now();
    loop {
        if stop.requested() {
            return Ok(false);
        }
        let pod = api.get_pod(&created.namespace, &created.name)?;
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or("Pending")
            .to_owned();
        if matches!(phase.as_str(), "Running" | "Succeeded" | "Failed") {
            return Ok(true);
        }
        let waiting = container_status(&pod).map(|c| &c["state"]["waiting"]);
        if let Some(reason) = waiting.and_then(|w| w["reason"].as_str())
            && FATAL_WAITING.contains(&reason)
        {
            return Err(SessionError::StartFailed {
                pod: created.name.clone(),
                reason: reason.to_owned(),
                message: waiting
                    .and_then(|w| w["message"].as_str())
                    .unwrap_or("")
                    .to_owned(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(SessionError::StartTimeout {
                pod: created.name.clone(),
                secs: timeout.as_secs(),
                phase,
            });
        }
        sleep(POLL);
    }
}

/// Copies the log as it arrives, flushing each piece (JSON lines reach `jq` at once).
fn copy(mut log: impl io::Read, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match log.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        out.flush()?;
    }
}

/// pktrace's exit code, once the container has ended: 0 after a stop (pktrace exits 0 on
/// SIGTERM after its summary), 1 when it cannot be known.
fn exit_code(api: &Api, created: &Created, stop: &Stop) -> u8 {
    let start = Instant::now();
    while start.elapsed() < EXIT_WAIT {
        let pod = match api.get_pod(&created.namespace, &created.name) {
            Ok(pod) => pod,
            Err(_) if stop.requested() => return 0,
            Err(e) => {
                eprintln!("kubectl-pktrace: reading pktrace's exit code: {e}");
                return 1;
            }
        };
        if let Some(code) =
            container_status(&pod).and_then(|c| c["state"]["terminated"]["exitCode"].as_i64())
        {
            return u8::try_from(code).unwrap_or(1);
        }
        if stop.requested() {
            return 0;
        }
        sleep(POLL);
    }
    eprintln!("kubectl-pktrace: pktrace's log ended but its container still runs; stopping it");
    1
}
