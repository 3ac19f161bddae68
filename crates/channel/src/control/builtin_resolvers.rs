//! The built-in resolvers as [`ResolverBuilder`]s of the public API: fixed lists (`ipv4:`, `ipv6:`,
//! `unix:`) publish their endpoints once; `dns:` runs grpc-service-config's [`ResolverTask`] (hickory),
//! whose each resolution goes through the sink (A21 on its TXT config, [`ResolverSink::publish`]), and
//! whose verdict (accepted or not) drives its backoff. A DNS name reached through an HTTP CONNECT proxy
//! (gRFC A1) has its name as its one endpoint (`Address::Name`), which the proxy resolves; the resolver then
//! only looks up the service config, if TXT lookups are on. The channel builds these per channel, with its
//! options, after the registered builders (which may override a built-in scheme).
//!
//! Not here: `xds:` (in `xds/resolver.rs`, above this layer), the resolution life cycle (`resolver.rs`).

use std::net::SocketAddr;

use grpc_base::{Address, Endpoint};
use grpc_retry::SplitMix64;
use grpc_service_config::{Accept, DnsResolver, ResolverHandle, ResolverOptions, ResolverTask};

use crate::control::resolver_api::{
    Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget, ResolverUpdate,
};
use crate::wire::status::{Code, Status};

/// A resolver with nothing to do after it published (a fixed list).
struct Done;

impl Resolver for Done {}

/// `ipv4:`, `ipv6:`, `unix:`: endpoints known from the target itself.
pub(crate) struct FixedResolverBuilder {
    pub(crate) scheme: &'static str,
    pub(crate) endpoints: Vec<Endpoint>,
}

impl ResolverBuilder for FixedResolverBuilder {
    fn scheme(&self) -> &str {
        self.scheme
    }

    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        sink.update(ResolverUpdate::new(self.endpoints.clone()))
            .map_err(|e| ResolverError::InvalidTarget {
                target: target.as_str().to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Box::new(Done))
    }
}

/// `dns:` (and `host:port`, `http://`, `https://`).
pub(crate) struct DnsResolverBuilder {
    pub(crate) server: Option<SocketAddr>,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) options: ResolverOptions,
    /// The name goes to a proxy unresolved: the only endpoint is the name (gRFC A1).
    pub(crate) by_name: bool,
}

/// A running DNS resolver: its task ends once the handle is dropped (after a query in flight).
struct RunningDns(ResolverHandle);

impl Resolver for RunningDns {
    fn resolve_now(&mut self) {
        // The resolver's schedule rate-limits it (the minimum interval since the last success).
        self.0.resolve_now();
    }
}

impl ResolverBuilder for DnsResolverBuilder {
    fn scheme(&self) -> &str {
        "dns"
    }

    fn build(
        &self,
        _target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let name = self.by_name.then(|| {
            Endpoint::new(Address::Name {
                host: self.host.as_str().into(),
                port: self.port,
            })
        });
        // Through a proxy with no TXT lookup, nothing needs DNS: the name is the one endpoint.
        if let (Some(name), false) = (&name, self.options.txt_lookups) {
            let _ = sink.update(ResolverUpdate::new(vec![name.clone()]));
            return Ok(Box::new(Done));
        }
        let mut resolver =
            DnsResolver::new(&self.host, self.port, self.server, self.options.clone())
                .map_err(|e| ResolverError::Other(e.to_string()))?;
        if name.is_some() {
            resolver = resolver.without_address_lookups();
        }
        let seed = super::shared::clock_seed();
        // Runs in the resolver task after each resolution. A result the channel rejects (A21: a first
        // config that is invalid with no default) is retried with backoff until the record is fixed
        // (grpc-go: `UpdateState` returns `ErrBadResolverState`).
        let accept: Accept = Box::new(move |resolution: &grpc_service_config::Resolution| {
            let addrs = match &resolution.addresses {
                Ok(addrs) => addrs,
                Err(e) => {
                    // The name did not resolve, so its TXT answer ("no records" for a vanished name) says
                    // nothing about the config: A21's memory is left alone, and the channel keeps what it
                    // has (C-core returns both as errors when the addresses fail).
                    sink.report_status(
                        Status::new(Code::Unavailable, e.to_string()).with_source(e.clone()),
                    );
                    return false;
                }
            };
            let endpoints = match &name {
                Some(name) => vec![name.clone()],
                None => addrs
                    .iter()
                    .map(|a| Endpoint::new(Address::Tcp(*a)))
                    .collect(),
            };
            sink.publish(endpoints.into(), resolution.config.clone())
                .is_ok()
        });
        let handle = ResolverTask::spawn_with(resolver, Box::new(SplitMix64::new(seed)), accept);
        Ok(Box::new(RunningDns(handle)))
    }
}
