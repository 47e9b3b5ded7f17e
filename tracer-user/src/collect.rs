//! Reading the kernel's events and counters.
//!
//! The kernel submits events without waking the reader (a wakeup per event costs microseconds
//! per packet) and wakes it only past a fill threshold, so the collector drains both on
//! readiness and on a short timer. Losses (ring buffer full) are counted per CPU in the kernel
//! and reported from here; nothing is lost silently. The same holds for the in-kernel table of
//! flows followed after NAT (`TRACKED_FLOWS`, an LRU map): the kernel counts the entries it
//! adds, user space never deletes one, so every entry added and no longer there was evicted.

use std::os::fd::{AsRawFd, RawFd};

use aya::{
    Ebpf,
    maps::{HashMap, IterableMap as _, MapData, MapError, PerCpuArray, RingBuf},
};
use tracer_common::{Event, Tuple, counter};

/// Takes map `name` out of the object as a `T` (the collector owns its maps from here on).
fn take_map<T: TryFrom<aya::maps::Map, Error = MapError>>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<T, CollectError> {
    let map = ebpf.take_map(name).ok_or(CollectError::MissingMap(name))?;
    T::try_from(map).map_err(|source| CollectError::Map { name, source })
}

/// Failures to set up or read the collector's maps.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("map {0} is missing from the eBPF object")]
    MissingMap(&'static str),
    #[error("map {name} cannot be used")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
}

/// Sums of the kernel's per-CPU counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub seen: u64,
    pub matched: u64,
    pub emitted: u64,
    pub ringbuf_full: u64,
    pub unparsed: u64,
    pub nat_seen: u64,
    pub flows_added: u64,
    pub nat_unpaired: u64,
    /// Entries added to the followed-flows table (one per flow direction).
    pub flow_entries: u64,
}

/// Entries of the followed-flows table that were evicted, at least: of `added` entries, at most
/// `capacity` can still be there, and `live` (when counted) are. A count of `live` taken while
/// the programs still insert can only be too high, so the result stays a lower bound.
#[must_use]
pub fn flows_evicted(added: u64, capacity: u64, live: Option<u64>) -> u64 {
    let by_capacity = added.saturating_sub(capacity);
    live.map_or(by_capacity, |live| {
        added.saturating_sub(live).max(by_capacity)
    })
}

/// The ring buffer, the counters and the followed-flows table (only counted).
pub struct Collector {
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, u64>,
    flows: HashMap<MapData, Tuple, u32>,
    flow_capacity: u64,
}

impl AsRawFd for Collector {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

/// Gives the start-up garbage back to the system. The collector is made once everything is
/// loaded and attached; parsing the kernel BTF and loading the object leave about 13 MiB that
/// glibc's malloc would otherwise keep for the whole session (measured: VmRSS 35.1 → 22.1 MiB
/// in an idle pktrace). musl returns freed memory by itself.
fn release_startup_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims glibc's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Collector {
    /// Takes the `EVENTS`, `COUNTERS` and `TRACKED_FLOWS` maps out of the loaded object (the
    /// programs keep using them).
    ///
    /// The start-up garbage goes back first: mapping the ring buffer puts all of its pages
    /// (twice its size) in the RSS at once, so trimming after it made the start-up garbage
    /// and the ring one peak (VmHWM).
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, CollectError> {
        release_startup_memory();
        let ring: RingBuf<MapData> = take_map(ebpf, "EVENTS")?;
        let counters = take_map(ebpf, "COUNTERS")?;
        let flows: HashMap<MapData, Tuple, u32> = take_map(ebpf, "TRACKED_FLOWS")?;
        let flow_capacity = flows
            .map()
            .info()
            .map_err(|source| CollectError::Map {
                name: "TRACKED_FLOWS",
                source,
            })?
            .max_entries();
        Ok(Self {
            ring,
            counters,
            flows,
            flow_capacity: u64::from(flow_capacity),
        })
    }

    /// Hands up to `max` waiting records to `f` as events; returns how many events there
    /// were. Records too short to be an event (never written by our programs) are skipped and
    /// counted in the return value's second element; fewer than `max` records in all means
    /// the ring is empty.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&Event)) -> (u64, u64) {
        let (mut n, mut bad) = (0, 0);
        for _ in 0..max {
            let Some(item) = self.ring.next() else { break };
            match Event::from_bytes(&item) {
                Some(ev) => {
                    f(&ev);
                    n += 1;
                }
                None => bad += 1,
            }
        }
        (n, bad)
    }

    /// Reads and sums the per-CPU counters.
    pub fn counters(&self) -> Result<Counters, CollectError> {
        let sum = |index: u32| -> Result<u64, CollectError> {
            let values = self
                .counters
                .get(&index, 0)
                .map_err(|source| CollectError::Map {
                    name: "COUNTERS",
                    source,
                })?;
            Ok(values.iter().copied().fold(0u64, u64::wrapping_add))
        };
        Ok(Counters {
            seen: sum(counter::SEEN)?,
            matched: sum(counter::MATCHED)?,
            emitted: sum(counter::EMITTED)?,
            ringbuf_full: sum(counter::RINGBUF_FULL)?,
            unparsed: sum(counter::UNPARSED)?,
            nat_seen: sum(counter::NAT_SEEN)?,
            flows_added: sum(counter::FLOWS_ADDED)?,
            nat_unpaired: sum(counter::NAT_UNPAIRED)?,
            flow_entries: sum(counter::FLOW_ENTRIES)?,
        })
    }

    /// Entries the followed-flows table can hold.
    #[must_use]
    pub const fn flow_capacity(&self) -> u64 {
        self.flow_capacity
    }

    /// Entries the followed-flows table holds now (a walk of its keys, one system call per
    /// entry: for the end of a session, not for every tick). Bounded by the capacity: a walk
    /// that restarts because an entry vanished under it cannot run on.
    #[must_use]
    pub fn live_flow_entries(&self) -> u64 {
        let walked = self
            .flows
            .keys()
            .take(usize::try_from(self.flow_capacity).unwrap_or(usize::MAX));
        walked.filter(Result::is_ok).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::flows_evicted;

    #[test]
    fn flow_evictions_are_a_lower_bound_from_the_capacity_or_exact_from_a_count() {
        // Nothing added past the capacity and nothing counted: no claim.
        assert_eq!(flows_evicted(0, 8, None), 0);
        assert_eq!(flows_evicted(8, 8, None), 0);
        // 30 added to a table of 8: at least 22 are gone.
        assert_eq!(flows_evicted(30, 8, None), 22);
        // Counted: 5 still there of 30, so 25 went (more than the capacity tells).
        assert_eq!(flows_evicted(30, 8, Some(5)), 25);
        // An LRU evicts before it is full (per-CPU free lists): 6 added, 4 there, 2 evicted.
        assert_eq!(flows_evicted(6, 8, Some(4)), 2);
        // A count taken while entries were added can exceed the counter read before it: never
        // below the capacity bound, never negative.
        assert_eq!(flows_evicted(30, 8, Some(31)), 22);
        assert_eq!(flows_evicted(3, 8, Some(4)), 0);
    }
}
