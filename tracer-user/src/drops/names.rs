//! Names for what the drop programs report: the kernel's drop reason numbers
//! ([`Reasons`], from its BTF `enum skb_drop_reason`) and the addresses the frees were called
//! from (named by the kernel itself where it can, [`DropNames::learn`], else looked up in
//! `/proc/kallsyms` without keeping it: [`DropNames::location`]). [`DropNames`] holds both for
//! the join.

mod kept;

use std::{
    collections::HashMap,
    fs,
    io::{self, BufRead, BufReader, Seek as _},
    path::Path,
    rc::Rc,
};

use tracer_common::DROP_REASON_UNKNOWN;

use self::kept::Kept;
use crate::diag;

/// The prefix the kernel's drop reason names carry (`SKB_DROP_REASON_NO_SOCKET`).
const PREFIX: &str = "SKB_DROP_REASON_";

/// The kernel's drop reasons by number, named without [`PREFIX`] (`SKB_CONSUMED` is
/// `CONSUMED`).
#[derive(Clone, Debug, Default)]
pub struct Reasons {
    names: HashMap<u32, Rc<str>>,
}

impl Reasons {
    /// From `enum skb_drop_reason`'s values (as [`crate::kernel::btf::Btf::enum_values`] reads
    /// them); an empty list (a kernel before 5.17 has no such enum) names nothing.
    #[must_use]
    pub fn new(values: &[(u32, String)]) -> Self {
        let names = values
            .iter()
            .map(|(v, n)| {
                let short = n
                    .strip_prefix(PREFIX)
                    .or_else(|| n.strip_prefix("SKB_"))
                    .unwrap_or(n);
                (*v, Rc::from(short))
            })
            .collect();
        Self { names }
    }

    /// The name of `reason`: `NOT_SPECIFIED` for a kernel that gives none, the number when
    /// the kernel's BTF has no name for it.
    #[must_use]
    pub fn name(&self, reason: u32) -> Rc<str> {
        if reason == DROP_REASON_UNKNOWN {
            return Rc::from("NOT_SPECIFIED");
        }
        self.names
            .get(&reason)
            .map_or_else(|| Rc::from(reason.to_string()), Rc::clone)
    }

    /// Whether the kernel gives drop reasons (its BTF has `enum skb_drop_reason`, 5.17+);
    /// before, every drop is `NOT_SPECIFIED`.
    #[must_use]
    pub fn given(&self) -> bool {
        !self.names.is_empty()
    }

    /// False for the values that are no drop: `SKB_CONSUMED` (a packet freed after use; from
    /// 6.3 it never reaches `kfree_skb`, but an older kernel's path may) and
    /// `SKB_NOT_DROPPED_YET`.
    #[must_use]
    pub fn is_drop(&self, reason: u32) -> bool {
        self.names
            .get(&reason)
            .is_none_or(|n| !matches!(&**n, "CONSUMED" | "NOT_DROPPED_YET"))
    }
}

/// The kernel's text symbols, sorted by address: an address's function is the last symbol at
/// or below it (tests give them as a table; a run reads kallsyms for each new address).
#[cfg(test)]
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    addrs: Vec<u64>,
    names: Vec<Rc<str>>,
}

/// A `/proc/kallsyms` line's text symbol (`t`/`T`) with a non-zero address: the address,
/// the name, and whether the line names a module (`[module]` after the name). Read from the
/// bytes without copying: a pass reads some 120,000 lines.
fn text_symbol(line: &[u8]) -> Option<(u64, &[u8], bool)> {
    let mut f = line
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty());
    let (hex, ty, name) = (f.next()?, f.next()?, f.next()?);
    if !matches!(ty, b"t" | b"T") {
        return None;
    }
    let addr = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    (addr != 0).then(|| (addr, name, f.next().is_some()))
}

/// What one pass over a kallsyms listing found for an address.
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    /// The text symbol with the highest address at or below it.
    Function(Rc<str>),
    /// It is below every text symbol.
    Below,
    /// The listing shows no address at all (`kernel.kptr_restrict`, no `CAP_SYSLOG`).
    Hidden,
}

/// The function `addr` is in, by one pass over a kallsyms listing. Nothing of the listing is
/// kept: `/proc/kallsyms` is 5 MB of text (BENCHMARKS.md "Memory"). The pass ends early once
/// it is past `addr` in the kernel image's own symbols, which the kernel lists first and in
/// address order: what follows (modules, BPF programs, trampolines) lies outside the image,
/// so none of it can be nearer below `addr` than a symbol of the image. A listing out of
/// order is read whole.
fn function_in(mut listing: impl BufRead, addr: u64) -> io::Result<Lookup> {
    let (mut line, mut any) = (Vec::with_capacity(128), false);
    let mut best: Option<(u64, Vec<u8>)> = None;
    // Every text symbol so far was the image's (no `[module]`), in address order.
    let (mut in_order, mut last) = (true, 0);
    while listing.read_until(b'\n', &mut line)? > 0 {
        if let Some((a, name, module)) = text_symbol(&line) {
            any = true;
            if in_order && !module && a > addr && best.is_some() {
                break;
            }
            in_order &= !module && a >= last;
            last = a;
            if a <= addr && best.as_ref().is_none_or(|(b, _)| a > *b) {
                let kept = best.get_or_insert_with(|| (a, Vec::new()));
                kept.0 = a;
                kept.1.clear();
                kept.1.extend_from_slice(name);
            }
        }
        line.clear();
    }
    Ok(match best {
        Some((_, name)) => Lookup::Function(Rc::from(String::from_utf8_lossy(&name))),
        None if any => Lookup::Below,
        None => Lookup::Hidden,
    })
}

#[cfg(test)]
impl Symbols {
    /// The text symbols (`t`/`T`) of a `/proc/kallsyms` listing; `None` when every address is
    /// zero (`kernel.kptr_restrict` hides them from this process) or there are none.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let mut syms: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|l| text_symbol(l.as_bytes()))
            .filter_map(|(a, name, _)| Some((a, std::str::from_utf8(name).ok()?)))
            .collect();
        if syms.is_empty() {
            return None;
        }
        syms.sort_unstable_by_key(|&(a, _)| a);
        let (addrs, names) = syms.into_iter().map(|(a, n)| (a, Rc::from(n))).unzip();
        Some(Self { addrs, names })
    }

    /// The function `addr` is in, `None` below the first symbol.
    #[must_use]
    pub fn function(&self, addr: u64) -> Option<Rc<str>> {
        let at = self.addrs.partition_point(|&a| a <= addr);
        at.checked_sub(1).map(|i| Rc::clone(&self.names[i]))
    }
}

/// Where kallsyms' state is kept: open (read again from its start for each new address), a
/// table given (tests), or unusable (said once). Opened at start-up: the kernel decides at open
/// whether the reader sees addresses (it needs `CAP_SYSLOG`, which pktrace drops after
/// attaching), so the file opened then reads with them.
#[derive(Debug, Default)]
enum Kallsyms {
    Open(fs::File),
    #[cfg(test)]
    Read(Symbols),
    #[default]
    Hidden,
}

/// What the join names a drop with: the reasons (read at start-up) and the kernel's symbols
/// (looked up in kallsyms at each drop of a new location: most runs see none).
#[derive(Debug, Default)]
pub struct DropNames {
    reasons: Reasons,
    symbols: Kallsyms,
    /// Names already given or learnt from the kernel, by address: one lookup per location.
    locations: Kept,
}

impl DropNames {
    /// With `kallsyms` (`/proc/kallsyms`, or the knob's file) opened now (read at drops); a
    /// failure to open is said once and drops the kernel does not name are located as
    /// `unknown`.
    #[must_use]
    pub fn new(reasons: Reasons, kallsyms: &Path) -> Self {
        let symbols = match fs::File::open(kallsyms) {
            Ok(f) => Kallsyms::Open(f),
            Err(e) => {
                diag::once(
                    "kallsyms",
                    format_args!(
                        "cannot open {} ({e}): drop locations say \"unknown\"",
                        kallsyms.display()
                    ),
                );
                Kallsyms::Hidden
            }
        };
        Self {
            reasons,
            symbols,
            locations: Kept::default(),
        }
    }

    /// With `symbols` already read (tests).
    #[cfg(test)]
    #[must_use]
    pub fn with_symbols(reasons: Reasons, symbols: Symbols) -> Self {
        Self {
            reasons,
            symbols: Kallsyms::Read(symbols),
            ..Self::default()
        }
    }

    #[must_use]
    pub const fn reasons(&self) -> &Reasons {
        &self.reasons
    }

    /// Learns the kernel's name for `addr` (a site record's `%ps`: `func` or `func [module]`),
    /// which [`Self::location`] then gives without a pass over kallsyms. A name that is no
    /// symbol (`0x…`: the kernel has none there) teaches nothing, and nor does a name already
    /// kept: each CPU writes its own record of a site.
    pub fn learn(&mut self, addr: u64, kernel_name: &[u8]) {
        let Some(name) = function_of(kernel_name) else {
            return;
        };
        if self.locations.get(addr).is_none_or(|kept| *kept != *name) {
            self.locations.insert(addr, Rc::from(name));
        }
    }

    /// The function at `addr` (no offset), `unknown` when the addresses are hidden or
    /// `/proc/kallsyms` cannot be read (warned once). A new address costs one pass over
    /// kallsyms (a few distinct addresses per run: the places that drop) unless the kernel
    /// named it ([`Self::learn`]); the names are kept, within [`kept::KEPT_BYTES`].
    pub fn location(&mut self, addr: u64) -> Rc<str> {
        if let Some(name) = self.locations.get(addr) {
            return name;
        }
        let found = match &mut self.symbols {
            Kallsyms::Open(file) => match look_up(file, addr) {
                Ok(Lookup::Function(name)) => Some(name),
                Ok(Lookup::Below) => None,
                Ok(Lookup::Hidden) => {
                    diag::once(
                        "kallsyms",
                        "/proc/kallsyms shows no addresses (kernel.kptr_restrict, or no \
                         CAP_SYSLOG): drop locations say \"unknown\"; run as root with \
                         kptr_restrict 0 or 1 to name them",
                    );
                    self.symbols = Kallsyms::Hidden;
                    None
                }
                Err(e) => {
                    diag::once(
                        "kallsyms",
                        format_args!(
                            "cannot read /proc/kallsyms ({e}): drop locations say \"unknown\""
                        ),
                    );
                    self.symbols = Kallsyms::Hidden;
                    None
                }
            },
            #[cfg(test)]
            Kallsyms::Read(s) => s.function(addr),
            Kallsyms::Hidden => None,
        };
        let name = found.unwrap_or_else(|| Rc::from("unknown"));
        self.locations.insert(addr, Rc::clone(&name));
        name
    }
}

/// The function a kernel's `%ps` names, as kallsyms names it: `func` of `func [module]`;
/// `None` for a bare address (`0x…`, no symbol there) or text that is no name.
fn function_of(kernel_name: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(kernel_name).ok()?;
    let name = text.split(' ').next()?;
    let plain = !name.is_empty() && !name.starts_with("0x") && !name.contains(char::is_control);
    plain.then_some(name)
}

/// [`function_in`] over the whole of `file`, read again from its start.
fn look_up(file: &mut fs::File, addr: u64) -> io::Result<Lookup> {
    file.rewind()?;
    function_in(BufReader::with_capacity(64 << 10, &*file), addr)
}

#[cfg(test)]
mod tests;
