//! Why the state file could not resolve a pod, each message saying what to do.

use std::{io, path::PathBuf};

use super::not_found::{NotFound, not_found_message};
use crate::util::safe;

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
    /// The state file is bigger than any real one ([`super::MAX_STATE_FILE`]).
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

/// `serde_json`'s message without its ` at line L column C` tail (printed separately).
pub(super) fn json_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}
