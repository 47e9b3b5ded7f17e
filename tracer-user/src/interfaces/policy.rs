//! Which tc mechanism each interface gets: tcx links or clsact filters.
//!
//! tcx links die with the process (also on SIGKILL) and chain cleanly in front of the CNI's
//! programs, but each attach and each detach waits for an RCU grace period while holding rtnl
//! (`kernel/bpf/tcx.c`), one interface after the other whatever the threads: hundreds of pod
//! veths take seconds (BENCHMARKS.md "Start-up"). clsact filters go in through netlink without
//! that wait; they outlive a SIGKILL, and the next pktrace removes them (see [`super::clsact`]).
//!
//! The rule, the same at start and for interfaces that appear while following:
//! - an interface named in `--interfaces` (a pattern without `*` or `?`, such as `eth0`) gets
//!   tcx;
//! - an interface matched only by a glob (`azv*`, `veth*`, `cali*`) gets tcx while at most
//!   [`TCX_MAX_BY_PATTERN`] glob-matched interfaces are attached, counting it; beyond that,
//!   clsact. At start the count is every glob-matched interface found, so either all of them
//!   get tcx or all get clsact;
//! - kernels without tcx (before 6.6) get clsact everywhere; `PKTRACE_FORCE_CLSACT=1` and
//!   `PKTRACE_FORCE_TCX=1` force one mechanism everywhere (tests and the bench).
//!
//! An interface keeps the mechanism it was attached with until it goes.

use super::iface::Iface;
use crate::{
    config::{FORCE_CLSACT_ENV, FORCE_TCX_ENV, Knobs},
    util::{glob_match, is_glob},
};

/// The tc mechanism an interface is attached with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcMode {
    Tcx,
    Clsact,
}

impl TcMode {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tcx => "tcx",
            Self::Clsact => "clsact",
        }
    }
}

/// Glob-matched interfaces that still get tcx: 8 links' worth of RCU waits (about 30 ms per
/// interface, ingress and egress) plus the usual named ones (`eth0`, `azure0`) keep tcx's share
/// of start-up near 0.3 s.
pub const TCX_MAX_BY_PATTERN: usize = 8;

/// How the mechanism is chosen for this session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// tcx for named interfaces and for few glob-matched ones, clsact beyond.
    Auto,
    /// One mechanism everywhere, and why.
    Only(TcMode, Why),
}

/// Why every interface gets the same mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// An environment switch ([`FORCE_CLSACT_ENV`], [`FORCE_TCX_ENV`]).
    Forced,
    /// The kernel has no tcx (before 6.6).
    NoTcx,
}

impl Policy {
    /// The policy for a kernel with or without tcx and the environment switches (`"1"` is on).
    #[must_use]
    pub fn new(kernel_tcx: bool, force_clsact: bool, force_tcx: bool) -> Self {
        match (kernel_tcx, force_clsact, force_tcx) {
            (false, _, _) => Self::Only(TcMode::Clsact, Why::NoTcx),
            (true, true, _) => Self::Only(TcMode::Clsact, Why::Forced),
            (true, false, true) => Self::Only(TcMode::Tcx, Why::Forced),
            (true, false, false) => Self::Auto,
        }
    }

    /// The policy of this kernel and the knobs read at start-up.
    #[must_use]
    pub fn current(knobs: &Knobs) -> Self {
        use aya::util::KernelVersion;
        let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
        Self::new(tcx, knobs.force_clsact, knobs.force_tcx)
    }

    /// The mechanism for one interface: `named` when `--interfaces` names it without a glob,
    /// `by_pattern` the number of glob-matched interfaces attached with it (counting it when it
    /// is glob-matched).
    #[must_use]
    pub const fn mode(self, named: bool, by_pattern: usize) -> TcMode {
        match self {
            Self::Only(mode, _) => mode,
            Self::Auto if named || by_pattern <= TCX_MAX_BY_PATTERN => TcMode::Tcx,
            Self::Auto => TcMode::Clsact,
        }
    }

    /// The mechanism for each of the interfaces found at start, in their order.
    #[must_use]
    pub fn plan(self, ifaces: &[Iface], patterns: &[String]) -> Vec<TcMode> {
        let by_pattern = ifaces
            .iter()
            .filter(|i| !is_named(patterns, &i.name))
            .count();
        ifaces
            .iter()
            .map(|i| self.mode(is_named(patterns, &i.name), by_pattern))
            .collect()
    }

    /// The mechanism for an interface that appeared while following, given the names of the
    /// interfaces attached already.
    #[must_use]
    pub fn mode_for_new<S: AsRef<str>>(
        self,
        name: &str,
        attached: &[S],
        patterns: &[String],
    ) -> TcMode {
        if is_named(patterns, name) {
            return self.mode(true, 0);
        }
        let by_pattern = attached
            .iter()
            .filter(|n| !is_named(patterns, n.as_ref()))
            .count()
            + 1;
        self.mode(false, by_pattern)
    }

    /// The start-up line: which mechanism each group of interfaces got and why, e.g.
    /// `tcx on eth0, azure0; clsact on 250 interfaces matching azv* (more than 8 match a
    /// pattern)`. `ifaces` and `modes` are as [`Policy::plan`] took and gave them.
    #[must_use]
    pub fn describe(self, ifaces: &[Iface], modes: &[TcMode], patterns: &[String]) -> String {
        let mut groups = Vec::new();
        for mode in [TcMode::Tcx, TcMode::Clsact] {
            let mine: Vec<&Iface> = ifaces
                .iter()
                .zip(modes)
                .filter(|(_, m)| **m == mode)
                .map(|(i, _)| i)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let (named, globbed): (Vec<&Iface>, Vec<&Iface>) =
                mine.iter().partition(|i| is_named(patterns, &i.name));
            let mut parts: Vec<String> = named.iter().map(|i| crate::util::safe(&i.name)).collect();
            if !globbed.is_empty() {
                let globs: Vec<&str> = patterns
                    .iter()
                    .filter(|p| is_glob(p) && globbed.iter().any(|i| glob_match(p, &i.name)))
                    .map(String::as_str)
                    .collect();
                let noun = if globbed.len() == 1 {
                    "interface"
                } else {
                    "interfaces"
                };
                parts.push(format!(
                    "{} {noun} matching {}",
                    globbed.len(),
                    crate::util::safe(&globs.join(", "))
                ));
            }
            groups.push(format!("{} on {}", mode.as_str(), parts.join(", ")));
        }
        let why = match self {
            Self::Only(TcMode::Clsact, Why::Forced) => format!(" ({FORCE_CLSACT_ENV}=1)"),
            Self::Only(TcMode::Tcx, _) => format!(" ({FORCE_TCX_ENV}=1)"),
            Self::Only(TcMode::Clsact, Why::NoTcx) => {
                " (this kernel has no tcx: Linux 6.6+)".to_owned()
            }
            Self::Auto if modes.contains(&TcMode::Clsact) => format!(
                " (more than {TCX_MAX_BY_PATTERN} interfaces match a pattern: tcx would wait \
                 for the kernel about 30 ms per interface)"
            ),
            Self::Auto => String::new(),
        };
        format!("{}{why}", groups.join("; "))
    }
}

/// True when a pattern without glob characters names `name` exactly.
#[must_use]
pub fn is_named(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| !is_glob(p) && p == name)
}

/// The one-word summary of the mechanisms in use: `tcx`, `clsact` or `tcx+clsact`.
#[must_use]
pub fn summary(modes: &[TcMode]) -> &'static str {
    match (
        modes.contains(&TcMode::Tcx),
        modes.contains(&TcMode::Clsact),
    ) {
        (true, true) => "tcx+clsact",
        (false, true) => "clsact",
        _ => "tcx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats() -> Vec<String> {
        ["eth0", "azure0", "azv*", "cali*"]
            .map(String::from)
            .to_vec()
    }

    fn ifaces(names: &[&str]) -> Vec<Iface> {
        names
            .iter()
            .zip(1..)
            .map(|(n, index)| Iface {
                index,
                name: (*n).to_owned(),
            })
            .collect()
    }

    fn veths(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("azv{i:011x}")).collect()
    }

    fn node(n: usize) -> Vec<Iface> {
        let mut names = vec!["eth0".to_owned(), "azure0".to_owned()];
        names.extend(veths(n));
        ifaces(&names.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn named_interfaces_keep_tcx_and_many_glob_matches_get_clsact() {
        let p = Policy::Auto;
        let small = node(TCX_MAX_BY_PATTERN);
        assert!(p.plan(&small, &pats()).iter().all(|m| *m == TcMode::Tcx));
        let big = node(TCX_MAX_BY_PATTERN + 1);
        let modes = p.plan(&big, &pats());
        assert_eq!(modes[..2], [TcMode::Tcx, TcMode::Tcx], "eth0 and azure0");
        assert!(modes[2..].iter().all(|m| *m == TcMode::Clsact), "{modes:?}");
        assert_eq!(summary(&modes), "tcx+clsact");
    }

    #[test]
    fn a_glob_matched_name_given_explicitly_counts_as_named() {
        let pats: Vec<String> = ["azv*", "azv00000000001"].map(String::from).to_vec();
        let names = veths(250);
        let all = ifaces(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let modes = Policy::Auto.plan(&all, &pats);
        let tcx: Vec<&str> = all
            .iter()
            .zip(&modes)
            .filter(|(_, m)| **m == TcMode::Tcx)
            .map(|(i, _)| i.name.as_str())
            .collect();
        assert_eq!(tcx, ["azv00000000001"]);
        assert_eq!(
            Policy::Auto.describe(&all, &modes, &pats),
            "tcx on azv00000000001; clsact on 249 interfaces matching azv* (more than 8 interfaces \
             match a pattern: tcx would wait for the kernel about 30 ms per interface)"
        );
    }

    #[test]
    fn forced_and_old_kernels_use_one_mechanism_everywhere() {
        let big = node(250);
        for (policy, want) in [
            (Policy::new(true, true, false), TcMode::Clsact),
            (Policy::new(true, true, true), TcMode::Clsact),
            (Policy::new(true, false, true), TcMode::Tcx),
            (Policy::new(false, false, true), TcMode::Clsact),
            (Policy::new(false, false, false), TcMode::Clsact),
        ] {
            assert!(
                policy.plan(&big, &pats()).iter().all(|m| *m == want),
                "{policy:?}"
            );
            assert_eq!(
                policy.mode_for_new("eth1", &["eth0"], &pats()),
                want,
                "{policy:?}"
            );
        }
        assert_eq!(Policy::new(true, false, false), Policy::Auto);
    }

    #[test]
    fn new_interfaces_follow_the_same_count() {
        let p = Policy::Auto;
        let mut attached: Vec<String> = vec!["eth0".into(), "azure0".into()];
        attached.extend(veths(TCX_MAX_BY_PATTERN - 1));
        // The 8th glob-matched interface still gets tcx, the 9th clsact.
        assert_eq!(p.mode_for_new("azvnew1", &attached, &pats()), TcMode::Tcx);
        attached.push("azvnew1".into());
        assert_eq!(
            p.mode_for_new("azvnew2", &attached, &pats()),
            TcMode::Clsact
        );
        assert_eq!(p.mode_for_new("cali0", &attached, &pats()), TcMode::Clsact);
        // A named interface that appears keeps tcx whatever the count.
        assert_eq!(p.mode_for_new("eth0", &attached, &pats()), TcMode::Tcx);
        // After pods went, a new one gets tcx again: the count is of what is attached now.
        attached.truncate(4);
        assert_eq!(p.mode_for_new("azvnew3", &attached, &pats()), TcMode::Tcx);
        // The same decision as at start for the same set.
        let mut names = attached.clone();
        names.push("azvnew3".into());
        let set = ifaces(&names.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(p.plan(&set, &pats()).last(), Some(&TcMode::Tcx));
    }

    #[test]
    fn the_start_line_names_each_group_and_says_why() {
        let p = Policy::Auto;
        let big = node(250);
        let modes = p.plan(&big, &pats());
        assert_eq!(
            p.describe(&big, &modes, &pats()),
            "tcx on eth0, azure0; clsact on 250 interfaces matching azv* (more than 8 interfaces \
             match a pattern: tcx would wait for the kernel about 30 ms per interface)"
        );
        let small = node(3);
        let modes = p.plan(&small, &pats());
        assert_eq!(
            p.describe(&small, &modes, &pats()),
            "tcx on eth0, azure0, 3 interfaces matching azv*"
        );
        let one = ifaces(&["azv1"]);
        let forced = Policy::new(true, true, false);
        let modes = forced.plan(&one, &pats());
        assert_eq!(
            forced.describe(&one, &modes, &pats()),
            "clsact on 1 interface matching azv* (PKTRACE_FORCE_CLSACT=1)"
        );
        let old = Policy::new(false, false, false);
        let modes = old.plan(&small, &pats());
        assert!(
            old.describe(&small, &modes, &pats())
                .ends_with("(this kernel has no tcx: Linux 6.6+)")
        );
        let tcx = Policy::new(true, false, true);
        let modes = tcx.plan(&big, &pats());
        assert_eq!(summary(&modes), "tcx");
        assert!(
            tcx.describe(&big, &modes, &pats())
                .ends_with("(PKTRACE_FORCE_TCX=1)")
        );
    }
}
