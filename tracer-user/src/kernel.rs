//! Kernel plumbing the rest of pktrace builds on, importing nothing else of the crate:
//! the running kernel's BTF ([`btf`]), privileges and lockdown ([`caps`]), the raw `bpf(2)`
//! calls aya 0.14 lacks ([`sys`]) and the loader that uses them for programs aya cannot load
//! ([`loader`]), and this host's addresses and clock ([`host`]).

pub mod btf;
pub mod caps;
pub mod host;
pub mod loader;
pub mod sys;
