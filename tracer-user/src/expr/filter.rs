//! The expression as a run applies it ([`Filter`]): parsed once at start from the words after
//! the options, asked whether any of a journey's packets matches ([`Filter::matches_any`]),
//! and handed to the kernel as the part of its prefilter that holds at every hook
//! ([`Filter::kernel`]).

use tracer_common::{
    ExprFilter, Tuple,
    filter::{EXPR_V4, EXPR_V6},
};

use super::{ExprError, Family, PacketView, Prefilter, ast::Expr};
use crate::util::tuple::proto_spelled;

/// A parsed expression with its text (for messages) and its prefilter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    text: String,
    expr: Expr,
    prefilter: Prefilter,
}

/// Why the expression words cannot be used (a usage error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// Not in the accepted syntax: shown as three lines, the message, the expression and a
    /// caret under the fault.
    #[error("{}", .err.render(.text).trim_start_matches("pktrace: "))]
    Syntax { text: String, err: ExprError },
    /// Valid, but no packet can match it (`icmp and port 53`), as tcpdump refuses it.
    #[error(
        "the expression '{}' matches no packet (e.g. icmp with a port): check its protocols \
         and ports",
        crate::util::safe(.text)
    )]
    MatchesNothing { text: String },
}

impl Filter {
    /// The filter of `words` joined with spaces (tcpdump's `udp port 53` as three arguments or
    /// one); `None` for no words.
    ///
    /// # Errors
    /// [`FilterError`] when the expression does not parse or can match no packet.
    pub fn parse(words: &[String]) -> Result<Option<Self>, FilterError> {
        if words.is_empty() {
            return Ok(None);
        }
        let text = words.join(" ");
        let expr = match super::parse(&text) {
            Ok(e) => e,
            Err(err) => return Err(FilterError::Syntax { text, err }),
        };
        let prefilter = Prefilter::of(&expr);
        if !prefilter.admits_some() {
            return Err(FilterError::MatchesNothing { text });
        }
        Ok(Some(Self {
            text,
            expr,
            prefilter,
        }))
    }

    /// The expression as given.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True when one of `packets` matches: the packet of each step of a journey, as it was
    /// after the step and, for a NAT step, before it (so `port 8080` shows a packet to a
    /// service's port 80 that DNAT sent to 8080, from its first step on). The caller's
    /// journey is shown when this is true.
    pub fn matches_any<'a>(&self, packets: impl IntoIterator<Item = &'a Tuple>) -> bool {
        packets
            .into_iter()
            .filter_map(PacketView::from_tuple)
            .any(|v| self.expr.matches(&v))
    }

    /// One line for the start-up: the expression and what of it the kernel applies.
    #[must_use]
    pub fn describe(&self) -> String {
        let protos = self.prefilter.protos.as_ref().map_or_else(
            || "every protocol".to_owned(),
            |set| {
                let names: Vec<String> = set.iter().map(|p| proto_spelled(*p)).collect();
                names.join(", ")
            },
        );
        let family = match self
            .prefilter
            .families
            .as_ref()
            .map(|f| f.iter().collect::<Vec<_>>())
        {
            Some(f) if f == [&Family::V4] => " over IPv4",
            Some(f) if f == [&Family::V6] => " over IPv6",
            _ => "",
        };
        format!(
            "filter '{}': the kernel emits {protos}{family} only; a journey is shown when one of \
             its steps matches, before or after NAT",
            crate::util::safe(&self.text)
        )
    }

    /// The part of the prefilter the kernel may apply at every hook: the IP versions and the
    /// protocols (NAT changes neither). Ports and addresses are left to [`Self::matches_any`]: NAT
    /// changes them between hooks (see [`super::prefilter`]).
    #[must_use]
    pub fn kernel(&self) -> ExprFilter {
        let families = self
            .prefilter
            .families
            .as_ref()
            .map_or(EXPR_V4 | EXPR_V6, |set| {
                set.iter().fold(0, |bits, f| {
                    bits | match f {
                        Family::V4 => EXPR_V4,
                        Family::V6 => EXPR_V6,
                    }
                })
            });
        match &self.prefilter.protos {
            None => ExprFilter::of(families, 0..=u8::MAX),
            Some(set) => ExprFilter::of(families, set.iter().copied()),
        }
    }
}

#[cfg(test)]
mod tests;
