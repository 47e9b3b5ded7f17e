//! The width of the terminal the output goes to.

use std::io::IsTerminal;

/// The columns of the terminal on stdout, or `None` when stdout is not a terminal (a file, a
/// pipe) or the kernel does not say. `COLUMNS`, when set to a number, wins, as for `ls`.
#[must_use]
pub fn stdout_columns() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(cols) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(cols);
    }
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which lives here.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
