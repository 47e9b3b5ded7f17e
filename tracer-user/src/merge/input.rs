//! Reading `pktrace -o json` output of one node: its journey lines, kept as JSON objects so
//! that every field (rules, services, extra fields of newer versions) reaches the output.

use std::{
    fs,
    io::{self, BufReader},
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use super::MergeError;

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
    /// The line's fields except `steps`.
    pub fields: Map<String, Value>,
    pub steps: Vec<Map<String, Value>>,
    /// `start_ktime_ns`: the node's monotonic clock at the first step.
    pub start_ns: i64,
}

impl NodeJourney {
    /// The node-local time of step `i` (`start_ktime_ns` + its `t_ns`).
    #[must_use]
    pub fn time_of(&self, i: usize) -> i64 {
        let t = self
            .steps
            .get(i)
            .and_then(|s| s.get("t_ns"))
            .and_then(Value::as_i64);
        self.start_ns.saturating_add(t.unwrap_or(0))
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
        let Value::Object(mut fields) = value else {
            return Err(bad("not a JSON object".into()));
        };
        if fields.get("type").and_then(Value::as_str) != Some("journey") {
            continue;
        }
        let start_ns = fields
            .get("start_ktime_ns")
            .and_then(Value::as_i64)
            .ok_or_else(|| {
                bad("journey without start_ktime_ns: record it with this pktrace's -o json".into())
            })?;
        let steps = match fields.remove("steps") {
            Some(Value::Array(steps)) => steps,
            _ => return Err(bad("journey without a steps array".into())),
        };
        let steps = steps
            .into_iter()
            .map(|s| match s {
                Value::Object(m) => Ok(m),
                _ => Err(bad("a step is not a JSON object".into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !steps.is_empty() {
            out.push(NodeJourney {
                node,
                fields,
                steps,
                start_ns,
            });
        }
    }
    Ok(out)
}
