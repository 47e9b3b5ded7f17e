//! The packet filter expression (`pktrace … [EXPRESSION]`): a subset of tcpdump's syntax
//! (`pcap-filter(7)`) over a packet's addresses, ports and protocol.
//!
//! Accepted: `host`, `net` (`ADDR/LEN`, `ADDR mask MASK`, tcpdump's short `10.1`), `port`,
//! `portrange A-B`, the `src`/`dst`/`src or dst`/`src and dst` qualifiers, `tcp`, `udp`, `icmp`,
//! `icmp6`, `ip`, `ip6` (alone and as qualifiers: `tcp port 53`, `ip6 net 2001:db8::/32`),
//! `[ip|ip6] proto N`, `and`/`&&`, `or`/`||`, `not`/`!`, parentheses, and tcpdump's carry-over of
//! qualifiers to a bare value (`port 53 or 80`). As in tcpdump, `and` and `or` have equal
//! precedence and group left to right; `not` binds tighter. Numbers are decimal; service and
//! protocol names are not looked up.
//!
//! [`parse`] gives an [`Expr`] or an [`ExprError`] with the byte offset of the fault
//! ([`ExprError::render`] shows it under the expression). [`Expr::matches`] tests one
//! [`PacketView`]; [`Prefilter::of`] summarises what a packet needs to possibly match, for the
//! kernel (see [`prefilter`] for where applying it is sound under NAT). [`Filter`] is the
//! expression as a run applies it: to whole journeys, and its sound part in the kernel.

mod ast;
mod error;
mod eval;
mod filter;
mod lexer;
mod parser;
pub mod prefilter;
mod primitive;
#[cfg(test)]
mod tests;
mod values;

pub use ast::{Dir, Expr, Family, Net, PortRange, Test};
pub use error::{ErrorKind, ExprError};
pub use eval::PacketView;
pub use filter::{Filter, FilterError};
pub use prefilter::Prefilter;

/// Longest expression accepted, in bytes.
pub const MAX_LEN: usize = 4096;
/// Deepest nesting accepted: parentheses, `not`, and each switch between `and` and `or` in one
/// run count one level each. Keeps parsing, matching and dropping an [`Expr`] off deep stacks.
pub const MAX_DEPTH: usize = 64;

/// Parses a filter expression.
///
/// # Errors
/// The expression is empty, longer than [`MAX_LEN`], nested deeper than [`MAX_DEPTH`], or not
/// in the accepted syntax; the error carries the byte offset where it went wrong.
pub fn parse(text: &str) -> Result<Expr, ExprError> {
    if text.len() > MAX_LEN {
        return Err(ExprError::new(
            MAX_LEN,
            ErrorKind::TooLong { len: text.len() },
        ));
    }
    let tokens = lexer::tokens(text)?;
    parser::Parser::new(tokens, text.len()).expression()
}
