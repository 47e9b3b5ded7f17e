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
/// terminal on stderr (`COLUMNS` when set, as for `-o line`); to a file or a pipe each line
/// whole, for logs and `grep`.
pub fn error(text: impl Display) {
    error_of("pktrace", text);
}

/// [`error`] for another program of the project (`kubectl-pktrace`): its name first.
pub fn error_of(program: &str, text: impl Display) {
    let text = format!("{program}: {text}");
    let is_tty = std::io::stderr().is_terminal();
    let columns = std::env::var("COLUMNS").ok();
    let text = match wrap_width(is_tty, columns.as_deref(), stderr_columns) {
        Some(width) => wrap(&text, width),
        None => text,
    };
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// The width to wrap errors to: none off a terminal; on one, `COLUMNS` when it is a number,
/// else what the terminal says, else 80.
fn wrap_width(
    is_tty: bool,
    columns: Option<&str>,
    terminal: impl FnOnce() -> Option<usize>,
) -> Option<usize> {
    if !is_tty {
        return None;
    }
    let columns = columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    Some(columns.or_else(terminal).unwrap_or(80))
}

/// The columns of the terminal on stderr, as the kernel says.
fn stderr_columns() -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which lives here.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
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

    #[test]
    fn errors_wrap_on_a_terminal_only() {
        assert_eq!(
            wrap_width(false, Some("80"), || Some(100)),
            None,
            "a pipe or a file"
        );
        assert_eq!(wrap_width(true, Some("72"), || Some(100)), Some(72));
        assert_eq!(wrap_width(true, Some("x"), || Some(100)), Some(100));
        assert_eq!(wrap_width(true, None, || None), Some(80));
    }
}
