//! The ADS messages the client sends: an [`AdsState`](crate::AdsState) [`Request`] as an
//! `envoy.service.discovery.v3.DiscoveryRequest`, with the bootstrap's node (gRFC A27: `user_agent_name`,
//! `user_agent_version` and the `client_features` gRPC clients declare) on a stream's first request, and a
//! NACK's detail as a `google.rpc.Status` with INVALID_ARGUMENT.
//!
//! Not here: responses (the caller hands their resources to the decoders in [`crate::resource`]).

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use envoy_types::pb::google::rpc::Status;
use serde_json::{Map, Value as Json};

use crate::ads::Request;
use crate::bootstrap::Node;

/// The client features a gRPC xDS client declares (A27): it ignores EDS's overprovisioning factor, and it
/// takes state-of-the-world resources in the `Resource` wrapper.
pub const CLIENT_FEATURES: [&str; 2] = [
    "envoy.lb.does_not_support_overprovisioning",
    "xds.config.resource-in-sotw",
];

/// The `google.rpc.Code` of a NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// Who the client is: `user_agent_name` and `user_agent_version` of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserAgent {
    /// e.g. `grpc-rust-channel`.
    pub name: String,
    /// e.g. the crate's version.
    pub version: String,
}

/// The node as sent on a stream's first request.
pub fn node_proto(node: &Node, agent: &UserAgent) -> core::Node {
    core::Node {
        id: node.id.clone(),
        cluster: node.cluster.clone(),
        metadata: (!node.metadata.is_empty()).then(|| json_struct(&node.metadata)),
        locality: node.locality.as_ref().map(|l| core::Locality {
            region: l.region.clone(),
            zone: l.zone.clone(),
            sub_zone: l.sub_zone.clone(),
        }),
        user_agent_name: agent.name.clone(),
        user_agent_version_type: Some(core::node::UserAgentVersionType::UserAgentVersion(
            agent.version.clone(),
        )),
        client_features: CLIENT_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
        ..Default::default()
    }
}

/// The `DiscoveryRequest` for `request`; `node` goes in only when the request says so.
pub fn discovery_request(request: &Request, node: &core::Node) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: request.version_info.clone(),
        node: request.include_node.then(|| node.clone()),
        resource_names: request.resource_names.clone(),
        type_url: request.type_url.clone(),
        response_nonce: request.response_nonce.clone(),
        error_detail: request.error_detail.as_ref().map(|message| Status {
            code: INVALID_ARGUMENT,
            message: message.clone(),
            details: Vec::new(),
        }),
        ..Default::default()
    }
}

fn json_struct(map: &Map<String, Json>) -> Struct {
    Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), json_value(v)))
            .collect::<HashMap<_, _>>(),
    }
}

fn json_value(value: &Json) -> Value {
    let kind = match value {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_value).collect(),
        }),
        Json::Object(map) => Kind::StructValue(json_struct(map)),
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::Locality;

    fn agent() -> UserAgent {
        UserAgent {
            name: "grpc-rust-channel".to_owned(),
            version: "0.1.0".to_owned(),
        }
    }

    #[test]
    fn the_node_carries_the_bootstrap_and_the_client_features() {
        let mut metadata = Map::new();
        metadata.insert("team".to_owned(), Json::String("a".to_owned()));
        metadata.insert("n".to_owned(), serde_json::json!([1, {"x": true}]));
        let node = Node {
            id: "id-1".to_owned(),
            cluster: "c".to_owned(),
            locality: Some(Locality {
                region: "r".to_owned(),
                zone: "z".to_owned(),
                sub_zone: "s".to_owned(),
            }),
            metadata,
        };
        let proto = node_proto(&node, &agent());
        assert_eq!(proto.id, "id-1");
        assert_eq!(proto.cluster, "c");
        assert_eq!(proto.locality.as_ref().map(|l| l.zone.as_str()), Some("z"));
        assert_eq!(proto.user_agent_name, "grpc-rust-channel");
        assert_eq!(
            proto.client_features,
            vec![
                "envoy.lb.does_not_support_overprovisioning".to_owned(),
                "xds.config.resource-in-sotw".to_owned()
            ]
        );
        let fields = proto.metadata.map(|m| m.fields).unwrap_or_default();
        assert_eq!(
            fields.get("team").and_then(|v| v.kind.clone()),
            Some(Kind::StringValue("a".to_owned()))
        );
        let Some(Some(Kind::ListValue(list))) = fields.get("n").map(|v| v.kind.clone()) else {
            panic!("a list: {fields:?}");
        };
        assert_eq!(list.values.len(), 2);
    }

    #[test]
    fn node_only_on_the_first_request_and_nacks_carry_invalid_argument() {
        let node = node_proto(&Node::default(), &agent());
        let mut request = Request {
            type_url: "t".to_owned(),
            version_info: "3".to_owned(),
            response_nonce: "n".to_owned(),
            resource_names: vec!["a".to_owned()],
            error_detail: None,
            include_node: true,
        };
        let first = discovery_request(&request, &node);
        assert!(first.node.is_some());
        assert!(first.error_detail.is_none());
        request.include_node = false;
        request.error_detail = Some("bad".to_owned());
        let nack = discovery_request(&request, &node);
        assert!(nack.node.is_none());
        let status = nack.error_detail.unwrap_or_default();
        assert_eq!((status.code, status.message.as_str()), (3, "bad"));
        assert_eq!(nack.resource_names, vec!["a".to_owned()]);
        assert_eq!(nack.version_info, "3");
        assert_eq!(nack.response_nonce, "n");
    }
}
