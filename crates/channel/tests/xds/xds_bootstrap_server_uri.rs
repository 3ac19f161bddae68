//! The bootstrap's `server_uri` forms: grpc-xds's bootstrap documents `unix-abstract:NAME` among the
//! Unix-domain socket URIs a management server may have (and accepts it), so a channel with such a
//! bootstrap must reach the server listening there.
//!
//! Every test is bounded (`support::xds::BOUND` around it).

#![cfg(feature = "xds")]

use grpc_test_support as support;

use grpc_channel::Channel;
use support::served_by;
use support::xds::{bounded, management_server, publish_one_backend, CALL, NAME};

// crates/xds/src/bootstrap.rs's module docs list `unix-abstract:name` as a `server_uri` ("as Istio's
// local agent listens") and its test `unix_server_uris_are_targets_like_any_other` accepts it, as
// grpc-go and C-core (which dial abstract sockets) do. But the channel's target parser
// (crates/service-config/src/target.rs, "abstract unix sockets are not supported") refuses it, so the
// ADS channel built in crates/channel/src/xds/ads.rs (`server_channel`) never exists and every call
// fails UNAVAILABLE: a bootstrap the parser accepts is one the channel cannot use. Either the bootstrap
// refuses the URI naming `xds_servers[0].server_uri`, or the channel reaches the server; a user expects
// the latter.
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
