//! The explainer's answers, cached per connection in two generations of at most [`GENERATION`]
//! answers each: a new answer is of the young generation; when the young one is full, the old
//! one is forgotten and the young one becomes old; an answer of the old generation that is
//! used again becomes young. A connection still sending keeps its answer, and the cache never
//! holds more than `2 × GENERATION` answers, in one table that keeps its room (no allocation
//! once warm; a hit is one lookup).
//!
//! A cache bounded only by a large count (4,096, emptied at once when full) grew for as long
//! as new connections came: one entry per connection and direction, about 0.5 KiB each with
//! the table's room, so a node making a few connections a second saw pktrace's memory climb
//! for tens of minutes (BENCHMARKS.md, "Memory over an hour").

use std::{collections::HashMap, hash::Hash};

use foldhash::fast::RandomState;

/// Most answers in one generation.
pub const GENERATION: usize = 256;

/// Answers `V` by key `K`, each with the generation it was last used in.
#[derive(Debug)]
pub struct Cache<K, V> {
    map: HashMap<K, (V, u64), RandomState>,
    /// The young generation's number, and how many answers are of it.
    current: u64,
    young: usize,
    limit: usize,
}

impl<K: Hash + Eq, V> Default for Cache<K, V> {
    fn default() -> Self {
        Self::with_generation(GENERATION)
    }
}

impl<K: Hash + Eq, V> Cache<K, V> {
    /// An empty cache of generations of `limit` answers (at least one).
    #[must_use]
    pub fn with_generation(limit: usize) -> Self {
        Self {
            map: HashMap::default(),
            current: 0,
            young: 0,
            limit: limit.max(1),
        }
    }

    /// The answer for `key`, young again if it was old.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        let (value, generation) = self.map.get_mut(key)?;
        if *generation != self.current {
            *generation = self.current;
            self.young += 1;
        }
        Some(value)
    }

    /// Caches `value` for `key` as young, ageing the generations first when the young one is
    /// full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.young >= self.limit {
            let young = self.current;
            self.map.retain(|_, (_, g)| *g == young);
            self.current += 1;
            self.young = 0;
        }
        if self.map.insert(key, (value, self.current)).is_none() {
            self.young += 1;
        }
    }

    /// Forgets every answer.
    pub fn clear(&mut self) {
        self.map.clear();
        self.young = 0;
    }

    /// Answers held.
    #[cfg(test)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_than_two_generations() {
        let mut c = Cache::with_generation(4);
        for k in 0..100u32 {
            c.insert(k, k * 10);
            assert!(c.len() <= 8, "{} after {k}", c.len());
        }
        assert_eq!(c.get(&99), Some(&990));
        assert_eq!(c.get(&95), Some(&950), "the old generation still answers");
        assert_eq!(c.get(&0), None, "older answers are gone");
    }

    #[test]
    fn an_answer_in_use_survives_any_number_of_new_ones() {
        let mut c = Cache::with_generation(4);
        c.insert(u32::MAX, 1);
        for k in 0..1_000u32 {
            c.insert(k, 0);
            assert_eq!(c.get(&u32::MAX), Some(&1), "lost after {k}");
        }
        c.clear();
        assert_eq!((c.len(), c.get(&u32::MAX)), (0, None));
    }
}
