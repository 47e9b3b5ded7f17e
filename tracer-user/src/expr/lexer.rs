//! Splits an expression into tokens, each with the byte offset where it starts.

use super::error::{ErrorKind, ExprError};

/// One token of an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tok<'a> {
    LParen,
    RParen,
    /// `and`, `&&`.
    And,
    /// `or`, `||`.
    Or,
    /// `not`, `!`.
    Not,
    /// A keyword, number, address, `A-B` or `ADDR/LEN`.
    Word(&'a str),
}

/// A token and its byte offset in the expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub tok: Tok<'a>,
    pub pos: usize,
    /// The token as written.
    pub text: &'a str,
}

/// Characters a word is made of: letters, digits and the punctuation of addresses, prefixes
/// and port ranges.
const fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '/' | '-' | '_')
}

/// The tokens of `text`, or the first character that cannot start one.
pub fn tokens(text: &str) -> Result<Vec<Token<'_>>, ExprError> {
    let mut out = Vec::new();
    let mut rest = text.char_indices().peekable();
    while let Some((pos, c)) = rest.next() {
        let mut end = pos + c.len_utf8();
        let tok = match c {
            c if c.is_whitespace() => continue,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '!' => Tok::Not,
            '&' | '|' => {
                if rest.next_if(|&(_, n)| n == c).is_none() {
                    let op = if c == '&' { "\"&&\"" } else { "\"||\"" };
                    return Err(ExprError::new(
                        pos,
                        ErrorKind::Expected {
                            what: op,
                            after: None,
                        },
                    ));
                }
                end += 1;
                if c == '&' { Tok::And } else { Tok::Or }
            }
            c if is_word_char(c) => {
                while let Some((i, n)) = rest.next_if(|&(_, n)| is_word_char(n)) {
                    end = i + n.len_utf8();
                }
                match &text[pos..end] {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    word => Tok::Word(word),
                }
            }
            c => return Err(ExprError::new(pos, ErrorKind::BadChar(c))),
        };
        out.push(Token {
            tok,
            pos,
            text: &text[pos..end],
        });
    }
    Ok(out)
}
