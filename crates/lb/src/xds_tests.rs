//! xDS tests.
