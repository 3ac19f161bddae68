//! DNS refresh for Kubernetes (`ResolverOptions::refresh_interval`): a name gains an address (a scaled-up
//! headless Service); with refresh on, the new backend gets calls within the interval, with no failure;
//! with refresh off (gRPC's default) it gets none until a connection fails. Real DNS (the in-process
//! hickory server on loopback) and interop servers, on tokio's paused clock.

use std::net::Ipv4Addr;
use std::time::Duration;

use grpc_channel::{Channel, ResolverOptions};
use interop::dns::TestDns;
use interop::server::ServerHandle;
use tokio::time::Instant;

use super::plugins::{two_loopbacks_one_name, which, ROUND_ROBIN};

fn channel(dns: &TestDns, port: u16, refresh: Option<Duration>) -> Channel {
    Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_secs(1))
                .with_query_timeout(Duration::from_secs(2))
                .with_refresh_interval(refresh),
        )
        .build()
        .expect("channel")
}

/// Calls every 100 ms (virtual) for `span`; the time the second backend first answered, if it did.
async fn second_seen_within(
    ch: &Channel,
    second: &ServerHandle,
    span: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < span {
        if which(ch).await.ok().as_deref() == Some(second.addr.to_string().as_str()) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(start_paused = true)]
async fn with_refresh_a_new_address_gets_calls_within_the_interval() {
    let (first, second, dns) = two_loopbacks_one_name(Some(ROUND_ROBIN)).await;
    let ch = channel(&dns, first.addr.port(), Some(Duration::from_secs(5)));
    assert_eq!(which(&ch).await.expect("call"), first.addr.to_string());
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    let seen = second_seen_within(&ch, &second, Duration::from_secs(8))
        .await
        .expect("the new backend got no call within the refresh interval");
    // Added just after the first resolution: seen at the next refresh, 5 s after it (plus a connection).
    assert!(seen <= Duration::from_millis(5500), "{seen:?}");
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn without_refresh_a_new_address_waits_for_a_failure() {
    let (first, second, dns) = two_loopbacks_one_name(Some(ROUND_ROBIN)).await;
    let ch = channel(&dns, first.addr.port(), None);
    assert_eq!(which(&ch).await.expect("call"), first.addr.to_string());
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    assert_eq!(
        second_seen_within(&ch, &second, Duration::from_secs(60)).await,
        None,
        "no re-resolution without a failure (gRPC's default)"
    );
    // The first backend goes away: the failure re-resolves, and the second gets calls.
    first.shutdown();
    second_seen_within(&ch, &second, Duration::from_secs(30))
        .await
        .expect("the failure's re-resolution found the new backend");
}
