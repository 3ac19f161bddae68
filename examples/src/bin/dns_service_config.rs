//! A service config delivered by DNS (gRFC A2): a DNS server on loopback (hickory, in this process) answers
//! `svc.test` with 127.0.0.1 and the TXT record `_grpc_config.svc.test` with a config that gives the method
//! a timeout; the channel resolves through it and applies it.

use grpc_channel::Channel;
use interop::dns::TestDns;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::SimpleRequest;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The port of the interop server given as the target (host:port).
    let target = grpc_examples::target();
    let port = target
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or("give --target=HOST:PORT")?;
    let dns = TestDns::start().await?;
    dns.add_a("svc.test", std::net::Ipv4Addr::LOCALHOST).await;
    dns.set_service_config(
        "svc.test",
        r#"[{"serviceConfig": {"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "timeout": "2s", "waitForReady": true}]}}]"#,
    )
    .await;
    let channel = Channel::new(format!("dns://{}/svc.test:{port}", dns.addr))?;
    let mut client = TestServiceClient::new(channel);
    let response = client
        .unary_call(SimpleRequest {
            response_size: 3,
            ..Default::default()
        })
        .await?;
    println!(
        "resolved through {} and called: {} bytes back",
        dns.addr,
        response
            .get_ref()
            .payload
            .as_ref()
            .map_or(0, |p| p.body.len())
    );
    Ok(())
}
