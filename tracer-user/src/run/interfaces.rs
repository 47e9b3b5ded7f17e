//! Which interfaces a session attaches to: `--interfaces`, or pktrace's defaults plus the
//! patterns of the CNIs whose interfaces are on the node, chosen once at start-up.

use super::RunError;
use crate::{
    interfaces::tc::{self, Iface},
    util::{self, glob_match},
};

/// The node's interfaces at start and those of them chosen.
pub(super) struct Chosen {
    pub(super) choice: InterfaceChoice,
    /// The chosen interfaces present now (not empty).
    pub(super) ifaces: Vec<Iface>,
}

/// Lists the node's interfaces and chooses those to attach to.
///
/// # Errors
/// No interface matches (the error names the patterns and the interfaces present).
pub(super) fn choose(given: Option<&[String]>) -> Result<Chosen, RunError> {
    let all = tc::list_ifaces();
    let names: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
    let choice = choose_interfaces(given, &names);
    let ifaces: Vec<Iface> = all
        .iter()
        .filter(|i| util::iface_matches(&choice.patterns, &i.name))
        .cloned()
        .collect();
    if ifaces.is_empty() {
        return Err(tc::TcAttachError::NoInterface {
            patterns: choice.patterns.join(","),
            present: all
                .iter()
                .map(|i| util::safe(&i.name))
                .collect::<Vec<_>>()
                .join(" "),
        }
        .into());
    }
    Ok(Chosen { choice, ifaces })
}

/// The interfaces pktrace attaches to on every node when `--interfaces` is not given: Azure
/// CNI's uplink, bridge (bridge mode) and pod veths.
pub(super) const DEFAULT_INTERFACES: [&str; 3] = ["eth0", "azure0", "azv*"];

/// A CNI recognised by an interface on the node, and the patterns added for its pods.
struct CniInterfaces {
    cni: &'static str,
    /// The CNI is there when an interface matches this.
    marker: &'static str,
    patterns: &'static [&'static str],
}

/// kubenet's bridge is `cbr0` (its pod veths are plain `veth…`, which other software makes too,
/// so `cbr0` is the marker); Calico names its host interfaces `cali…`.
const CNI_INTERFACES: [CniInterfaces; 2] = [
    CniInterfaces {
        cni: "kubenet",
        marker: "cbr0",
        patterns: &["cbr0", "veth*"],
    },
    CniInterfaces {
        cni: "Calico",
        marker: "cali*",
        patterns: &["cali*"],
    },
];

/// The interface patterns of a session and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct InterfaceChoice {
    /// Names and globs, see [`crate::util::iface_matches`].
    pub(super) patterns: Vec<String>,
    /// `--interfaces` gave them.
    pub(super) explicit: bool,
    /// The CNIs whose interfaces were found (without `--interfaces`).
    pub(super) detected: Vec<&'static str>,
}

impl InterfaceChoice {
    /// One line for the start-up report, e.g. `eth0,azure0,azv*,cali* (default, plus cali*:
    /// Calico interfaces found)`.
    #[must_use]
    pub(super) fn describe(&self) -> String {
        let list = self.patterns.join(",");
        if self.explicit {
            return format!("{list} (--interfaces)");
        }
        let found: Vec<String> = CNI_INTERFACES
            .iter()
            .filter(|c| self.detected.contains(&c.cni))
            .map(|c| format!("{}: {} interfaces found", c.patterns.join(","), c.cni))
            .collect();
        if found.is_empty() {
            format!("{list} (default; no kubenet or Calico interfaces found)")
        } else {
            format!("{list} (default, plus {})", found.join("; "))
        }
    }
}

/// The interface patterns to attach to: `given` (`--interfaces`) as it is, else
/// [`DEFAULT_INTERFACES`] plus the patterns of each CNI whose marker interface is in `present`
/// (the node's interface names).
#[must_use]
pub(super) fn choose_interfaces<S: AsRef<str>>(
    given: Option<&[String]>,
    present: &[S],
) -> InterfaceChoice {
    if let Some(given) = given {
        return InterfaceChoice {
            patterns: given.to_vec(),
            explicit: true,
            detected: Vec::new(),
        };
    }
    let mut patterns: Vec<String> = DEFAULT_INTERFACES.map(String::from).to_vec();
    let mut detected = Vec::new();
    for cni in &CNI_INTERFACES {
        if present
            .iter()
            .any(|name| glob_match(cni.marker, name.as_ref()))
        {
            detected.push(cni.cni);
            for p in cni.patterns {
                if !patterns.iter().any(|have| have == p) {
                    patterns.push((*p).to_owned());
                }
            }
        }
    }
    InterfaceChoice {
        patterns,
        explicit: false,
        detected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_interfaces_follow_the_cni_found() {
        let azure = [
            "lo",
            "eth0",
            "azure0",
            "azv47c3ee9d512",
            "docker0",
            "veth1a2b3c",
        ];
        let c = choose_interfaces(None, &azure);
        assert_eq!(c.patterns, DEFAULT_INTERFACES);
        assert!(!c.explicit && c.detected.is_empty());
        assert!(
            c.describe().starts_with("eth0,azure0,azv* (default"),
            "{}",
            c.describe()
        );

        let kubenet = ["lo", "eth0", "cbr0", "veth3f2a9c1d", "veth8b0e4a77"];
        let c = choose_interfaces(None, &kubenet);
        assert_eq!(c.patterns, ["eth0", "azure0", "azv*", "cbr0", "veth*"]);
        assert_eq!(c.detected, ["kubenet"]);
        assert!(
            c.describe().contains("cbr0,veth*: kubenet"),
            "{}",
            c.describe()
        );
        // veth interfaces alone (docker, other CNIs) are not kubenet.
        assert!(
            choose_interfaces(None, &["eth0", "veth0"])
                .detected
                .is_empty()
        );

        let calico = ["lo", "eth0", "cali47c3ee9d512", "calia4124965a9b", "tunl0"];
        let c = choose_interfaces(None, &calico);
        assert_eq!(c.patterns, ["eth0", "azure0", "azv*", "cali*"]);
        assert_eq!(c.detected, ["Calico"]);
        assert!(c.describe().contains("cali*: Calico"), "{}", c.describe());

        let both = ["cbr0", "cali1"];
        assert_eq!(choose_interfaces(None, &both).patterns.len(), 6);
        assert!(choose_interfaces(None, &[] as &[&str]).detected.is_empty());

        let given = vec!["eth1".to_owned(), "veth*".to_owned()];
        let c = choose_interfaces(Some(&given), &calico);
        assert_eq!((c.patterns, c.explicit), (given, true));
        assert!(c.detected.is_empty());
        let c = choose_interfaces(Some(&["eth0".to_owned()]), &calico);
        assert_eq!(c.describe(), "eth0 (--interfaces)");
    }
}
