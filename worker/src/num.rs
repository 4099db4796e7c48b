//! Counts from measured rates: the rate bucket's whole tokens and the claim-ahead target are
//! both a float rounded down to a count.

/// `x` rounded down to a count: negative is 0, and a value beyond `usize` saturates.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a count: floored, clamped at 0, and `as` saturates at usize::MAX"
)]
pub(crate) fn whole(x: f64) -> usize {
    x.floor().max(0.0) as usize
}

#[cfg(test)]
mod tests {
    use super::whole;

    #[test]
    fn a_count_is_floored_clamped_and_saturating() {
        assert_eq!((whole(2.9), whole(0.0), whole(-3.5)), (2, 0, 0));
        assert_eq!(whole(f64::INFINITY), usize::MAX);
    }
}
