//! The bootstrap's `server_uri` forms: grpc-xds's bootstrap documents `unix-abstract:NAME` among the
//! Unix-domain socket URIs a management server may have (and accepts it), so a channel with such a
//! bootstrap must reach the server listening there; a `unix-abstract:` target no one listens on fails
//! its calls UNAVAILABLE.
//!
//! Every test is bounded (`support::xds::BOUND` around it).

#![cfg(all(feature = "xds", target_os = "linux"))]

use grpc_test_support as support;

use grpc_channel::{Channel, Code};
use interop::xds_server::ManagementServer;
use support::served_by;
use support::xds::{bounded, management_server, publish_one_backend, CALL, NAME};

// grpc-xds's bootstrap accepts `unix-abstract:name` as a `server_uri` ("as Istio's local agent
// listens"), as grpc-go and C-core do; the channel's target parser takes it as
// `Target::UnixAbstract` and the connector dials the abstract socket, so the ADS channel reaches the
// server (here through a forwarder of the test's own, independent of interop's listener).
#[tokio::test]
async fn a_unix_abstract_server_uri_reaches_the_management_server() {
    bounded("unix-abstract server_uri", async {
        let backend = support::interop_server_handle().await;
        let server = management_server().await;
        publish_one_backend(&server, backend.addr);
        // An abstract socket that forwards each connection to the management server's TCP port.
        let name = format!("grpc-xds-bootstrap-test-{}", std::process::id());
        let listener = {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .expect("an abstract address");
            let std = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind");
            std.set_nonblocking(true).expect("nonblocking");
            tokio::net::UnixListener::from_std(std).expect("tokio listener")
        };
        let upstream = server.addr();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        let bootstrap = format!(
            r#"{{"xds_servers": [{{"server_uri": "unix-abstract:{name}",
                 "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}],
                "node": {{"id": "abstract-socket-node"}}}}"#
        );
        grpc_xds::Bootstrap::parse(&bootstrap).expect("the bootstrap accepts unix-abstract:");
        let channel = Channel::builder(format!("xds:///{NAME}"))
            .xds_bootstrap(bootstrap)
            .build()
            .expect("an xds channel whose bootstrap parses");
        assert_eq!(
            served_by(&channel, CALL)
                .await
                .expect("resources from the management server behind unix-abstract:"),
            backend.addr.to_string()
        );
    })
    .await;
}

/// interop's ManagementServer listening in the abstract namespace itself: the bootstrap names it by
/// its `server_uri` and calls reach the backend it publishes.
#[tokio::test]
async fn a_management_server_on_an_abstract_socket_serves_the_channel() {
    bounded("unix-abstract management server", async {
        let backend = support::interop_server_handle().await;
        let name = format!("grpc-xds-abstract-server-{}", std::process::id());
        let server = ManagementServer::start_unix_abstract(&name)
            .await
            .expect("an abstract management server");
        assert_eq!(server.server_uri(), format!("unix-abstract:{name}"));
        publish_one_backend(&server, backend.addr);
        let channel = Channel::builder(format!("xds:///{NAME}"))
            .xds_bootstrap(server.bootstrap_json())
            .build()
            .expect("an xds channel");
        assert_eq!(
            served_by(&channel, CALL)
                .await
                .expect("resources from the abstract management server"),
            backend.addr.to_string()
        );
    })
    .await;
}

/// A `unix-abstract:` target with no listener: calls fail UNAVAILABLE naming the address, nothing hangs.
#[tokio::test]
async fn an_abstract_socket_with_no_listener_fails_calls_unavailable() {
    bounded("unix-abstract with no listener", async {
        let target = format!("unix-abstract:grpc-nobody-listens-{}", std::process::id());
        let channel = Channel::builder(target.clone()).build().expect("a channel");
        let status = served_by(&channel, CALL).await.expect_err("no listener");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains(&target), "{status:?}");
    })
    .await;
}
