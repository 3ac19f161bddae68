//! The cluster manager's view of xDS clusters (`grpc_lb::ClusterConfig`), built from CDS, EDS and DNS
//! answers: an EDS cluster's priorities of weighted localities (with its drops and circuit breaker), a
//! LOGICAL_DNS cluster's one priority (A37), an aggregate cluster delegating to its leaves in order
//! (A37, A75), a cluster whose calls fail, and the names localities are keyed by. Pure functions; the resolver
//! (`resolver.rs`) decides which to build.
//!
//! Not here: watching the resources, walking an aggregate's graph (`aggregate.rs`).

use std::collections::BTreeSet;

use grpc_lb::{
    Address, ClusterConfig, ClusterLbConfig, DropOverload, LocalityConfig, PriorityConfig,
};
use grpc_xds::resource::{ClusterLb, Endpoints, LocalityId};

/// A LOGICAL_DNS cluster (A37): one priority of one locality with no name parts, the addresses DNS gave
/// one endpoint (A61; `ClusterConfig::single_endpoint`: the calls stay on one READY address). No
/// address (DNS failed before its first answer): a priority with no endpoints, whose calls fail (or
/// fail over, in an aggregate).
pub(super) fn dns_cluster_config(
    addresses: &[std::net::SocketAddr],
    max_requests: u32,
    lb: ClusterLbConfig,
) -> ClusterConfig {
    let mut seen = BTreeSet::new();
    let addresses: Vec<Address> = addresses
        .iter()
        .filter(|a| seen.insert(**a))
        .map(|a| Address::Tcp(*a))
        .collect();
    let mut config = ClusterConfig::new(vec![PriorityConfig {
        localities: vec![LocalityConfig {
            name: locality_name(&LocalityId::default()),
            weight: std::num::NonZeroU32::MIN,
            endpoint_weights: vec![1; addresses.len()],
            addresses,
        }],
    }]);
    config.max_requests = max_requests;
    config.lb = lb;
    config.single_endpoint = true;
    config
}

/// An aggregate cluster (A37) over its leaves (name and config), in priority order: a cluster that
/// delegates each call to its first leaf that can take it (A75: each leaf keeps its own policy, circuit
/// breaker, drops, outlier detection and transport; the resolver publishes the leaves as clusters of
/// their own). A leaf that cannot take calls (its endpoints do not exist, an unsupported policy) is
/// skipped; none usable fails the calls, saying why.
pub(super) fn aggregate_config(name: &str, leaves: &[(String, ClusterConfig)]) -> ClusterConfig {
    if leaves.iter().all(|(_, p)| p.failure.is_some()) {
        let why = leaves
            .iter()
            .filter_map(|(_, p)| p.failure.as_deref())
            .next()
            .unwrap_or("no leaf cluster");
        return failing_cluster(&format!(
            "xDS aggregate cluster {name:?}: no leaf cluster can take calls ({why})"
        ));
    }
    ClusterConfig::aggregate(leaves.iter().map(|(leaf, _)| leaf.clone()).collect())
}

/// A cluster whose calls fail with `message`.
pub(super) fn failing_cluster(message: &str) -> ClusterConfig {
    let mut config = ClusterConfig::new(Vec::new());
    config.failure = Some(message.to_owned());
    config
}

/// The cluster manager's policy for a cluster's `lb_policy`, if it has one.
pub(super) fn lb_config(lb: &ClusterLb) -> Option<ClusterLbConfig> {
    match lb {
        ClusterLb::RoundRobin => Some(ClusterLbConfig::RoundRobin),
        ClusterLb::RingHash {
            min_ring_size,
            max_ring_size,
        } => Some(ClusterLbConfig::RingHash {
            min_ring_size: *min_ring_size,
            max_ring_size: *max_ring_size,
        }),
        _ => None,
    }
}

/// The cluster manager's view of an EDS cluster: its priorities of weighted localities, each endpoint by
/// its first address with its weight, under the cluster's policy.
pub(super) fn cluster_config(
    endpoints: &Endpoints,
    max_requests: u32,
    lb: ClusterLbConfig,
) -> ClusterConfig {
    let priorities = endpoints
        .priorities
        .iter()
        .map(|p| PriorityConfig {
            localities: p
                .localities
                .iter()
                .map(|l| LocalityConfig {
                    name: locality_name(&l.locality),
                    weight: l.weight,
                    addresses: l
                        .endpoints
                        .iter()
                        .filter_map(|e| e.addresses.first().cloned())
                        .collect(),
                    endpoint_weights: l
                        .endpoints
                        .iter()
                        .filter(|e| !e.addresses.is_empty())
                        .map(|e| e.weight.get())
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let mut config = ClusterConfig::new(priorities);
    config.max_requests = max_requests;
    config.lb = lb;
    config.drop_overloads = endpoints
        .drop_overloads
        .iter()
        .map(|d| DropOverload {
            category: d.category.clone(),
            per_million: d.per_million,
        })
        .collect();
    config
}

/// The name the cluster manager keys a locality by: a JSON object of its three parts (like grpc-go's
/// locality string, though with empty parts kept), each a JSON string, so that distinct localities never
/// share a name (`region/zone/sub_zone` did: `("a/", "b")` and `("a", "/b")`).
fn locality_name(locality: &LocalityId) -> String {
    fn quoted(out: &mut String, part: &str) {
        out.push('"');
        for c in part.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    let mut name = String::from("{\"region\":");
    quoted(&mut name, &locality.region);
    name.push_str(",\"zone\":");
    quoted(&mut name, &locality.zone);
    name.push_str(",\"subZone\":");
    quoted(&mut name, &locality.sub_zone);
    name.push('}');
    name
}

#[cfg(test)]
mod locality_tests {
    use std::num::NonZeroU32;

    use grpc_xds::resource::{LocalityEndpoints, Priority};

    use super::*;

    fn locality(region: &str, zone: &str, sub_zone: &str) -> LocalityEndpoints {
        LocalityEndpoints {
            locality: LocalityId {
                region: region.to_owned(),
                zone: zone.to_owned(),
                sub_zone: sub_zone.to_owned(),
            },
            weight: NonZeroU32::MIN,
            endpoints: Vec::new(),
        }
    }

    /// The names the cluster manager keys localities by, for these localities of one priority.
    fn names(localities: Vec<LocalityEndpoints>) -> Vec<String> {
        let endpoints = Endpoints {
            cluster_name: "c".to_owned(),
            priorities: vec![Priority { localities }],
            drop_overloads: Vec::new(),
        };
        cluster_config(&endpoints, 1024, ClusterLbConfig::RoundRobin).priorities[0]
            .localities
            .iter()
            .map(|l| l.name.clone())
            .collect()
    }

    #[test]
    fn distinct_localities_get_distinct_names() {
        let pairs = [
            // A separator inside a part.
            (locality("a/", "b", ""), locality("a", "/b", "")),
            (locality("", "a/b", ""), locality("a", "b", "")),
            // The encoding's own quoting inside a part.
            (
                locality(r#"a","zone":"b"#, "c", ""),
                locality("a", r#"b","zone":"c"#, ""),
            ),
            (locality("a\\", "b", ""), locality("a", "\\b", "")),
        ];
        for (x, y) in pairs {
            let got = names(vec![x.clone(), y.clone()]);
            assert_ne!(got[0], got[1], "{:?} and {:?}", x.locality, y.locality);
            // Valid JSON that gives the parts back.
            let parsed: serde_json::Value = serde_json::from_str(&got[0]).expect("JSON");
            assert_eq!(parsed["region"], x.locality.region.as_str(), "{}", got[0]);
            assert_eq!(parsed["zone"], x.locality.zone.as_str(), "{}", got[0]);
        }
        let name = names(vec![locality("us-east1", "us-east1-b", "rack 7")]).remove(0);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&name).expect("JSON"),
            serde_json::json!({"region": "us-east1", "zone": "us-east1-b", "subZone": "rack 7"})
        );
    }
}

#[cfg(test)]
mod aggregate_config_tests {
    use std::net::SocketAddr;

    use super::*;

    fn dns(port: u16, lb: ClusterLbConfig) -> ClusterConfig {
        dns_cluster_config(
            &[
                SocketAddr::from(([127, 0, 0, 1], port)),
                SocketAddr::from(([127, 0, 0, 1], port)),
            ],
            7,
            lb,
        )
    }

    #[test]
    fn a_logical_dns_cluster_is_one_priority_of_one_locality() {
        let c = dns(1, ClusterLbConfig::RoundRobin);
        assert_eq!(c.priorities.len(), 1);
        assert_eq!(c.priorities[0].localities.len(), 1);
        // A repeated address is one endpoint.
        assert_eq!(c.priorities[0].localities[0].addresses.len(), 1);
        assert_eq!(c.max_requests, 7);
        // Its addresses are one endpoint (A61).
        assert!(c.single_endpoint);
        // No answer: one priority with no endpoints.
        let empty = dns_cluster_config(&[], 7, ClusterLbConfig::RoundRobin);
        assert!(empty.priorities[0].localities[0].addresses.is_empty());
    }

    #[test]
    fn an_aggregate_delegates_to_its_leaves_in_order() {
        let ring = ClusterLbConfig::RingHash {
            min_ring_size: 1,
            max_ring_size: 2,
        };
        let parts = vec![
            ("gone".to_owned(), failing_cluster("endpoints gone")),
            ("x".to_owned(), dns(1, ring)),
            ("y".to_owned(), dns(2, ClusterLbConfig::RoundRobin)),
        ];
        let c = aggregate_config("agg", &parts);
        assert_eq!(c.failure, None);
        assert_eq!(c.leaves, ["gone", "x", "y"]);
        assert!(c.priorities.is_empty());
        // Nothing usable: the calls fail, saying why.
        let c = aggregate_config(
            "agg",
            &[("gone".to_owned(), failing_cluster("endpoints gone"))],
        );
        assert!(
            c.failure
                .as_deref()
                .is_some_and(|f| f.contains("endpoints gone")),
            "{:?}",
            c.failure
        );
        assert!(aggregate_config("agg", &[]).failure.is_some());
    }
}
