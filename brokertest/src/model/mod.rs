//! Model-based tests (extensions §E12): a pure reference model of the contract and the
//! property tests that check a backend against it (being written).
