//! pktrace's task runner: toolchain and package setup, the lab (a simulated AKS node in
//! network namespaces), the demo, and the test tiers. The binary (`cargo xtask …`) is a thin
//! CLI over this library; the integration tests use the lab through it too.

pub mod bench;
pub mod demo;
pub mod deploy;
pub mod dist;
pub mod fuzz;
pub mod layers;
pub mod runner;
pub mod setup;

/// The lab (its own crate, `tests/lab`), here for the integration tests and the commands.
pub use pktrace_lab as lab;
pub use xtask_common::{
    PKTRACE_BIN_ENV, PKTRACE_DIST_BIN_ENV, XTASK_BIN_ENV, target_dir, workspace_root, xtask_exe,
};

pub use self::setup::setup;
