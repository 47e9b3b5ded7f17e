//! The nat table as `iptables-save -t nat` (or `iptables -t nat -S`) prints it, parsed into
//! chains of rules. Parsing never fails: matches pktrace does not model are kept as
//! [`Test::Unknown`] with their tokens, lines it cannot read are counted and skipped.

mod model;
mod parse;
mod table;

pub use model::{Cond, Key, MapKey, MapRef, Rule, SetRef, Target, Test, Val};
pub use table::{BUILTIN, Base, Hook, NatRules};

pub use super::addr::{Cidr, NatTo, in_range};
