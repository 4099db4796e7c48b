//! Execution IDs and lease tokens: process-wide monotonic ULIDs (contract §1.2), so IDs made in
//! one millisecond still sort in creation order.

use std::sync::Mutex;

static GENERATOR: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());

/// The next ULID of the process-wide generator; the lock is held only to draw it.
fn next() -> ulid::Ulid {
    let mut generator = GENERATOR.lock().unwrap_or_else(|p| p.into_inner());
    // The generator only fails when 2^80 IDs were made in one millisecond.
    generator.generate().unwrap_or_else(|_| ulid::Ulid::new())
}

/// A new ULID string (26 characters, Crockford base32), greater than every earlier one from
/// this process.
pub fn new_ulid() -> String {
    let mut out = String::with_capacity(ulid::ULID_LEN);
    write_ulid(&mut out);
    out
}

/// Replaces the contents of `out` with a new ULID, as [`new_ulid`] makes it (same monotonic
/// sequence), reusing `out`'s buffer: no allocation when it already holds 26 bytes.
pub fn write_ulid(out: &mut String) {
    let mut buf = [0u8; ulid::ULID_LEN];
    let text = next().array_to_str(&mut buf);
    out.clear();
    out.push_str(text);
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

    #[test]
    fn write_ulid_continues_the_sequence_in_place() {
        let first = new_ulid();
        let mut reused = String::from("an old lease token, longer than 26 bytes");
        write_ulid(&mut reused);
        assert_eq!(reused.len(), 26);
        assert!(first < reused);
        assert!(reused < new_ulid());
        assert!(ulid::Ulid::from_string(&reused).is_ok());
    }
}
