//! The resolver of the resolver's own channel when it talks to several etcd members
//! ([`EtcdResolverBuilder::with_endpoints`](crate::EtcdResolverBuilder::with_endpoints)): a fixed list of
//! `host:port`, IP literals as they are and host names resolved by the system resolver, one endpoint per
//! member, published once and again on each `resolve_now` (a member's connection failed). It is registered
//! on that channel only, under a scheme of its own, through grpc-channel's public resolver API like any
//! user's resolver.
//!
//! Not here: the etcd naming resolver itself (`resolver.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use grpc_channel::resolver::{
    Address, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
    ResolverUpdate,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The scheme of the members' resolver, on the resolver's own channel only.
pub(crate) const SCHEME: &str = "etcd-members";

/// Builds the members' resolver.
#[derive(Clone, Debug)]
pub(crate) struct Members {
    endpoints: Arc<[String]>,
}

impl Members {
    /// The resolver of these `host:port` members.
    pub(crate) fn new(endpoints: Vec<String>) -> Members {
        Members {
            endpoints: endpoints.into(),
        }
    }
}

impl ResolverBuilder for Members {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let mut members = Vec::new();
        for endpoint in self.endpoints.iter() {
            let member = parse(endpoint).ok_or_else(|| ResolverError::InvalidTarget {
                target: target.as_str().to_owned(),
                reason: format!("etcd endpoint {endpoint:?} is not host:port"),
            })?;
            members.push(member);
        }
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(run(members, sink, wake.clone()));
        Ok(Box::new(MembersResolver { task, wake }))
    }
}

/// A member: an IP literal or a host name, with a port.
#[derive(Clone, Debug)]
enum Member {
    Socket(SocketAddr),
    Name(String, u16),
}

fn parse(endpoint: &str) -> Option<Member> {
    if let Ok(addr) = endpoint.parse::<SocketAddr>() {
        return Some(Member::Socket(addr));
    }
    let (host, port) = endpoint.rsplit_once(':')?;
    let port = port.parse().ok()?;
    (!host.is_empty() && !host.contains(':')).then(|| Member::Name(host.to_owned(), port))
}

struct MembersResolver {
    task: JoinHandle<()>,
    wake: Arc<Notify>,
}

impl Resolver for MembersResolver {
    fn resolve_now(&mut self) {
        self.wake.notify_one();
    }
}

impl Drop for MembersResolver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(members: Vec<Member>, sink: ResolverSink, wake: Arc<Notify>) {
    loop {
        let mut endpoints: Vec<Endpoint> = Vec::new();
        let mut failures = Vec::new();
        for member in &members {
            match member {
                Member::Socket(addr) => endpoints.push(Endpoint::new(Address::Tcp(*addr))),
                Member::Name(host, port) => {
                    match tokio::net::lookup_host((host.as_str(), *port)).await {
                        Ok(addrs) => {
                            if let Some(endpoint) =
                                Endpoint::from_addresses(addrs.map(Address::Tcp))
                            {
                                endpoints.push(endpoint);
                            }
                        }
                        Err(error) => failures.push(format!("{host}: {error}")),
                    }
                }
            }
        }
        if endpoints.is_empty() {
            sink.report_error(format!("no etcd member resolved: {}", failures.join("; ")));
        } else if sink.update(ResolverUpdate::new(endpoints)).is_err() && sink.is_closed() {
            return;
        }
        tokio::select! {
            () = wake.notified() => {}
            () = sink.closed() => return,
        }
    }
}
