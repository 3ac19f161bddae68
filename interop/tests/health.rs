//! The interop server's health service (`grpc.health.v1.Health`) through grpc-channel's generated
//! `HealthClient`, over loopback: `Check` and `Watch` with the statuses a test sets through the server's
//! handle, unknown services, a cancelled `Watch`, and a server without the health service. Every test is
//! bounded by a timeout, and nothing sleeps.

use std::future::Future;
use std::time::Duration;

use grpc_channel::{Channel, Code, Streaming};
use interop::health::{HealthStatuses, ServingStatus};
use interop::server::{self, ServerHandle, ServerOptions};
use interop_proto::grpc_health_v1::health_client::HealthClient;
use interop_proto::grpc_health_v1::{HealthCheckRequest, HealthCheckResponse};

/// Every test ends within this.
const LIMIT: Duration = Duration::from_secs(20);

async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(LIMIT, test)
        .await
        .expect("the test took too long");
}

async fn start(options: ServerOptions) -> (ServerHandle, HealthClient) {
    let server = server::start_with("127.0.0.1:0".parse().expect("addr"), options)
        .await
        .expect("server");
    let channel = Channel::new(format!("ipv4:{}", server.addr)).expect("channel");
    (server, HealthClient::new(channel))
}

fn request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

async fn check(
    client: &mut HealthClient,
    service: &str,
) -> Result<ServingStatus, grpc_channel::Status> {
    let response = client.check(request(service)).await?.into_inner();
    Ok(status_of(&response))
}

fn status_of(response: &HealthCheckResponse) -> ServingStatus {
    ServingStatus::try_from(response.status).expect("a known status")
}

async fn watch(client: &mut HealthClient, service: &str) -> Streaming<HealthCheckResponse> {
    client
        .watch(request(service))
        .await
        .expect("Watch")
        .into_inner()
}

async fn next(updates: &mut Streaming<HealthCheckResponse>) -> ServingStatus {
    let response = updates
        .message()
        .await
        .expect("a status")
        .expect("the watch stays open");
    status_of(&response)
}

#[tokio::test]
async fn the_server_is_serving_by_default() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        assert_eq!(
            check(&mut client, "").await.expect("Check"),
            ServingStatus::Serving
        );
        assert_eq!(server.health().get(""), Some(ServingStatus::Serving));
    })
    .await;
}

#[tokio::test]
async fn check_reports_what_the_test_sets() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        server.health().set("", ServingStatus::NotServing);
        assert_eq!(
            check(&mut client, "").await.expect("Check"),
            ServingStatus::NotServing
        );
        server
            .health()
            .set("grpc.testing.TestService", ServingStatus::Serving);
        assert_eq!(
            check(&mut client, "grpc.testing.TestService")
                .await
                .expect("Check"),
            ServingStatus::Serving
        );
        // The whole server's status and a service's are independent.
        assert_eq!(
            check(&mut client, "").await.expect("Check"),
            ServingStatus::NotServing
        );
    })
    .await;
}

#[tokio::test]
async fn check_of_an_unknown_service_is_not_found() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        let status = check(&mut client, "no.such.Service")
            .await
            .expect_err("unknown service");
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        // A removed service is unknown again.
        server.health().set("gone", ServingStatus::Serving);
        assert_eq!(
            check(&mut client, "gone").await.expect("Check"),
            ServingStatus::Serving
        );
        server.health().remove("gone");
        let status = check(&mut client, "gone").await.expect_err("removed");
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
    })
    .await;
}

#[tokio::test]
async fn watch_sends_the_status_then_each_change() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        let mut updates = watch(&mut client, "").await;
        assert_eq!(next(&mut updates).await, ServingStatus::Serving);
        server.health().set("", ServingStatus::NotServing);
        assert_eq!(next(&mut updates).await, ServingStatus::NotServing);
        // Setting the same status again sends nothing; the next change follows at once.
        server.health().set("", ServingStatus::NotServing);
        server.health().set("", ServingStatus::Serving);
        assert_eq!(next(&mut updates).await, ServingStatus::Serving);
    })
    .await;
}

#[tokio::test]
async fn watch_of_an_unknown_service_stays_open_until_it_is_known() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        let mut updates = watch(&mut client, "later.Service").await;
        assert_eq!(next(&mut updates).await, ServingStatus::ServiceUnknown);
        server.health().set("later.Service", ServingStatus::Serving);
        assert_eq!(next(&mut updates).await, ServingStatus::Serving);
        // Removed, it is unknown again, and the call still stays open.
        server.health().remove("later.Service");
        assert_eq!(next(&mut updates).await, ServingStatus::ServiceUnknown);
        server
            .health()
            .set("later.Service", ServingStatus::NotServing);
        assert_eq!(next(&mut updates).await, ServingStatus::NotServing);
    })
    .await;
}

#[tokio::test]
async fn a_slow_watcher_sees_the_latest_status() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        let mut updates = watch(&mut client, "").await;
        assert_eq!(next(&mut updates).await, ServingStatus::Serving);
        // Many changes while the server's Watch cannot run (a test runs on one thread, and `set` does not
        // yield): its slot keeps only the latest, so the next message is that one, not every change.
        for _ in 0..1000 {
            server.health().set("", ServingStatus::NotServing);
            server.health().set("", ServingStatus::Serving);
        }
        server.health().set("", ServingStatus::NotServing);
        assert_eq!(next(&mut updates).await, ServingStatus::NotServing);
        // And a later change still follows.
        server.health().set("", ServingStatus::Serving);
        assert_eq!(next(&mut updates).await, ServingStatus::Serving);
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_watch_ends_on_the_server() {
    bounded(async {
        let (server, mut client) = start(ServerOptions::new()).await;
        let mut updates = watch(&mut client, "watched.Service").await;
        assert_eq!(next(&mut updates).await, ServingStatus::ServiceUnknown);
        assert_eq!(server.health().watchers("watched.Service"), 1);
        drop(updates);
        // The client's RST_STREAM ends the server's Watch, which lets go of the service.
        server.health().unwatched("watched.Service").await;
        assert_eq!(server.health().watchers("watched.Service"), 0);
        // The server still answers on the same connection.
        assert_eq!(
            check(&mut client, "").await.expect("Check"),
            ServingStatus::Serving
        );
    })
    .await;
}

#[tokio::test]
async fn servers_can_share_statuses() {
    bounded(async {
        let statuses = HealthStatuses::new();
        let (_a, mut a) = start(ServerOptions::new().health_statuses(statuses.clone())).await;
        let (_b, mut b) = start(ServerOptions::new().health_statuses(statuses.clone())).await;
        statuses.set("", ServingStatus::NotServing);
        assert_eq!(
            check(&mut a, "").await.expect("Check"),
            ServingStatus::NotServing
        );
        assert_eq!(
            check(&mut b, "").await.expect("Check"),
            ServingStatus::NotServing
        );
    })
    .await;
}

#[tokio::test]
async fn a_server_without_the_health_service_answers_unimplemented() {
    bounded(async {
        let (_server, mut client) = start(ServerOptions::new().without_health_service()).await;
        let status = check(&mut client, "").await.expect_err("no health service");
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
        let status = match client.watch(request("")).await {
            Err(status) => status,
            Ok(response) => response
                .into_inner()
                .message()
                .await
                .expect_err("no health service"),
        };
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    })
    .await;
}
