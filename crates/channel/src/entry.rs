//! The entry points: [`Channel::builder`] and [`Channel::new`], kept apart from the builder's options so that
//! `channel.rs` (the channel) and `builder.rs` (its options and `build`) do not use each other.

use crate::builder::ChannelBuilder;
use crate::channel::Channel;
use crate::conn::error::BuildError;

impl Channel {
    /// A builder for a channel to `target` (`host:port`, `dns:///host:port`, `ipv4:...`, `ipv6:...`,
    /// `unix:path`, `unix-abstract:name`, `http://host:port`, `https://host:port`; see [`Target`](crate::Target)), or `scheme://authority/endpoint`
    /// (also `scheme:endpoint`) of a resolver registered for `scheme` ([`ChannelBuilder::resolver`],
    /// [`crate::resolver::register`]), looked up by `build()`.
    #[doc(alias("Endpoint", "from_static", "from_shared", "balance_list"))]
    pub fn builder(target: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder::new(target.into())
    }

    /// A channel to `target` with default options. Lazy: it connects on the first call (tonic's
    /// `Endpoint::connect_lazy`).
    #[doc(alias = "connect_lazy")]
    pub fn new(target: impl Into<String>) -> Result<Channel, BuildError> {
        Channel::builder(target).build()
    }
}
