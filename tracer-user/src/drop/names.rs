//! Names for what the drop programs report: the kernel's drop reason numbers
//! ([`Reasons`], from its BTF `enum skb_drop_reason`) and the addresses the frees were called
//! from (`/proc/kallsyms`, read at the first drop: [`DropNames::location`]). [`DropNames`]
//! holds both for the join.

use std::{
    collections::HashMap,
    fs,
    io::{self, BufReader, Seek as _},
    rc::Rc,
};

use tracer_common::DROP_REASON_UNKNOWN;

pub use super::kallsyms::Symbols;
use super::kallsyms::{Listing, function_in};
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

/// Where kallsyms' state is kept. Opened at start-up: the kernel decides at open whether the
/// reader sees addresses (it needs `CAP_SYSLOG`, which pktrace drops after attaching), so the
/// file opened then reads with them; read at the first drop, when it becomes a table, or, were
/// the table over [`TABLE_MAX_BYTES`], stays open and is read again for each new address.
#[derive(Debug, Default)]
enum Kallsyms {
    /// Not read yet.
    Open(fs::File),
    /// Too large to keep: one pass per new address.
    Passes(fs::File),
    Table(Symbols),
    /// Unusable (said once).
    #[default]
    Hidden,
}

/// Most bytes the kernel's symbol table may take; past it, each new drop site costs a pass over
/// kallsyms instead.
const TABLE_MAX_BYTES: usize = 8 << 20;

/// What the join names a drop with: the reasons (read at start-up) and the kernel's symbols
/// (read from kallsyms at the first drop: most runs see none).
#[derive(Debug, Default)]
pub struct DropNames {
    reasons: Reasons,
    symbols: Kallsyms,
    /// Names already given, by address.
    locations: HashMap<u64, Rc<str>>,
}

impl DropNames {
    /// With `/proc/kallsyms` opened now (read at drops); a failure to open is said once and
    /// drops are located as `unknown`.
    #[must_use]
    pub fn new(reasons: Reasons) -> Self {
        let symbols = match fs::File::open("/proc/kallsyms") {
            Ok(f) => Kallsyms::Open(f),
            Err(e) => {
                diag::once(
                    "kallsyms",
                    format_args!(
                        "cannot open /proc/kallsyms ({e}): drop locations say \"unknown\""
                    ),
                );
                Kallsyms::Hidden
            }
        };
        Self {
            reasons,
            symbols,
            locations: HashMap::new(),
        }
    }

    /// With `symbols` already read (tests).
    #[cfg(test)]
    #[must_use]
    pub fn with_symbols(reasons: Reasons, symbols: Symbols) -> Self {
        Self {
            reasons,
            symbols: Kallsyms::Table(symbols),
            ..Self::default()
        }
    }

    #[must_use]
    pub const fn reasons(&self) -> &Reasons {
        &self.reasons
    }

    /// The function at `addr` (no offset), `unknown` when the addresses are hidden or
    /// `/proc/kallsyms` cannot be read (warned once). The first call reads kallsyms into a
    /// table ([`Symbols`]); the names given are kept, up to [`LOCATIONS`] of them.
    pub fn location(&mut self, addr: u64) -> Rc<str> {
        if let Some(name) = self.locations.get(&addr) {
            return Rc::clone(name);
        }
        let name = self.function(addr).unwrap_or_else(|| Rc::from("unknown"));
        if self.locations.len() >= LOCATIONS {
            self.locations.clear();
        }
        self.locations.insert(addr, Rc::clone(&name));
        name
    }

    /// The function at `addr` from the table, reading it first if need be, or from a pass.
    fn function(&mut self, addr: u64) -> Option<Rc<str>> {
        let read = match std::mem::take(&mut self.symbols) {
            Kallsyms::Open(mut file) => match read_table(&mut file) {
                Ok(Listing::Found(Some(table))) => Ok(Kallsyms::Table(table)),
                Ok(Listing::Found(None)) => Ok(Kallsyms::Passes(file)),
                Ok(Listing::Hidden) => Err(None),
                Err(e) => Err(Some(e)),
            },
            other => Ok(other),
        };
        self.symbols = read.unwrap_or_else(|e| {
            hidden(e);
            Kallsyms::Hidden
        });
        match &mut self.symbols {
            Kallsyms::Table(t) => t.function(addr).map(Rc::from),
            Kallsyms::Passes(file) => match look_up(file, addr) {
                Ok(Listing::Found(name)) => name.map(Rc::from),
                Ok(Listing::Hidden) => {
                    hidden(None);
                    self.symbols = Kallsyms::Hidden;
                    None
                }
                Err(e) => {
                    hidden(Some(e));
                    self.symbols = Kallsyms::Hidden;
                    None
                }
            },
            Kallsyms::Open(_) | Kallsyms::Hidden => None,
        }
    }
}

/// Says once why drop locations are `unknown`: the listing shows no addresses (`None`), or
/// reading it failed.
fn hidden(error: Option<io::Error>) {
    let _said = match error {
        None => diag::once(
            "kallsyms",
            "/proc/kallsyms shows no addresses (kernel.kptr_restrict, or no CAP_SYSLOG): drop \
             locations say \"unknown\"; run as root with kptr_restrict 0 or 1 to name them",
        ),
        Some(e) => diag::once(
            "kallsyms",
            format_args!("cannot read /proc/kallsyms ({e}): drop locations say \"unknown\""),
        ),
    };
}

/// Most drop locations kept named (the kernel has a few hundred places that drop).
const LOCATIONS: usize = 4096;

/// The table of `file`, read from its start.
fn read_table(file: &mut fs::File) -> io::Result<Listing<Option<Symbols>>> {
    file.rewind()?;
    Symbols::read(BufReader::with_capacity(64 << 10, &*file), TABLE_MAX_BYTES)
}

/// [`function_in`] over `file`, read again from its start.
fn look_up(file: &mut fs::File, addr: u64) -> io::Result<Listing<Option<String>>> {
    file.rewind()?;
    function_in(BufReader::with_capacity(64 << 10, &*file), addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_lose_their_prefix_and_unknown_ones_are_numbers() {
        let r = Reasons::new(&[
            (0, "SKB_NOT_DROPPED_YET".into()),
            (1, "SKB_CONSUMED".into()),
            (2, "SKB_DROP_REASON_NOT_SPECIFIED".into()),
            (3, "SKB_DROP_REASON_NO_SOCKET".into()),
        ]);
        assert_eq!(&*r.name(3), "NO_SOCKET");
        assert_eq!(&*r.name(1), "CONSUMED");
        assert_eq!(&*r.name(77), "77");
        assert_eq!(&*r.name(DROP_REASON_UNKNOWN), "NOT_SPECIFIED");
        assert!(!r.is_drop(0) && !r.is_drop(1));
        assert!(r.is_drop(2) && r.is_drop(3) && r.is_drop(77));
        assert!(Reasons::default().is_drop(DROP_REASON_UNKNOWN));
    }

    #[test]
    fn hidden_addresses_give_no_symbols() {
        assert!(
            Symbols::parse("0000000000000000 T tcp_v4_rcv\n0000000000000000 t ip_error\n")
                .is_none()
        );
        let mut names = DropNames::with_symbols(Reasons::default(), Symbols::default());
        assert_eq!(&*names.location(0xffff_ffff_8100_0000), "unknown");
    }
}
