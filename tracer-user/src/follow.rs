//! Following a node that changes under pktrace: interfaces that appear, get renamed or vanish
//! (pods created and deleted), and a followed pod that comes back with another address.
//!
//! The decisions are pure functions here; `run` applies them to the attachments, the in-kernel
//! address filter and the correlator.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use crate::{
    interfaces::{links::LinkEvent, tc::Iface},
    traced::TracedAddrs,
    util::{iface_matches, safe},
};

/// What to do about one link event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A link that matches `--interfaces` and is not attached yet.
    Attach(Iface),
    /// An attached link got a new name that still matches.
    Rename { index: u32, name: String },
    /// An attached link was renamed to a name no pattern matches: detach, it still exists.
    Detach { index: u32, name: String },
    /// An attached link vanished.
    Gone { index: u32 },
    /// Nothing to do (up/down, a link we do not trace, an event already handled).
    Nothing,
}

/// The action for `ev`, given the name under which its link is attached (`None`: not attached).
#[must_use]
#[expect(
    clippy::match_same_arms,
    reason = "one arm per (event, attached) case, each a decision of its own"
)]
pub fn decide(ev: &LinkEvent, attached: Option<&str>, patterns: &[String]) -> Action {
    match (ev, attached) {
        (LinkEvent::Del { index, .. }, Some(_)) => Action::Gone { index: *index },
        (LinkEvent::Del { .. }, None) => Action::Nothing,
        (LinkEvent::New { index, name, .. }, None) if iface_matches(patterns, name) => {
            Action::Attach(Iface {
                index: *index,
                name: name.clone(),
            })
        }
        (LinkEvent::New { .. }, None) => Action::Nothing,
        (LinkEvent::New { name, .. }, Some(old)) if name == old => Action::Nothing,
        (LinkEvent::New { index, name, .. }, Some(_)) if iface_matches(patterns, name) => {
            Action::Rename {
                index: *index,
                name: name.clone(),
            }
        }
        (LinkEvent::New { index, name, .. }, Some(_)) => Action::Detach {
            index: *index,
            name: name.clone(),
        },
    }
}

/// The events that bring `attached` (index, name) in line with the interfaces listed now, for
/// when link notifications were lost: deletions for what is gone, news for the rest.
#[must_use]
pub fn resync(attached: &[(u32, String)], present: &[Iface]) -> Vec<LinkEvent> {
    let mut out: Vec<LinkEvent> = attached
        .iter()
        .filter(|(i, _)| !present.iter().any(|p| p.index == *i))
        .map(|(index, name)| LinkEvent::Del {
            index: *index,
            name: name.clone(),
        })
        .collect();
    out.extend(present.iter().map(|p| LinkEvent::New {
        index: p.index,
        name: p.name.clone(),
        flags: 0,
    }));
    out
}

/// Size and modification time of a file: a change means "read it again".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    /// The file's stamp now; `None` when it cannot be read.
    #[must_use]
    pub fn of(path: &Path) -> Option<Self> {
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            len: m.len(),
            modified: m.modified().ok(),
        })
    }
}

/// A followed pod: when to look it up again. Its addresses are the session's
/// [`TracedAddrs`].
#[derive(Debug)]
pub struct PodWatch {
    pub label: String,
    state_file: PathBuf,
    stamp: Option<Stamp>,
    /// A new interface appeared: the pod may have been recreated.
    pub dirty: bool,
}

impl PodWatch {
    #[must_use]
    pub fn new(label: String, state_file: PathBuf) -> Self {
        let stamp = Stamp::of(&state_file);
        Self {
            label,
            state_file,
            stamp,
            dirty: false,
        }
    }

    /// True (once) when the pod should be resolved again: the state file changed or a new
    /// interface appeared since the last call.
    pub fn due(&mut self) -> bool {
        let now = Stamp::of(&self.state_file);
        let changed = now != self.stamp;
        self.stamp = now;
        std::mem::take(&mut self.dirty) || changed
    }

    /// `pod default/x: now 10.13.76.60 (was 10.13.76.50)`.
    #[must_use]
    pub fn moved_line(&self, now: &TracedAddrs, removed: &[IpAddr]) -> String {
        format!(
            "pod {}: now {now} (was {})",
            safe(&self.label),
            TracedAddrs::new(removed.iter().copied())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats() -> Vec<String> {
        vec!["eth0".into(), "azv*".into()]
    }

    fn new(index: u32, name: &str) -> LinkEvent {
        LinkEvent::New {
            index,
            name: name.into(),
            flags: 0,
        }
    }

    #[test]
    fn a_new_matching_link_is_attached_once() {
        let want = Action::Attach(Iface {
            index: 9,
            name: "azv0123456789a".into(),
        });
        assert_eq!(decide(&new(9, "azv0123456789a"), None, &pats()), want);
        // The same event again (subscribed before listing, or up/down) changes nothing.
        assert_eq!(
            decide(&new(9, "azv0123456789a"), Some("azv0123456789a"), &pats()),
            Action::Nothing
        );
        assert_eq!(decide(&new(9, "cali0123"), None, &pats()), Action::Nothing);
    }

    #[test]
    fn renames_re_evaluate_the_patterns() {
        assert_eq!(
            decide(&new(9, "azvnew"), Some("azvold"), &pats()),
            Action::Rename {
                index: 9,
                name: "azvnew".into()
            }
        );
        assert_eq!(
            decide(&new(9, "tmp123"), Some("azvold"), &pats()),
            Action::Detach {
                index: 9,
                name: "tmp123".into()
            }
        );
        // A link renamed into the patterns is attached.
        assert!(matches!(
            decide(&new(9, "azvx"), None, &pats()),
            Action::Attach(_)
        ));
    }

    #[test]
    fn deletion_matters_only_for_attached_links() {
        let del = LinkEvent::Del {
            index: 9,
            name: "azvx".into(),
        };
        assert_eq!(
            decide(&del, Some("azvx"), &pats()),
            Action::Gone { index: 9 }
        );
        assert_eq!(decide(&del, None, &pats()), Action::Nothing);
    }

    #[test]
    fn resync_reports_what_vanished_and_lists_the_rest() {
        let attached = vec![(3, "eth0".to_owned()), (9, "azvgone".to_owned())];
        let present = vec![
            Iface {
                index: 3,
                name: "eth0".into(),
            },
            Iface {
                index: 12,
                name: "azvnew".into(),
            },
        ];
        let evs = resync(&attached, &present);
        assert_eq!(
            evs[0],
            LinkEvent::Del {
                index: 9,
                name: "azvgone".into()
            }
        );
        assert_eq!(evs.len(), 3);
        let actions: Vec<Action> = evs
            .iter()
            .map(|e| {
                decide(
                    e,
                    attached
                        .iter()
                        .find(|(i, _)| *i == e.index())
                        .map(|(_, n)| n.as_str()),
                    &pats(),
                )
            })
            .collect();
        assert_eq!(
            actions,
            [
                Action::Gone { index: 9 },
                Action::Nothing,
                Action::Attach(Iface {
                    index: 12,
                    name: "azvnew".into()
                })
            ]
        );
    }

    #[test]
    fn a_recreated_pod_says_where_it_moved() {
        let old: IpAddr = "10.13.76.50".parse().unwrap();
        let new: IpAddr = "10.13.76.60".parse().unwrap();
        let w = PodWatch::new("default/x".into(), "/nonexistent/state.json".into());
        let (now, changes) = TracedAddrs::new([old]).replaced_by(vec![new]).unwrap();
        assert_eq!(
            w.moved_line(&now, &changes.removed),
            "pod default/x: now 10.13.76.60 (was 10.13.76.50)"
        );
    }

    #[test]
    fn the_state_file_is_read_again_when_it_changes_or_a_link_appears() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("azure-vnet.json");
        std::fs::write(&file, "{}").unwrap();
        let mut w = PodWatch::new("default/x".into(), file.clone());
        assert!(!w.due());
        std::fs::write(&file, "{\"a\":1}").unwrap();
        assert!(w.due());
        assert!(!w.due());
        w.dirty = true;
        assert!(w.due());
        assert!(!w.due());
    }
}
