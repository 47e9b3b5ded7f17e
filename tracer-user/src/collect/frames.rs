//! `-w`: the frames the tc programs copied, taken from the ring as it is read and held until
//! the journey of their packet is written ([`Frames::take`]).
//!
//! A frame is known by its hook, its kernel time and the packet's tuple at that hook: the same
//! three a tc step of a journey carries. Frames whose journey is never written (not shown, or
//! past `-c`) are let go by age ([`MAX_AGE_NS`] behind the newest) and, under a flood, by
//! number ([`MAX_FRAMES`], oldest first); both are counted ([`Frames::dropped`]).

use std::{collections::BTreeMap, sync::Mutex};

use tracer_common::{Frame, TcHook, TcSeen, Tuple};

/// Most frames held at once (about 25 MiB of 256-byte frames).
pub const MAX_FRAMES: usize = 65_536;

/// Frames older than this behind the newest one are let go: far longer than a journey stays
/// open without an event (the join's idle time-out, 1 s), so a frame whose journey is still
/// to be written is never among them.
pub const MAX_AGE_NS: u64 = 30_000_000_000;

/// A frame as a hook saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub tuple: Tuple,
    /// The captured bytes (up to `--snaplen`).
    pub bytes: Box<[u8]>,
    /// The frame's length at the hook.
    pub orig_len: u32,
}

/// The frames waiting for their journeys, keyed by kernel time and hook (a short list each:
/// two packets at one hook in the same nanosecond are told apart by their tuples).
#[derive(Debug, Default)]
pub struct Frames {
    by_time: BTreeMap<(u64, bool), Vec<Held>>,
    held: usize,
    dropped: u64,
}

/// The frames, shared by the collector (which adds them) and the pcapng output (which takes
/// them).
pub type Shared = std::sync::Arc<Mutex<Frames>>;

impl Frames {
    /// Holds the frame `f` of the tc observation `seen`.
    pub fn add(&mut self, seen: &TcSeen, f: Frame<'_>) {
        let key = (seen.ktime_ns, seen.hook == TcHook::Ingress);
        self.by_time.entry(key).or_default().push(Held {
            tuple: seen.tuple,
            bytes: f.bytes.into(),
            orig_len: f.orig_len,
        });
        self.held += 1;
        let horizon = seen.ktime_ns.saturating_sub(MAX_AGE_NS);
        while let Some(entry) = self.by_time.first_entry() {
            if self.held <= MAX_FRAMES && entry.key().0 >= horizon {
                break;
            }
            let n = entry.remove().len();
            self.held -= n;
            self.dropped += n as u64;
        }
    }

    /// Takes the frame a tc step saw: at `hook`, at `ktime_ns`, of the packet `tuple`.
    pub fn take(&mut self, hook: TcHook, ktime_ns: u64, tuple: &Tuple) -> Option<Held> {
        let key = (ktime_ns, hook == TcHook::Ingress);
        let list = self.by_time.get_mut(&key)?;
        let i = list.iter().position(|h| h.tuple == *tuple)?;
        let held = list.swap_remove(i);
        if list.is_empty() {
            self.by_time.remove(&key);
        }
        self.held -= 1;
        Some(held)
    }

    /// Frames held now.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.held
    }

    /// True when none is held.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Frames let go unwritten (by age or number) since the start.
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{Fingerprint, TcHook};

    use super::*;

    fn seen(hook: TcHook, ktime_ns: u64, sport: u16) -> TcSeen {
        TcSeen {
            hook,
            flags: 0,
            ifindex: 3,
            ktime_ns,
            fp: Fingerprint::default(),
            tuple: Tuple {
                sport,
                ..Tuple::default()
            },
        }
    }

    fn frame(bytes: &[u8]) -> Frame<'_> {
        Frame {
            bytes,
            orig_len: 1500,
        }
    }

    #[test]
    fn a_frame_is_taken_once_by_its_hook_time_and_tuple() {
        let mut f = Frames::default();
        f.add(&seen(TcHook::Ingress, 100, 1), frame(&[1, 2, 3]));
        f.add(&seen(TcHook::Egress, 100, 1), frame(&[4]));
        f.add(&seen(TcHook::Ingress, 100, 2), frame(&[5]));
        assert_eq!(f.len(), 3);
        let t1 = seen(TcHook::Ingress, 100, 1).tuple;
        assert_eq!(f.take(TcHook::Ingress, 101, &t1), None);
        let got = f.take(TcHook::Ingress, 100, &t1).expect("held");
        assert_eq!((&*got.bytes, got.orig_len), (&[1u8, 2, 3][..], 1500));
        assert_eq!(f.take(TcHook::Ingress, 100, &t1), None, "taken once");
        assert_eq!(
            f.take(TcHook::Egress, 100, &t1).map(|h| h.bytes),
            Some([4u8].into())
        );
        let t2 = seen(TcHook::Ingress, 100, 2).tuple;
        assert!(f.take(TcHook::Ingress, 100, &t2).is_some());
        assert!(f.is_empty());
        assert_eq!(f.dropped(), 0);
    }

    #[test]
    fn frames_too_old_or_too_many_are_let_go_and_counted() {
        let mut f = Frames::default();
        f.add(&seen(TcHook::Ingress, 1, 1), frame(&[1]));
        f.add(&seen(TcHook::Ingress, 2, 1), frame(&[2]));
        f.add(&seen(TcHook::Ingress, 2 + MAX_AGE_NS, 1), frame(&[3]));
        assert_eq!(
            (f.len(), f.dropped()),
            (2, 1),
            "the first is older than MAX_AGE_NS"
        );
        let mut f = Frames::default();
        for i in 0..=MAX_FRAMES as u64 {
            f.add(&seen(TcHook::Egress, 1_000 + i, 1), frame(&[0]));
        }
        assert_eq!((f.len(), f.dropped()), (MAX_FRAMES, 1));
        let t = seen(TcHook::Egress, 0, 1).tuple;
        assert_eq!(
            f.take(TcHook::Egress, 1_000, &t),
            None,
            "the oldest went first"
        );
        assert!(f.take(TcHook::Egress, 1_001, &t).is_some());
    }
}
