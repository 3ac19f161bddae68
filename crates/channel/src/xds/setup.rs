//! What `ChannelBuilder::build` makes for an `xds:` target: the bootstrap (the application's JSON, else
//! the environment's, gRFC A27) and the xDS resolver's builder, with xDS credentials (A29) over the
//! bootstrap's certificate providers when the application opted in, registering the clusters' transports
//! into the channel's registry.
//!
//! Not here: the builder's options themselves (`builder.rs`), the resolver (`resolver.rs`).

use std::sync::Arc;

use grpc_service_config::{ResolverOptions, ServiceConfig};

use super::credentials::XdsCredentials;
use super::resolver::XdsResolverBuilder;
use crate::conn::error::BuildError;
use crate::control::resolver::Kind;
use crate::control::resolver_api::SharedBuilder;
use crate::control::resolver_state::Inspect;
use crate::control::transports::Transports;

/// The builder's part of an `xds:` channel.
pub(crate) struct XdsSetup<'a> {
    /// `ChannelBuilder::xds_bootstrap`, if given.
    pub(crate) bootstrap_json: Option<&'a str>,
    /// The target's name (`xds:///name`).
    pub(crate) name: &'a str,
    /// The channel's `:authority` override.
    pub(crate) authority: Option<String>,
    /// The channel's default service config.
    pub(crate) default_config: Option<ServiceConfig>,
    /// The channel's DNS options (LOGICAL_DNS clusters).
    pub(crate) dns_options: ResolverOptions,
    /// What `Channel::xds_resources` reads.
    pub(crate) inspect: Inspect,
    /// The channel's registry of transports, when it uses xDS credentials.
    pub(crate) credentials: Option<Transports>,
}

impl XdsSetup<'_> {
    /// The resolver's builder and kind, or why the bootstrap is unusable.
    pub(crate) fn resolver(self) -> Result<(SharedBuilder, Kind), BuildError> {
        let parsed = match self.bootstrap_json {
            Some(json) => grpc_xds::Bootstrap::parse(json),
            None => grpc_xds::Bootstrap::from_env(
                |v| std::env::var(v).ok(),
                |path| std::fs::read_to_string(path),
            ),
        };
        let bootstrap = parsed.map_err(|e| BuildError::InvalidOption {
            option: "xds bootstrap",
            reason: e.to_string(),
        })?;
        let credentials = self.credentials.map(|transports| {
            XdsCredentials::new(bootstrap.certificate_providers.clone(), transports)
        });
        let builder = SharedBuilder(Arc::new(XdsResolverBuilder {
            bootstrap,
            name: self.name.to_owned(),
            authority: self.authority,
            default_config: self.default_config,
            dns_options: self.dns_options,
            inspect: self.inspect,
            credentials,
        }));
        Ok((builder, Kind::Plain))
    }
}
