//! A set of task keys hashed by the identity of their shared allocation, not their text: the
//! running index is touched by every claim and ack, and its keys are always the entries' own
//! `Arc`s, so hashing a pointer (never caller-controlled) replaces hashing a 26-byte ID.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

/// A task key compared and hashed by allocation, for keys cloned from [`crate::state::Entry::key`].
#[derive(Debug, Clone)]
pub(crate) struct ByPtr(pub(crate) Arc<str>);

impl PartialEq for ByPtr {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ByPtr {}

impl Hash for ByPtr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(Arc::as_ptr(&self.0).cast::<u8>().addr());
    }
}

/// Mixes one machine word into a well-spread hash (the finaliser of MurmurHash3).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 ^= u64::try_from(n).unwrap_or(u64::MAX);
    }
}

/// A set of task keys by allocation identity.
pub(crate) type PtrSet = HashSet<ByPtr, BuildHasherDefault<MixHasher>>;
