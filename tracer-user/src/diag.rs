//! The one sink for diagnostics on stderr. Every line starts with `pktrace: `; a warning that
//! could come again (the same failure seen on a later turn of the loop) is printed once per
//! process with [`once`]. Journeys, loss reports and the summary are output, not diagnostics:
//! they go to the output sink (`output::Sink`). The error that ends a run ([`error`]) is
//! wrapped to the terminal's width.

use std::{
    collections::HashSet,
    fmt::Display,
    io::{IsTerminal as _, Write as _},
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

/// Writes the error that ends a run: `pktrace: ` and `text`, wrapped to the width of the
/// terminal on stderr (or `COLUMNS`); to a file or a pipe without `COLUMNS`, each line whole.
pub fn error(text: impl Display) {
    error_of("pktrace", text);
}

/// [`error`] for another program of the project (`kubectl-pktrace`): its name first.
pub fn error_of(program: &str, text: impl Display) {
    let text = format!("{program}: {text}");
    let text = match stderr_columns() {
        Some(width) => wrap(&text, width),
        None => text,
    };
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// The width to wrap errors to: `COLUMNS` when set to a number, else the terminal's on
/// stderr; `None` when stderr is not a terminal and `COLUMNS` is unset.
fn stderr_columns() -> Option<usize> {
    if let Some(cols) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(cols);
    }
    if !std::io::stderr().is_terminal() {
        return None;
    }
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which lives here.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    Some(if ok && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    })
}

/// `text` with each line longer than `width` broken at spaces, the continuation lines
/// indented by two spaces; lines that start with a space (an expression and its caret) are
/// kept as they are. A word longer than a line keeps a line of its own.
#[must_use]
pub fn wrap(text: &str, width: usize) -> String {
    let width = width.max(20);
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.starts_with(' ') || line.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let (mut column, mut fresh) = (0, true);
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let len = word.chars().count();
            if !fresh && column + 1 + len > width {
                out.push_str("\n  ");
                (column, fresh) = (2, true);
            }
            if !fresh {
                out.push(' ');
                column += 1;
            }
            fresh = false;
            out.push_str(word);
            column += len;
        }
    }
    out
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

    #[test]
    fn errors_wrap_at_spaces_and_keep_indented_lines() {
        let long = format!("pktrace: {}", "word ".repeat(40).trim_end());
        let wrapped = wrap(&format!("{long}\n  udp port x53\n           ^"), 40);
        let lines: Vec<&str> = wrapped.lines().collect();
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{wrapped}");
        assert!(lines[0].starts_with("pktrace: word word"), "{wrapped}");
        assert!(lines[1].starts_with("  word"), "{wrapped}");
        assert_eq!(lines[lines.len() - 2..], ["  udp port x53", "           ^"]);
        let words = |t: &str| t.split_whitespace().filter(|w| *w == "word").count();
        assert_eq!(words(&wrapped), 40, "no word lost");
        assert_eq!(wrap("short", 40), "short");
    }
}
