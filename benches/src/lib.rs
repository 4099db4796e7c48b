//! taskgate benchmarks (being written).
