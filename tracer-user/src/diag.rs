//! The one sink for diagnostics on stderr. Every line starts with `pktrace: `; a warning that
//! could come again (the same failure seen on a later turn of the loop) is printed once per
//! process with [`once`]. Journeys, loss reports and the summary are output, not diagnostics:
//! they go to the output sink (`output::Sink`).

use std::{
    collections::HashSet,
    fmt::Display,
    io::Write as _,
    sync::{Mutex, PoisonError},
};

/// The prefix of every diagnostic line.
const PREFIX: &str = "pktrace: ";

/// Keys already said: a set that answers "first time?" once per key. The process has one
/// ([`once`]); a module or test may keep its own.
pub struct Said(Mutex<Option<HashSet<String>>>);

impl Said {
    /// An empty set.
    #[must_use]
    pub const fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// True the first time `key` is asked for in this set.
    pub fn first(&self, key: &str) -> bool {
        let mut said = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let said = said.get_or_insert_with(HashSet::new);
        !said.contains(key) && said.insert(key.to_owned())
    }
}

impl Default for Said {
    fn default() -> Self {
        Self::new()
    }
}

/// Keys of the warnings [`once`] printed.
static SAID: Said = Said::new();

/// Writes one diagnostic line. A failed write to stderr is ignored: there is nowhere left to
/// report it.
pub fn line(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{PREFIX}{text}");
}

/// Writes `text` unless a warning with the same `key` was written before in this process;
/// returns whether it was written.
pub fn once(key: &str, text: impl Display) -> bool {
    if !first(key) {
        return false;
    }
    line(text);
    true
}

/// True the first time `key` is asked for in this process.
fn first(key: &str) -> bool {
    SAID.first(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_said_once_per_process() {
        assert!(first("diag-test-a"));
        assert!(!first("diag-test-a"));
        assert!(first("diag-test-b"), "other keys are independent");
        assert!(!once("diag-test-b", "not printed"));
    }
}
