//! Small helpers every layer may use, importing nothing of the crate: [`text`] (printing
//! names that come from files or the kernel), [`glob`] (interface name patterns),
//! [`netlink`] (event sockets and one-shot nfnetlink requests), [`route`] (the route towards
//! an address), [`terminal`] (the terminal's width), [`tuple`](mod@tuple) (a tuple's
//! addresses and protocol name).

pub mod glob;
pub mod netlink;
pub mod route;
pub mod terminal;
pub mod text;
pub mod tuple;

pub use self::{
    glob::{glob_match, iface_matches, is_glob},
    text::safe,
};
