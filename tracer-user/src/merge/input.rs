//! Reading `pktrace -o json` output of one node: its journey lines, parsed as the contract's
//! [`JourneyLine`] (step fields of newer versions are kept in [`StepLine::extra`], so every
//! field reaches the output).

use std::{
    fs,
    io::{self, BufReader},
    path::{Path, PathBuf},
};

use serde_json::Value;

use super::MergeError;
use crate::output::json::contract::{JourneyLine, StepLine};

/// One input: a node's name and the file holding its JSON lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInput {
    pub node: String,
    pub path: PathBuf,
}

impl NodeInput {
    /// Reads `NODE=PATH`, or `PATH` alone, when the node is named after the file (its name
    /// without the extension: `aks-node-1.jsonl` is node `aks-node-1`).
    #[must_use]
    pub fn parse(arg: &str) -> Self {
        if let Some((node, path)) = arg.split_once('=')
            && !node.is_empty()
            && !node.contains('/')
        {
            return Self {
                node: node.to_owned(),
                path: PathBuf::from(path),
            };
        }
        let path = PathBuf::from(arg);
        let node = path
            .file_stem()
            .map_or_else(|| arg.to_owned(), |s| s.to_string_lossy().into_owned());
        Self { node, path }
    }
}

/// One journey line of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeJourney {
    /// Index of the node in the inputs.
    pub node: usize,
    /// The journey line as read.
    pub line: JourneyLine,
    /// `start_ktime_ns`: the node's monotonic clock at the first step.
    pub start_ns: i64,
}

impl NodeJourney {
    /// The node-local time of step `i` (`start_ktime_ns` + its `t_ns`).
    #[must_use]
    pub fn time_of(&self, i: usize) -> i64 {
        let t = self.steps().get(i).map_or(0, |s| s.t_ns);
        self.start_ns.saturating_add(i64::try_from(t).unwrap_or(0))
    }

    /// The steps, in time order.
    #[must_use]
    pub fn steps(&self) -> &[StepLine] {
        &self.line.steps
    }
}

/// Reads every journey line of `input` (other line types are skipped).
///
/// # Errors
/// The file cannot be read, a line is not JSON, or a journey lacks what merging needs.
pub fn read(node: usize, input: &NodeInput) -> Result<Vec<NodeJourney>, MergeError> {
    let file = fs::File::open(&input.path).map_err(|source| io_error(&input.path, source))?;
    parse(node, &input.path, BufReader::new(file))
}

fn io_error(path: &Path, source: io::Error) -> MergeError {
    MergeError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// Parses JSON lines from `reader` (`path` is for messages).
///
/// # Errors
/// As [`read`].
pub fn parse(
    node: usize,
    path: &Path,
    reader: impl io::BufRead,
) -> Result<Vec<NodeJourney>, MergeError> {
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| io_error(path, source))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| MergeError::Line {
            path: path.display().to_string(),
            line: n + 1,
            reason,
        };
        let value: Value =
            serde_json::from_str(&line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Value::Object(object) = value else {
            return Err(bad("not a JSON object".into()));
        };
        let line = JourneyLine::from_object(object).map_err(|e| {
            bad(format!(
                "not a journey line of pktrace -o json ({e}): record it with this pktrace's -o json"
            ))
        })?;
        let Some(line) = line else {
            continue;
        };
        let start_ns = line
            .start_ktime_ns
            .and_then(|t| i64::try_from(t).ok())
            .ok_or_else(|| {
                bad("journey without start_ktime_ns: record it with this pktrace's -o json".into())
            })?;
        if !line.steps.is_empty() {
            out.push(NodeJourney {
                node,
                line,
                start_ns,
            });
        }
    }
    Ok(out)
}
