//! The admin view of an xDS channel's client, like CSDS's `ClientConfig` (gRFC A40's client status
//! discovery, without the service): [`Channel::xds_resources`] lists every resource the channel's xDS
//! client subscribes to, by type then name, with its status (requested, does not exist, ACKed, NACKed),
//! the version and time of the value in use, and the last rejected update with its error. The data comes
//! from grpc-xds's [`XdsClient::dump`](grpc_xds::XdsClient::dump), read under its lock at once.
//!
//! Not here: the resources' values (CSDS's `xds_config`), the CSDS gRPC service itself.

use std::time::SystemTime;

use grpc_xds::resource::ResourceType;
use grpc_xds::{ResourceDump, ResourceStatus};

use std::sync::Arc;

use super::ads::AdsClient;
use crate::channel::Channel;

/// An xDS client's resources, from [`Channel::xds_resources`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdsResources {
    /// The URI of the management server resources come from now: the bootstrap's first, or the server
    /// A71 fell back to.
    pub server_uri: String,
    /// Every resource the client subscribes to, ordered by type (Listener, RouteConfiguration, Cluster,
    /// ClusterLoadAssignment) then name. The client is shared by every channel of the process with the
    /// same servers and node, so this lists their resources too; they are the server in use's.
    pub resources: Vec<XdsResource>,
}

impl XdsResources {
    /// The resource of this type and name, if subscribed.
    pub fn get(&self, resource_type: XdsResourceType, name: &str) -> Option<&XdsResource> {
        self.resources
            .iter()
            .find(|r| r.resource_type == resource_type && r.name == name)
    }

    /// The resources of one type, by name.
    pub fn of_type(&self, resource_type: XdsResourceType) -> impl Iterator<Item = &XdsResource> {
        self.resources
            .iter()
            .filter(move |r| r.resource_type == resource_type)
    }
}

/// One resource in [`XdsResources`] (CSDS's `GenericXdsConfig`, without the value).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdsResource {
    /// Its type.
    pub resource_type: XdsResourceType,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub status: XdsResourceStatus,
    /// The version of the management server's response that brought the value in use (`version_info`);
    /// `None` while no value is in use.
    pub version: Option<String>,
    /// When that response arrived (wall clock, from the monotonic time since then).
    pub last_updated: Option<SystemTime>,
    /// The last update the client rejected since the value in use (or since it subscribed): set while
    /// the status is [`XdsResourceStatus::Nacked`], and when a rejection made the resource not exist
    /// (the `fail_on_data_errors` server feature).
    pub error: Option<XdsUpdateError>,
}

/// A resource's status (CSDS's `ClientResourceStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum XdsResourceStatus {
    /// Requested; nothing received yet.
    Requested,
    /// Known not to exist: not sent within 15 s of the request (gRFC A57), or deleted.
    DoesNotExist,
    /// Received and accepted.
    Acked,
    /// The last update was rejected ([`XdsResource::error`]); a value accepted before, if any, stays in
    /// use ([`XdsResource::version`]).
    Nacked,
}

/// A rejected update of a resource (CSDS's `UpdateFailureState`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdsUpdateError {
    /// The version of the response that carried it.
    pub version: String,
    /// Why the client rejected it (what its NACK said of this resource).
    pub details: String,
    /// When the response arrived (wall clock, as [`XdsResource::last_updated`]).
    pub at: SystemTime,
}

/// The xDS resource types a gRPC client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum XdsResourceType {
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    RouteConfiguration,
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    ClusterLoadAssignment,
}

impl XdsResourceType {
    /// The type URL (`type.googleapis.com/envoy.config.listener.v3.Listener`, ...).
    pub fn type_url(self) -> &'static str {
        self.internal().type_url()
    }

    fn internal(self) -> ResourceType {
        match self {
            XdsResourceType::Listener => ResourceType::Listener,
            XdsResourceType::RouteConfiguration => ResourceType::RouteConfiguration,
            XdsResourceType::Cluster => ResourceType::Cluster,
            XdsResourceType::ClusterLoadAssignment => ResourceType::ClusterLoadAssignment,
        }
    }

    fn of(resource_type: ResourceType) -> XdsResourceType {
        match resource_type {
            ResourceType::Listener => XdsResourceType::Listener,
            ResourceType::RouteConfiguration => XdsResourceType::RouteConfiguration,
            ResourceType::Cluster => XdsResourceType::Cluster,
            ResourceType::ClusterLoadAssignment => XdsResourceType::ClusterLoadAssignment,
        }
    }
}

impl Channel {
    /// For an `xds:` channel (feature `xds`), its xDS client's resources: each Listener,
    /// RouteConfiguration, Cluster and ClusterLoadAssignment subscribed to, with its status, version,
    /// last update time and last rejection (a CSDS-like view). `None` for other channels, for an
    /// xDS channel that has not started resolving yet (it does with its first call or
    /// [`Channel::connect`]), and for a closed one (its watches are gone).
    pub fn xds_resources(&self) -> Option<XdsResources> {
        let (server_uri, dump) = self.inner.resolution.with_external(|task| {
            let ads = task.downcast_ref::<Arc<AdsClient>>()?;
            Some((ads.server_uri(), ads.dump()))
        })?;
        // The client's times are on tokio's clock (paused in tests): each becomes "now minus its age".
        let (now, wall) = (tokio::time::Instant::now().into_std(), SystemTime::now());
        let wall_time = |at: std::time::Instant| {
            let age = now.saturating_duration_since(at);
            wall.checked_sub(age).unwrap_or(wall)
        };
        let resources = dump
            .into_iter()
            .map(|d: ResourceDump| XdsResource {
                resource_type: XdsResourceType::of(d.resource_type),
                name: d.name,
                status: match d.status {
                    ResourceStatus::Requested => XdsResourceStatus::Requested,
                    ResourceStatus::DoesNotExist => XdsResourceStatus::DoesNotExist,
                    ResourceStatus::Acked => XdsResourceStatus::Acked,
                    ResourceStatus::Nacked => XdsResourceStatus::Nacked,
                },
                version: d.version,
                last_updated: d.last_updated.map(wall_time),
                error: d.rejection.map(|r| XdsUpdateError {
                    version: r.version,
                    details: r.reason,
                    at: wall_time(r.at),
                }),
            })
            .collect();
        Some(XdsResources {
            server_uri,
            resources,
        })
    }
}
