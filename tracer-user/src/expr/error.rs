//! Why an expression was refused, and where.

use std::fmt;

use crate::util::safe;

/// A refused expression: the byte offset of the offending token and what was wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad expression at {}: {kind}", self.pos + 1)]
pub struct ExprError {
    /// Byte offset into the expression (0-based; shown 1-based).
    pub pos: usize,
    pub kind: ErrorKind,
}

/// What was wrong. Text quoted from the expression is escaped with [`safe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Longer than [`super::MAX_LEN`] bytes.
    TooLong { len: usize },
    /// Parentheses, `not` and alternations of `and`/`or` deeper than [`super::MAX_DEPTH`].
    TooDeep,
    /// A character no token starts with.
    BadChar(char),
    /// Something else was needed here; `after` is the preceding word.
    Expected {
        what: &'static str,
        after: Option<String>,
    },
    /// A word that starts no primitive and has no qualifier to reuse (`ubuntu`, a bare
    /// `10.0.0.1` or `80`).
    NotAFilter(String),
    /// A tcpdump primitive pktrace does not filter on (`ether`, `vlan`, `less`, …).
    Unsupported(String),
    /// A qualifier that does not go with the primitive (`tcp host`, `ip6 host 10.0.0.1`).
    Qualifier {
        qualifier: &'static str,
        primitive: &'static str,
    },
    /// A number too big for what it counts (`port 70000`, `/33`, `proto 256`).
    TooBig { what: &'static str, max: u32 },
    /// `net 10.0.0.1/8`: bits set outside the prefix.
    HostBits(String),
}

impl ExprError {
    pub(super) const fn new(pos: usize, kind: ErrorKind) -> Self {
        Self { pos, kind }
    }

    /// The message for a user: `pktrace: bad expression at N: …`, then the expression (escaped
    /// like every text from outside) and a caret under the offending token. Three lines, no
    /// trailing newline; `N` counts bytes from 1.
    #[must_use]
    pub fn render(&self, expr_text: &str) -> String {
        let shown = safe(expr_text);
        let pos = floor_char_boundary(expr_text, self.pos);
        let column = safe(&expr_text[..pos]).chars().count();
        format!("pktrace: {self}\n  {shown}\n  {:column$}^", "")
    }
}

/// The largest char boundary of `s` at or before `pos`.
fn floor_char_boundary(s: &str, pos: usize) -> usize {
    let mut pos = pos.min(s.len());
    while !s.is_char_boundary(pos) {
        pos -= 1;
    }
    pos
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { len } => write!(
                f,
                "the expression is {len} bytes long, the most is {}",
                super::MAX_LEN
            ),
            Self::TooDeep => write!(
                f,
                "nested too deeply (more than {} levels of parentheses, \"not\" and alternating \
                 \"and\"/\"or\")",
                super::MAX_DEPTH
            ),
            Self::BadChar(c @ ('[' | ']' | '=' | '<' | '>')) => write!(
                f,
                "\"{c}\" is not supported: pktrace filters on addresses, ports and protocols, \
                 not on packet bytes or comparisons (tcp[13] = 2)"
            ),
            Self::BadChar(c) => write!(
                f,
                "\"{}\" cannot be in an expression: use words such as host, port, udp",
                safe(&c.to_string())
            ),
            Self::NotAFilter(w) => {
                let hint = if w.parse::<std::net::IpAddr>().is_ok() {
                    format!("write host {w}")
                } else if w.parse::<u16>().is_ok() {
                    format!("write port {w}")
                } else {
                    "write e.g. host 10.0.0.1, port 53 or udp (tcpdump syntax)".to_owned()
                };
                write!(f, "\"{}\" is not a filter: {hint}", safe(w))
            }
            Self::Expected { what, after: None } => write!(f, "expected {what}"),
            Self::Expected {
                what,
                after: Some(w),
            } => {
                write!(f, "expected {what} after \"{}\"", safe(w))
            }
            Self::Unsupported(w) => write!(
                f,
                "\"{}\" is not supported: pktrace filters on host, net, port, portrange, \
                 src, dst, tcp, udp, icmp, icmp6, ip, ip6 and proto",
                safe(w)
            ),
            Self::Qualifier {
                qualifier,
                primitive,
            } => write!(f, "\"{qualifier}\" cannot qualify {primitive}"),
            Self::TooBig { what, max } => write!(f, "{what} must be at most {max}"),
            Self::HostBits(w) => write!(
                f,
                "\"{}\" has bits set outside its prefix: give the network address",
                safe(w)
            ),
        }
    }
}
