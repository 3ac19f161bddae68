//! A Cluster's `transport_socket` (gRFC A29) checked against the channel's own bootstrap: the ADS task
//! decodes CDS with the bootstrap's `certificate_providers` names, so a Cluster naming an instance the
//! bootstrap defines is ACKed (and, without xDS credentials, its calls go over the channel's own
//! credentials), while one naming another instance is NACKed with the field's path and the previous
//! Cluster stays in use. A bootstrap without that instance NACKs the same Cluster, on an ADS stream of
//! its own (channels share a stream only when their bootstraps define the same instances).
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
use envoy_types::pb::envoy::config::core::v3::TransportSocket;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::ValidationContextType;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateProviderPluginInstance, CertificateValidationContext, CommonTlsContext,
    UpstreamTlsContext,
};
use envoy_types::pb::google::protobuf::Any;
use grpc_channel::Channel;
use interop::xds_resources::{eds_cluster, named, type_url};
use interop::xds_server::ManagementServer;
use prost::Message;
use support::served_by;
use support::xds::{bounded, locality, management_server, nack_of, publish, CALL, NAME};

/// A channel to `xds:///<NAME>` whose bootstrap defines these `file_watcher` instances (the files are
/// never read: the channel does not use xDS credentials).
fn channel_with_providers(server: &ManagementServer, instances: &[&str]) -> Channel {
    let providers: Vec<String> = instances
        .iter()
        .map(|name| {
            format!(
                r#""{name}": {{"plugin_name": "file_watcher",
                    "config": {{"ca_certificate_file": "/nonexistent/{name}/ca.pem"}}}}"#
            )
        })
        .collect();
    let bootstrap = format!(
        r#"{{"xds_servers": [{{"server_uri": "{}", "channel_creds": [{{"type": "insecure"}}],
             "server_features": ["xds_v3"]}}],
            "node": {{"id": "security-node"}},
            "certificate_providers": {{{}}}}}"#,
        server.server_uri(),
        providers.join(",")
    );
    Channel::builder(format!("xds:///{NAME}"))
        .xds_bootstrap(bootstrap)
        .build()
        .expect("xds channel")
}

/// The EDS cluster `name` whose TLS roots come from the provider instance `roots`.
fn secured_cluster(name: &str, roots: &str) -> (String, Any) {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::ValidationContext(
                CertificateValidationContext {
                    ca_certificate_provider_instance: Some(CertificateProviderPluginInstance {
                        instance_name: roots.to_owned(),
                        certificate_name: String::new(),
                    }),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cluster = envoy_types::pb::envoy::config::cluster::v3::Cluster {
        transport_socket: Some(TransportSocket {
            name: "envoy.transport_sockets.tls".to_owned(),
            config_type: Some(ConfigType::TypedConfig(Any {
                type_url:
                    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
                        .to_owned(),
                value: tls.encode_to_vec(),
            })),
        }),
        ..eds_cluster(name)
    };
    named(name, type_url::CLUSTER, &cluster)
}

/// A backend and a management server routing every call to "secure", the cluster of that backend
/// secured with the provider instance "mesh".
async fn secured_by_mesh() -> (interop::server::ServerHandle, ManagementServer) {
    let a = support::interop_server_handle().await;
    let server = management_server().await;
    publish(
        &server,
        &["*"],
        vec![interop::xds_resources::route_to_cluster(
            &interop::xds_resources::RouteMatchSpec::any(),
            "secure",
        )],
        &[("secure", locality(&[a.addr]))],
    );
    server.set(type_url::CLUSTER, vec![secured_cluster("secure", "mesh")]);
    (a, server)
}

#[tokio::test]
async fn cluster_provider_instances_are_checked_against_the_bootstrap() {
    bounded("transport_socket instances", async {
        let (a, server) = secured_by_mesh().await;
        let channel = channel_with_providers(&server, &["mesh"]);
        assert_eq!(
            served_by(&channel, CALL).await.expect("the cluster is accepted"),
            a.addr.to_string()
        );

        // An instance the bootstrap does not define: NACKed, naming the field; the last good cluster
        // stays in use.
        server.set(type_url::CLUSTER, vec![secured_cluster("secure", "elsewhere")]);
        let nack = nack_of(&server, type_url::CLUSTER, "the client").await;
        let detail = nack.error_detail.map(|d| d.message).unwrap_or_default();
        assert!(
            detail.contains(
                "transport_socket.typed_config.common_tls_context.validation_context.ca_certificate_provider_instance.instance_name"
            ) && detail.contains("elsewhere"),
            "{detail}"
        );
        assert_eq!(
            served_by(&channel, CALL).await.expect("the previous cluster"),
            a.addr.to_string()
        );
    })
    .await;
}

#[tokio::test]
async fn a_bootstrap_without_the_instance_nacks_the_cluster_on_its_own_stream() {
    bounded("transport_socket without the instance", async {
        let (a, server) = secured_by_mesh().await;
        // Two channels with the same server and node but other instances: each has its own ADS
        // stream, and only the one defining "mesh" accepts the cluster.
        let with_mesh = channel_with_providers(&server, &["mesh"]);
        assert_eq!(
            served_by(&with_mesh, CALL)
                .await
                .expect("the cluster is accepted"),
            a.addr.to_string()
        );
        // (A channel connects at its first call.)
        let without = channel_with_providers(&server, &["other"]);
        let status = served_by(&without, CALL)
            .await
            .expect_err("no valid cluster");
        assert_eq!(status.code(), grpc_channel::Code::Unavailable, "{status:?}");
        let nack = nack_of(&server, type_url::CLUSTER, "the second client").await;
        let detail = nack.error_detail.map(|d| d.message).unwrap_or_default();
        assert!(detail.contains("\"mesh\""), "{detail}");
        assert_eq!(
            served_by(&with_mesh, CALL).await.expect("still accepted"),
            a.addr.to_string()
        );
    })
    .await;
}
