//! Execution IDs and lease tokens: process-wide monotonic ULIDs (contract §1.2), so IDs made in
//! one millisecond still sort in creation order.

use std::sync::Mutex;

static GENERATOR: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());

/// A new ULID string (26 characters, Crockford base32), greater than every earlier one from
/// this process.
pub fn new_ulid() -> String {
    let mut generator = GENERATOR.lock().unwrap_or_else(|p| p.into_inner());
    // The generator only fails when 2^80 IDs were made in one millisecond.
    generator.generate().unwrap_or_else(|_| ulid::Ulid::new()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_are_monotonic_and_26_chars() {
        let ids: Vec<String> = (0..1000).map(|_| new_ulid()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|id| id.len() == 26));
    }
}
