//! Errors found while building a channel: they are the application's mistakes, reported before any call.

/// A channel could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The target string is not a target this crate understands.
    #[error("invalid target {target:?}: {reason}")]
    InvalidTarget {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An option has a value outside its range.
    #[error("invalid channel option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}
