//! Maps keyed by cgroup id, hashed with one multiply instead of SipHash.
//!
//! A sample looks up every cgroup's id several times (what is known of it,
//! its index, its ranked value): at 10,000 cgroups that is tens of
//! thousands of lookups, where SipHash's cost shows. The ids come from the
//! kernel (kernfs node ids, unique), not from input an attacker chooses.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::hash::Hasher;

pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing: an odd multiplier is a bijection on the low bits
/// (the bucket) and spreads them into the high bits (hashbrown's tag), so
/// sequential ids neither collide nor share tags.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(K);
    }

    /// Only u64 keys are hashed here; any other key still hashes, bytewise.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod test {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets_and_tags() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (1000..1256u64).map(|id| b.hash_one(id)).collect();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 255).collect();
        assert_eq!(buckets.len(), 256, "256 ids, 256 buckets: no collision");
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(tags.len() > 64, "high bits vary: {} tags", tags.len());
    }

    #[test]
    fn map_works_as_a_map() {
        let mut m = IdMap::default();
        for id in 0..10_000u64 {
            m.insert(id * 7, id);
        }
        assert!((0..10_000u64).all(|id| m[&(id * 7)] == id));
        assert_eq!(m.get(&1), None);
    }
}
