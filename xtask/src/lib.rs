//! pktrace's task runner: the front end of `cargo xtask …` (the binary parses the command line)
//! and its small commands: toolchain and package setup, the demo, `dist`, `deploy-check`,
//! `fuzz`, the test tiers ([`runner`]) and the module layers check ([`layers`]). The larger
//! parts are crates of their own that the commands call: the lab (`tests/lab`, re-exported
//! here as [`lab`] for the integration tests), the VM runner (`tests/vm`), the bench
//! (`xtask/bench`), and the helpers they share (`xtask/common`).

pub mod demo;
pub mod deploy;
pub mod dist;
pub mod fuzz;
pub mod layers;
pub mod runner;
pub mod setup;

/// The lab (its own crate, `tests/lab`), here for the integration tests and the commands.
pub use pktrace_lab as lab;
/// Which tests need which kernel feature (in `xtask/common`, for the VM runner too).
pub use xtask_common::needs;
pub use xtask_common::{
    PKTRACE_BIN_ENV, PKTRACE_DIST_BIN_ENV, XTASK_BIN_ENV, target_dir, workspace_root, xtask_exe,
};

pub use self::setup::setup;
