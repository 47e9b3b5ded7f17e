//! What an open journey costs the join table, in bytes: the measure its byte limit
//! ([`super::Limits::max_bytes`]) is kept in, so that the table's memory is bounded whatever
//! the traffic, not only its count of journeys.
//!
//! The count is an upper bound of what the table's own structures hold for one journey, the
//! allocator's slack included: the journey's slot (twice: a key's list of slots grows by
//! doubling), its steps' room (what its list has reserved, not what it uses), its key's entry
//! in the map (three times: a map grows by doubling and is at most 7/8 full), its entry in the
//! eviction order (twice: entries of journeys that left are dropped once they are as many as
//! the open ones), and a header for each of its two allocations.

use super::{Correlator, Ending, JoinKey, Open, SPARE, STEPS, Step, finish};

/// The join table's default byte limit. A busy node keeps few journeys open at once (most
/// leave within microseconds); the journeys that wait out the idle time-out (delivered
/// locally, or cut by lost events) are what fills it. Kept so that pktrace's peak RSS stays
/// within 32 MiB under any traffic (BENCHMARKS.md "Memory").
pub const DEFAULT_BYTES: usize = 8 << 20;

/// Bytes an allocator keeps beside each allocation (glibc: 8 of header, rounded to 16).
const ALLOC_HEADER: usize = 16;

/// What one open journey whose step list has room for `step_room` steps costs the table.
#[must_use]
pub const fn journey_bytes(step_room: usize) -> usize {
    2 * size_of::<Open>()
        + step_room * size_of::<Step>()
        + 3 * (size_of::<(JoinKey, Vec<Open>)>() + 1)
        + 2 * size_of::<(u64, JoinKey)>()
        + 2 * ALLOC_HEADER
}

impl Correlator {
    /// Closes the oldest open journeys until one more fits in [`super::Limits`]; also drops the
    /// eviction order's entries of journeys that left, once they are as many as the open ones
    /// (so the order holds at most twice the open journeys plus [`SPARE`]).
    pub(super) fn make_room(&mut self) {
        while self.open_count >= self.limits.max_open
            || self.bytes + journey_bytes(STEPS) > self.limits.max_bytes
        {
            if !self.evict_oldest() {
                break;
            }
        }
        if self.order.len() > 2 * self.open_count + SPARE {
            self.compact_order();
        }
    }

    /// Keeps only the eviction order's entries of open journeys.
    pub(super) fn compact_order(&mut self) {
        let open = &self.open;
        self.order
            .retain(|(id, key)| open.get(key).is_some_and(|l| l.iter().any(|o| o.id == *id)));
    }

    /// Closes the oldest open journey early, as timed out, and counts it; false when none is
    /// open.
    fn evict_oldest(&mut self) -> bool {
        while let Some((id, key)) = self.order.pop_front() {
            if let Some(open) = self.remove(key, id) {
                self.evicted += 1;
                self.done.push(finish(Some(open), Ending::TimedOut));
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usual_journey_costs_about_a_kibibyte_and_the_default_holds_thousands() {
        let one = journey_bytes(STEPS);
        assert!((600..2048).contains(&one), "{one} bytes");
        let held = DEFAULT_BYTES / one;
        assert!(held >= 4096, "{held} journeys");
    }

    #[test]
    fn room_for_more_steps_costs_more() {
        assert_eq!(journey_bytes(12) - journey_bytes(6), 6 * size_of::<Step>());
    }
}
