//! In-memory taskgate broker (being written).
