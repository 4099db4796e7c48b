//! Fast hashing for the maps every claim and ack touches.
//!
//! - [`IdHasher`]: text keys (task IDs, queue names) hashed a word at a time with a folded
//!   multiply from a per-process random seed — several times cheaper than SipHash on a 26-byte
//!   ID, and still not predictable by a caller who picks IDs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// The finaliser of MurmurHash3: spreads every input bit over the whole word.
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The multiplier of [`IdHasher`]'s rounds (the fractional part of π, odd).
const ROUND: u64 = 0x243f_6a88_85a3_08d3;

/// The 64-bit halves of `a * b`, xored: a cheap, well-mixing round.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "intended: the low and the high half of the product"
    )]
    let (low, high) = (full as u64, (full >> 64) as u64);
    low ^ high
}

/// Hashes text keys a word at a time from a seed (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        fmix(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            h = folded_multiply(h ^ u64::from_le_bytes(w), ROUND);
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = folded_multiply(h ^ u64::from_le_bytes(w), ROUND);
        }
        // The length keeps "ab" + "c" apart from "a" + "bc" in composite keys.
        self.0 = h.rotate_left(29) ^ u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    }

    fn write_u8(&mut self, n: u8) {
        self.0 = folded_multiply(self.0 ^ u64::from(n), ROUND);
    }
}

/// Builds [`IdHasher`]s from one random seed per process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdBuild(u64);

impl Default for IdBuild {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        IdBuild(*SEED.get_or_init(|| RandomState::new().hash_one(0x5eed_u64) | 1))
    }
}

impl BuildHasher for IdBuild {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn id_hashes_agree_on_equal_text_and_spread_sequential_ids() {
        let build = IdBuild::default();
        let ids: Vec<String> = (0..10_000).map(|_| taskgate::id::new_ulid()).collect();
        let hashes: HashSet<u64> = ids.iter().map(|id| build.hash_one(id.as_str())).collect();
        assert_eq!(hashes.len(), ids.len());
        let key: Arc<str> = Arc::from(ids[0].as_str());
        assert_eq!(build.hash_one(&key), build.hash_one(ids[0].as_str()));
        assert_eq!(IdBuild::default().hash_one("queue"), build.hash_one("queue"));
        // Monotonic IDs differ only in their last characters: the low bits still spread.
        let buckets: HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
        assert!(buckets.len() > 1000, "{} of 1024 buckets used", buckets.len());
    }
}
