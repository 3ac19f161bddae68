//! Errors found while building a channel (the application's mistakes, reported before any call) and while
//! connecting one eagerly ([`ChannelBuilder::connect`](crate::ChannelBuilder::connect)).

/// A channel could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// The proxy URI (from `ChannelBuilder::proxy` or a proxy environment variable) is not usable.
    #[error(transparent)]
    InvalidProxy(#[from] crate::conn::proxy::ProxyError),
}

/// An eager connection ([`ChannelBuilder::connect`](crate::ChannelBuilder::connect), a generated client's
/// `connect`) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The channel could not be built: the target or an option is wrong.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The channel was built but could not connect: every address failed, or name resolution did. The
    /// status (UNAVAILABLE) says why, and its source is the last connection error.
    #[error("cannot connect to {target}: {status}")]
    Unreachable {
        /// The target, as given.
        target: String,
        /// Why: the channel's TRANSIENT_FAILURE status.
        #[source]
        status: crate::Status,
    },
}
