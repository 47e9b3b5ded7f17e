//! Recursive descent over the tokens, with tcpdump's precedence and qualifier carry-over.
//!
//! Grammar (as in `pcap-filter(7)`): `and` and `or` have equal precedence and group left to
//! right (`a or b and c` is `(a or b) and c`); `not` binds tighter than both. A primitive is
//! `[PROTO] [DIR] [KIND] VALUE`, or a protocol alone (`tcp`, `ip6`). A bare value after
//! `and`/`or`/`not`/`(` reuses the qualifiers of the last primitive that had a value:
//! `host 10.0.0.1 or 10.0.0.2`, `tcp port 53 or 80`, `port 22 or not 80`.

use std::net::IpAddr;

use super::{
    MAX_DEPTH,
    ast::{Dir, Expr, Family, Test},
    error::{ErrorKind, ExprError},
    lexer::{Tok, Token},
    primitive::{Kind, ProtoQual, Quals},
    values,
};

/// tcpdump primitives pktrace does not filter on: named in the error instead of "expected".
const UNSUPPORTED: &[&str] = &[
    "ether",
    "arp",
    "rarp",
    "vlan",
    "mpls",
    "pppoes",
    "geneve",
    "gateway",
    "broadcast",
    "multicast",
    "less",
    "greater",
    "len",
    "inbound",
    "outbound",
    "sctp",
    "igmp",
    "igrp",
    "pim",
    "vrrp",
    "carp",
    "ah",
    "esp",
    "atalk",
    "aarp",
    "decnet",
    "iso",
    "stp",
    "ipx",
    "netbeui",
    "lat",
    "sca",
    "moprc",
    "mopdl",
    "wlan",
    "type",
    "subtype",
    "dir",
    "ifname",
    "on",
    "rnr",
    "rulenum",
    "reason",
    "rset",
    "ruleset",
    "srnr",
    "subrulenum",
    "action",
    "llc",
    "fddi",
    "tr",
    "protochain",
    "mask",
];

/// Parser state: the tokens, the next one, and the qualifiers a bare value would reuse.
pub struct Parser<'a> {
    toks: Vec<Token<'a>>,
    at: usize,
    end: usize,
    last: Option<Quals>,
}

impl<'a> Parser<'a> {
    pub const fn new(toks: Vec<Token<'a>>, text_len: usize) -> Self {
        Self {
            toks,
            at: 0,
            end: text_len,
            last: None,
        }
    }

    /// The whole expression; every token must be used.
    pub fn expression(mut self) -> Result<Expr, ExprError> {
        let (expr, _) = self.chain(0)?;
        match self.peek() {
            None => Ok(expr),
            Some(Token {
                tok: Tok::RParen,
                pos,
                ..
            }) => {
                Err(self.expected_at(pos, "\"and\", \"or\" or the end (this \")\" has no \"(\")"))
            }
            Some(t) => Err(self.expected_at(t.pos, "\"and\", \"or\" or the end")),
        }
    }

    /// Operands joined by `and`/`or`, left to right with equal precedence: a run of one
    /// operator is one n-ary node, a switch of operator nests the run so far. Returns the
    /// expression and its nesting as printed (see [`nested`]).
    fn chain(&mut self, depth: usize) -> Result<(Expr, usize), ExprError> {
        let (mut acc, mut acc_nesting) = self.unary(depth)?;
        while let Some(t) = self.peek().filter(|t| matches!(t.tok, Tok::And | Tok::Or)) {
            self.at += 1;
            let (rhs, rhs_nesting) = self.unary(depth)?;
            let rhs_nesting = nested(&rhs, rhs_nesting);
            (acc, acc_nesting) = match (acc, t.tok) {
                (Expr::And(mut items), Tok::And) => {
                    items.push(rhs);
                    (Expr::And(items), acc_nesting.max(rhs_nesting))
                }
                (Expr::Or(mut items), Tok::Or) => {
                    items.push(rhs);
                    (Expr::Or(items), acc_nesting.max(rhs_nesting))
                }
                (lhs, op) => {
                    let nesting = nested(&lhs, acc_nesting).max(rhs_nesting);
                    let items = vec![lhs, rhs];
                    (
                        if op == Tok::And {
                            Expr::And(items)
                        } else {
                            Expr::Or(items)
                        },
                        nesting,
                    )
                }
            };
            if acc_nesting > MAX_DEPTH {
                return Err(ExprError::new(t.pos, ErrorKind::TooDeep));
            }
        }
        Ok((acc, acc_nesting))
    }

    /// `not X`, `( … )` or a primitive, and its nesting as printed. `depth` counts the
    /// parentheses and `not`s around it in the text (the recursion's bound).
    fn unary(&mut self, depth: usize) -> Result<(Expr, usize), ExprError> {
        let Some(t) = self.peek() else {
            return Err(self.expected_here("a filter (host, net, port, tcp, udp, icmp, …)"));
        };
        if depth > MAX_DEPTH {
            return Err(ExprError::new(t.pos, ErrorKind::TooDeep));
        }
        match t.tok {
            Tok::Not => {
                self.at += 1;
                let (inner, nesting) = self.unary(depth + 1)?;
                let nesting = 1 + nested(&inner, nesting);
                if nesting > MAX_DEPTH {
                    return Err(ExprError::new(t.pos, ErrorKind::TooDeep));
                }
                Ok((Expr::Not(Box::new(inner)), nesting))
            }
            Tok::LParen => {
                self.at += 1;
                let inner = self.chain(depth + 1)?;
                match self.peek() {
                    Some(Token {
                        tok: Tok::RParen, ..
                    }) => {
                        self.at += 1;
                        Ok(inner)
                    }
                    _ => Err(self.expected_here("\"and\", \"or\" or \")\"")),
                }
            }
            Tok::Word(w) => Ok((Expr::Test(self.primitive(w, t.pos)?), 0)),
            Tok::RParen | Tok::And | Tok::Or => {
                Err(self.expected_here("a filter (host, net, port, tcp, udp, icmp, …)"))
            }
        }
    }

    /// A primitive starting with the word `first` at `pos`.
    fn primitive(&mut self, first: &'a str, pos: usize) -> Result<Test, ExprError> {
        let proto = self.take_word(ProtoQual::from_word);
        let dir = self.take_word(dir_word).map(|d| self.dir_pair(d));
        let kind = self.take_word(Kind::from_word);
        if proto.is_none() && dir.is_none() && kind.is_none() {
            if UNSUPPORTED.contains(&first) {
                return Err(ExprError::new(
                    pos,
                    ErrorKind::Unsupported(first.to_owned()),
                ));
            }
            let Some(quals) = self.last else {
                return Err(ExprError::new(pos, ErrorKind::NotAFilter(first.to_owned())));
            };
            return self.value(quals);
        }
        if let (Some(p), None, None) = (proto, dir, kind) {
            return Ok(p.alone());
        }
        let quals = Quals {
            proto,
            dir,
            kind: kind.unwrap_or(Kind::Host),
        };
        let test = self.value(quals)?;
        self.last = Some(quals);
        Ok(test)
    }

    /// The value of a primitive with qualifiers `quals`, and the test it makes.
    fn value(&mut self, quals: Quals) -> Result<Test, ExprError> {
        let Some(Token {
            tok: Tok::Word(word),
            pos,
            ..
        }) = self.peek()
        else {
            return Err(self.expected_here(quals.kind.expects()));
        };
        self.at += 1;
        let mask = if quals.kind == Kind::Net {
            self.mask()?
        } else {
            None
        };
        quals
            .test(word, mask)
            .map_err(|kind| self.with_after(ExprError::new(pos, kind)))
    }

    /// `mask M` after a network address, if there; `M` must be an IPv4 address.
    fn mask(&mut self) -> Result<Option<&'a str>, ExprError> {
        if self.take_word(|w| (w == "mask").then_some(())).is_none() {
            return Ok(None);
        }
        match self.peek() {
            Some(Token {
                tok: Tok::Word(m), ..
            }) if matches!(values::address(m), Some(IpAddr::V4(_))) => {
                self.at += 1;
                Ok(Some(m))
            }
            _ => Err(self.expected_here("an IPv4 mask such as 255.255.0.0")),
        }
    }

    /// `src or dst`, `dst and src`, … after a first direction word.
    fn dir_pair(&mut self, first: Dir) -> Dir {
        let other = if first == Dir::Src { "dst" } else { "src" };
        if self.toks.get(self.at + 1).map(|t| t.tok) != Some(Tok::Word(other)) {
            return first;
        }
        let dir = match self.peek().map(|t| t.tok) {
            Some(Tok::Or) => Dir::Either,
            Some(Tok::And) => Dir::Both,
            _ => return first,
        };
        self.at += 2;
        dir
    }

    /// Consumes the next token when it is a word `f` recognises.
    fn take_word<T>(&mut self, f: impl Fn(&str) -> Option<T>) -> Option<T> {
        let Some(Token {
            tok: Tok::Word(w), ..
        }) = self.peek()
        else {
            return None;
        };
        let found = f(w)?;
        self.at += 1;
        Some(found)
    }

    fn peek(&self) -> Option<Token<'a>> {
        self.toks.get(self.at).copied()
    }

    /// "expected …" at the next token (or the end), naming the word before it.
    fn expected_here(&self, what: &'static str) -> ExprError {
        let pos = self.peek().map_or(self.end, |t| t.pos);
        self.expected_at(pos, what)
    }

    fn expected_at(&self, pos: usize, what: &'static str) -> ExprError {
        self.with_after(ExprError::new(
            pos,
            ErrorKind::Expected { what, after: None },
        ))
    }

    /// Fills in the word before `err`'s position for "expected … after …".
    fn with_after(&self, mut err: ExprError) -> ExprError {
        if let ErrorKind::Expected { after, .. } = &mut err.kind {
            *after = self
                .toks
                .iter()
                .rev()
                .find(|t| t.pos < err.pos)
                .map(|t| t.text.to_owned());
        }
        err
    }
}

fn dir_word(w: &str) -> Option<Dir> {
    match w {
        "src" => Some(Dir::Src),
        "dst" => Some(Dir::Dst),
        _ => None,
    }
}

impl ProtoQual {
    /// The test a protocol word makes on its own (`tcp`, `ip6`).
    const fn alone(self) -> Test {
        use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};
        match self {
            Self::Ip => Test::Family(Family::V4),
            Self::Ip6 => Test::Family(Family::V6),
            Self::Tcp => Test::Proto {
                family: None,
                proto: PROTO_TCP,
            },
            Self::Udp => Test::Proto {
                family: None,
                proto: PROTO_UDP,
            },
            Self::Icmp => Test::Proto {
                family: Some(Family::V4),
                proto: PROTO_ICMP,
            },
            Self::Icmp6 => Test::Proto {
                family: Some(Family::V6),
                proto: PROTO_ICMPV6,
            },
        }
    }
}

/// The nesting of `e` as an operand (of `not`, `and`, `or`): `nesting` plus the parentheses an
/// `and`/`or` run needs there. The whole expression's nesting is what its printed form needs
/// of parentheses and `not`s, bounded by [`MAX_DEPTH`] so that printing and parsing agree.
fn nested(e: &Expr, nesting: usize) -> usize {
    nesting + usize::from(e.is_chain())
}
