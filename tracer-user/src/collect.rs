//! Reading the kernel's events and counters.
//!
//! The kernel submits events without waking the reader (a wakeup per event costs microseconds
//! per packet) and wakes it only past a fill threshold, so the collector drains both on
//! readiness and on a short timer. Losses (ring buffer full) are counted per CPU in the kernel
//! and reported from here; nothing is lost silently. The same holds for the in-kernel table of
//! flows followed after NAT (`FOLLOWED_FLOWS`, an LRU map): the kernel counts the entries it
//! adds, user space never deletes one, so every entry added and no longer there was evicted.

use std::{
    os::fd::{AsFd as _, AsRawFd, RawFd},
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use aya::{
    Ebpf,
    maps::{HashMap, IterableMap as _, MapData, MapError, PerCpuArray},
};
use tracer_common::{Observation, Tuple, batch, counter, decode, frame};

pub mod flush;
pub mod frames;

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
    #[error("map EVENTS is not a ring buffer: pktrace's eBPF object does not match it")]
    NotARing,
    #[error("mapping the ring buffer EVENTS into memory failed")]
    Mmap(#[source] std::io::Error),
}

/// What one [`Collector::drain`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Observations of packets (the summary's events).
    pub events: u64,
    /// Names of drop sites ([`tracer_common::SiteSeen`]): no packet, not counted as events.
    pub sites: u64,
    /// Records that are no observation.
    pub bad: u64,
}

impl Drained {
    /// Every record read.
    #[must_use]
    pub const fn records(&self) -> u64 {
        self.events + self.sites + self.bad
    }
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
    /// The ring buffer map, kept for its fd (readiness); records are read through
    /// `reader`, its only mapping (aya's `RingBuf` would map the pages a second time: 8 MiB
    /// more of RSS).
    ring: MapData,
    reader: RingReader,
    counters: PerCpuArray<MapData, u64>,
    flows: HashMap<MapData, Tuple, u32>,
    flow_capacity: u64,
    /// Entries user space added to the followed-flows table ([`Self::follow`]).
    user_entries: u64,
    /// `-w`: where the frames the records carry go ([`Self::keep_frames`]).
    frames: Option<frames::Shared>,
    /// Has CPUs write out the records they staged ([`Self::flush_staged`]); `None` when the
    /// programs stage none.
    flusher: Option<flush::Flusher>,
}

impl AsRawFd for Collector {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.fd().as_fd().as_raw_fd()
    }
}

/// Gives the start-up garbage back to the system. The collector is made once everything is
/// loaded and attached; parsing the kernel BTF and loading the object leave megabytes that
/// glibc's malloc would otherwise keep for the whole session (BENCHMARKS.md "Memory"). musl
/// returns freed memory by itself.
fn release_startup_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims glibc's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Makes glibc's malloc give freed memory back as it goes (called first thing in a run):
/// blocks of 64 KiB and more are mapped of their own and unmapped when freed (glibc otherwise
/// raises that threshold up to 32 MiB as large blocks are freed, and keeps them in the heap),
/// and the heap's free top is returned past 128 KiB. Without it, the start-up's large, short
/// -lived buffers (the kernel's BTF, the object, the rules) stayed resident until the trim of
/// [`release_startup_memory`], and made pktrace's peak RSS (BENCHMARKS.md "Memory"). musl's
/// malloc does this by itself.
pub fn limit_allocator_slack() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc's malloc parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

impl Collector {
    /// Takes the `EVENTS`, `COUNTERS` and `FOLLOWED_FLOWS` maps out of the loaded object (the
    /// programs keep using them).
    ///
    /// The start-up garbage goes back first: mapping the ring buffer puts all of its pages
    /// (twice its size) in the RSS at once, so trimming after it made the start-up garbage
    /// and the ring one peak (`VmHWM`).
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, CollectError> {
        release_startup_memory();
        let events = ebpf
            .take_map("EVENTS")
            .ok_or(CollectError::MissingMap("EVENTS"))?;
        let aya::maps::Map::RingBuf(ring) = events else {
            return Err(CollectError::NotARing);
        };
        let ring_bytes = ring
            .info()
            .map_err(|source| CollectError::Map {
                name: "EVENTS",
                source,
            })?
            .max_entries();
        let reader = RingReader::new(ring.fd().as_fd().as_raw_fd(), ring_bytes as usize)?;
        let counters = take_map(ebpf, "COUNTERS")?;
        let flows: HashMap<MapData, Tuple, u32> = take_map(ebpf, "FOLLOWED_FLOWS")?;
        let flow_capacity = flows
            .map()
            .info()
            .map_err(|source| CollectError::Map {
                name: "FOLLOWED_FLOWS",
                source,
            })?
            .max_entries();
        Ok(Self {
            ring,
            reader,
            counters,
            flows,
            flow_capacity: u64::from(flow_capacity),
            user_entries: 0,
            frames: None,
            flusher: None,
        })
    }

    /// Hands waiting records to `f` as observations, the records of a batch one by one
    /// ([`batch::split`]), until at least `max` were handed or the ring is empty; returns how
    /// many there were of each sort. Records that are none ([`decode`]: never written by these
    /// programs) are skipped and counted; fewer than `max` records in all means the ring is
    /// empty. With [`Self::keep_frames`], the frame a tc record carries goes to the frames
    /// first.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&Observation)) -> Drained {
        let mut counts = Drained::default();
        let mut frames = self
            .frames
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        self.reader.read(max, |ring_record| {
            let before = counts.records();
            counts.bad += batch::split(ring_record, |record| match decode(record) {
                Ok(obs) => {
                    if let (Some(frames), Observation::Tc(seen), Some(fr)) =
                        (frames.as_mut(), &obs, frame(record))
                    {
                        frames.add(seen, fr);
                    }
                    f(&obs);
                    if matches!(obs, Observation::Site(_)) {
                        counts.sites += 1;
                    } else {
                        counts.events += 1;
                    }
                }
                Err(_) => counts.bad += 1,
            });
            usize::try_from(counts.records() - before).unwrap_or(usize::MAX)
        });
        counts
    }

    /// From now on, [`Self::flush_staged`] has CPUs write out what they staged.
    pub fn stage_with(&mut self, flusher: flush::Flusher) {
        self.flusher = Some(flusher);
    }

    /// Has the CPUs that hold staged records and went quiet write them to the ring (all that
    /// hold some when `all`; see [`flush`]); a no-op when the programs stage none. Returns how
    /// many CPUs did.
    pub fn flush_staged(&mut self, all: bool) -> usize {
        let Some(flusher) = self.flusher.as_mut() else {
            return 0;
        };
        let read = |index: u32| self.counters.get(&index, 0).ok();
        match (read(counter::BATCHES_BEGUN), read(counter::BATCHES_ENDED)) {
            (Some(begun), Some(ended)) => flusher.flush(&begun, &ended, all),
            _ => 0,
        }
    }

    /// The flushes that failed so far and the last error ([`flush::Flusher::failures`]).
    #[must_use]
    pub fn flush_failures(&self) -> (u64, Option<&std::io::Error>) {
        self.flusher
            .as_ref()
            .map_or((0, None), flush::Flusher::failures)
    }

    /// `-w`: from now on, the frames the tc records carry go to `frames`.
    pub fn keep_frames(&mut self, frames: frames::Shared) {
        self.frames = Some(frames);
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
            flow_entries: sum(counter::FLOW_ENTRIES)? + self.user_entries,
        })
    }

    /// Follows a flow direction in the kernel from user space (`--nat-hook conntrack`; the
    /// caller opened its gates first, see `conntrack::Gates`). Inserted only when new
    /// (`BPF_NOEXIST`), and counted with the kernel's inserts, so that evictions stay known.
    pub fn follow(&mut self, t: &Tuple) {
        /// `BPF_NOEXIST`.
        const NOEXIST: u64 = 1;
        if self.flows.insert(t, 1, NOEXIST).is_ok() {
            self.user_entries += 1;
        }
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
        walked.flatten().count() as u64
    }
}

/// `BPF_RINGBUF_BUSY_BIT`, `BPF_RINGBUF_DISCARD_BIT` and `BPF_RINGBUF_HDR_SZ`
/// (include/uapi/linux/bpf.h).
const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HDR_SZ: usize = 8;
/// Records read between two publications of the consumer position (the kernel's view of the
/// fill, which decides its wakeups, stays within this many records of the truth).
const PUBLISH_EVERY: usize = 128;
/// Most re-reads of a busy record's header before a batch ends at it.
const BUSY_SPINS: u32 = 1_000;

/// A BPF ring buffer's consumer, as aya's `RingBuf::next` is, but publishing the consumer
/// position once per batch instead of once per record: the kernel reads that position for
/// every reservation, so a store per record moved its cache line between the CPUs per event.
/// The layout (kernel/bpf/ringbuf.c): the consumer page (read-write) at offset 0, then the
/// producer page and the data pages mapped twice in a row (read-only), so that a record that
/// wraps around the end is contiguous.
struct RingReader {
    consumer: NonNull<libc::c_void>,
    producer: NonNull<libc::c_void>,
    page: usize,
    /// Bytes of data (a power of two).
    size: usize,
    /// Our position, published at the end of each [`Self::read`].
    pos: usize,
}

impl RingReader {
    fn new(fd: RawFd, size: usize) -> Result<Self, CollectError> {
        if !size.is_power_of_two() {
            return Err(CollectError::Mmap(std::io::Error::other(format!(
                "ring size {size} is not a power of two"
            ))));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| CollectError::Mmap(std::io::Error::last_os_error()))?;
        let map = |len: usize, prot: libc::c_int, offset: usize| {
            // SAFETY: a new shared mapping of the map's fd; the kernel checks the offsets
            // and lengths against the ring buffer's layout.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    fd,
                    libc::off_t::try_from(offset).unwrap_or(libc::off_t::MAX),
                )
            };
            if p == libc::MAP_FAILED {
                return Err(CollectError::Mmap(std::io::Error::last_os_error()));
            }
            NonNull::new(p).ok_or_else(|| CollectError::Mmap(std::io::Error::last_os_error()))
        };
        let consumer = map(page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = match map(page + 2 * size, libc::PROT_READ, page) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: unmaps the page mapped just above, used by nothing else.
                unsafe { libc::munmap(consumer.as_ptr(), page) };
                return Err(e);
            }
        };
        let mut me = Self {
            consumer,
            producer,
            page,
            size,
            pos: 0,
        };
        me.pos = me.consumer_pos().load(Ordering::Acquire);
        Ok(me)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page is mapped for as long as `self`, page-aligned, and the
        // kernel keeps an unsigned long there (`consumer_pos`), only ever read or written
        // atomically.
        unsafe { self.consumer.cast::<AtomicUsize>().as_ref() }
    }

    fn producer_pos(&self) -> usize {
        // SAFETY: as `consumer_pos`, for the producer page's `producer_pos`. Acquire pairs
        // with the kernel's release store: the headers before it are visible.
        unsafe { self.producer.cast::<AtomicUsize>().as_ref() }.load(Ordering::Acquire)
    }

    /// Hands committed ring records to `f`, in order, until the records `f` says it handed on
    /// (a batch holds several) reach `max`, then publishes the new consumer position (once).
    /// Stops early at a record still being written (busy).
    fn read(&mut self, max: usize, mut f: impl FnMut(&[u8]) -> usize) {
        let mask = self.size - 1;
        // SAFETY: the data pages start one page into the producer mapping.
        let data = unsafe { self.producer.cast::<u8>().as_ptr().add(self.page) };
        let start = self.pos;
        let mut produced = self.producer_pos();
        let (mut handed, mut read) = (0, 0usize);
        while handed < max {
            if self.pos == produced {
                produced = self.producer_pos();
                if self.pos == produced {
                    break;
                }
            }
            let offset = self.pos & mask;
            // SAFETY: `offset` < size, and a header is 8-byte aligned inside the first copy
            // of the data pages; the kernel writes it atomically (xchg on commit). Acquire
            // pairs with that commit: the record's bytes are visible once it is not busy.
            #[expect(
                clippy::cast_ptr_alignment,
                reason = "a record header is 8-byte aligned in the page-aligned data pages (see SAFETY)"
            )]
            let header_at = unsafe { &*data.add(offset).cast::<AtomicU32>() };
            let mut header = header_at.load(Ordering::Acquire);
            // A record reserved and not yet committed (another CPU is filling it, well under a
            // microsecond): wait for it a little rather than end the batch with the ring
            // holding more behind it.
            let mut tries = 0;
            while header & BUSY_BIT != 0 && tries < BUSY_SPINS {
                std::hint::spin_loop();
                tries += 1;
                header = header_at.load(Ordering::Acquire);
            }
            if header & BUSY_BIT != 0 {
                break;
            }
            let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
            if len > self.size - HDR_SZ {
                // Never written by the kernel: stop rather than read past the mapping.
                break;
            }
            if header & DISCARD_BIT == 0 {
                // SAFETY: the record lies within the two copies of the data pages (offset <
                // size, HDR_SZ + len <= size), committed and not reused by the kernel before
                // the consumer position passes it, which happens after `f` returns.
                let record = unsafe { std::slice::from_raw_parts(data.add(offset + HDR_SZ), len) };
                handed += f(record);
            }
            self.pos += (HDR_SZ + len).next_multiple_of(8);
            read += 1;
            if read % PUBLISH_EVERY == 0 {
                self.consumer_pos().store(self.pos, Ordering::Release);
            }
        }
        if self.pos != start {
            // The kernel pairs this with an acquire load before reusing the space.
            self.consumer_pos().store(self.pos, Ordering::Release);
        }
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // SAFETY: both mappings were made in `new` with these lengths and are used by nothing
        // else once `self` goes.
        unsafe {
            libc::munmap(self.consumer.as_ptr(), self.page);
            libc::munmap(self.producer.as_ptr(), self.page + 2 * self.size);
        }
    }
}

#[cfg(test)]
mod ring_tests;

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
