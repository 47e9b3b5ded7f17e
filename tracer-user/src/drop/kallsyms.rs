//! The kernel's text symbols from a `/proc/kallsyms` listing, to name the places packets are
//! dropped from.
//!
//! Contract: [`Symbols::read`] keeps every text symbol (`t`/`T`) of one pass, compactly (each
//! address and where its name is, 16 bytes, and the names in 64 KiB blocks: some 5 MiB for a
//! kernel of 120,000 symbols), unless that would pass a byte limit; [`function_in`] is the fallback, one
//! pass per address that keeps nothing. Both name an address by the text symbol with the
//! highest address at or below it. A listing whose addresses are all zero
//! (`kernel.kptr_restrict`, no `CAP_SYSLOG`) is [`Listing::Hidden`].

use std::io::{self, BufRead};

/// What a pass over a listing found.
#[derive(Debug)]
pub enum Listing<T> {
    /// What was asked for.
    Found(T),
    /// The listing shows no address at all.
    Hidden,
}

/// A `/proc/kallsyms` line's text symbol (`t`/`T`) with a non-zero address: the address,
/// the name, and whether the line names a module (`[module]` after the name). Read from the
/// bytes without copying: a pass reads some 120,000 lines.
fn text_symbol(line: &[u8]) -> Option<(u64, &[u8], bool)> {
    let mut f = line
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty());
    let (hex, ty, name) = (f.next()?, f.next()?, f.next()?);
    if !matches!(ty, b"t" | b"T") || hex.len() > 16 {
        return None;
    }
    let mut addr = 0u64;
    for &c in hex {
        addr = addr << 4 | u64::from(char::from(c).to_digit(16)?);
    }
    (addr != 0).then(|| (addr, name, f.next().is_some()))
}

/// Calls `f` with each text symbol of a listing (address, name, module or not); true when the
/// listing had any. `f` returns false to end the pass early.
fn each_symbol(
    mut listing: impl BufRead,
    mut f: impl FnMut(u64, &[u8], bool) -> bool,
) -> io::Result<bool> {
    let (mut line, mut any) = (Vec::with_capacity(128), false);
    while listing.read_until(b'\n', &mut line)? > 0 {
        if let Some((a, name, module)) = text_symbol(&line) {
            any = true;
            if !f(a, name, module) {
                break;
            }
        }
        line.clear();
    }
    Ok(any)
}

/// The function `addr` is in, by one pass over a listing that keeps nothing of it (`None`:
/// below every text symbol). The pass ends early once it is past `addr` in the kernel image's
/// own symbols, which the kernel lists first and in address order: what follows (modules, BPF
/// programs, trampolines) lies outside the image, so none of it can be nearer below `addr`
/// than a symbol of the image. A listing out of order is read whole.
///
/// # Errors
/// When the listing cannot be read.
pub fn function_in(listing: impl BufRead, addr: u64) -> io::Result<Listing<Option<String>>> {
    let mut best: Option<(u64, Vec<u8>)> = None;
    // Every text symbol so far was the image's (no `[module]`), in address order.
    let (mut in_order, mut last) = (true, 0);
    let any = each_symbol(listing, |a, name, module| {
        if in_order && !module && a > addr && best.is_some() {
            return false;
        }
        in_order &= !module && a >= last;
        last = a;
        if a <= addr && best.as_ref().is_none_or(|(b, _)| a > *b) {
            let kept = best.get_or_insert_with(|| (a, Vec::new()));
            kept.0 = a;
            kept.1.clear();
            kept.1.extend_from_slice(name);
        }
        true
    })?;
    Ok(if any {
        Listing::Found(best.map(|(_, n)| String::from_utf8_lossy(&n).into_owned()))
    } else {
        Listing::Hidden
    })
}

/// Bytes of one block of names ([`Symbols`]): the table grows a block at a time, never
/// copying what it holds.
const BLOCK: usize = 64 << 10;

/// Every text symbol of a listing, by address: an address's function is the last symbol at or
/// below it.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    /// Each symbol's address and where its name is (`block << 16 | offset` in `blocks`), by
    /// address.
    at: Vec<(u64, u32)>,
    /// The names, each ended by a newline, in blocks of at most [`BLOCK`] bytes.
    blocks: Vec<String>,
}

impl Symbols {
    /// Every text symbol of one pass over `listing`; `None` when keeping them would take more
    /// than `max_bytes` (the caller then looks addresses up one pass each, [`function_in`]).
    ///
    /// # Errors
    /// When the listing cannot be read.
    pub fn read(listing: impl BufRead, max_bytes: usize) -> io::Result<Listing<Option<Self>>> {
        let mut s = Self::default();
        let mut over = false;
        let any = each_symbol(listing, |a, name, _| {
            let name = &name[..name.len().min(BLOCK - 1)];
            if s.blocks
                .last()
                .is_none_or(|b| b.len() + name.len() + 1 > BLOCK)
            {
                s.blocks.push(String::with_capacity(BLOCK));
            }
            let block = s.blocks.len() - 1;
            let names = &mut s.blocks[block];
            let (Ok(block), Ok(offset)) = (u32::try_from(block), u32::try_from(names.len())) else {
                over = true;
                return false;
            };
            s.at.push((a, block << 16 | offset));
            names.push_str(&String::from_utf8_lossy(name));
            names.push('\n');
            over = s.bytes() > max_bytes || block > 0xffff;
            !over
        })?;
        if !any {
            return Ok(Listing::Hidden);
        }
        if over {
            return Ok(Listing::Found(None));
        }
        // Stable: of symbols at one address (aliases), the listing's first names it, as in a
        // pass.
        s.at.sort_by_key(|&(a, _)| a);
        Ok(Listing::Found(Some(s)))
    }

    /// Bytes the table holds.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.at.capacity() * size_of::<(u64, u32)>() + self.blocks.len() * BLOCK
    }

    /// The function `addr` is in, `None` below the first symbol.
    #[must_use]
    pub fn function(&self, addr: u64) -> Option<&str> {
        let i = self
            .at
            .partition_point(|&(a, _)| a <= addr)
            .checked_sub(1)?;
        // Of several symbols at the highest address at or below `addr`, the first listed.
        let a = self.at[i].0;
        let first = self.at[..=i].partition_point(|&(b, _)| b < a);
        let place = self.at[first].1;
        let rest = &self.blocks[(place >> 16) as usize][(place & 0xffff) as usize..];
        Some(&rest[..rest.find('\n').unwrap_or(rest.len())])
    }

    /// The symbols of a listing given as text (tests).
    #[cfg(test)]
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match Self::read(text.as_bytes(), usize::MAX).ok()? {
            Listing::Found(s) => s,
            Listing::Hidden => None,
        }
    }
}

#[cfg(test)]
mod tests;
