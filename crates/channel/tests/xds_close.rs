//! `Channel::close()` stops the name resolver (xDS watches and the channel's share of the ADS stream;
//! DNS), at its edges: wait-for-ready calls, close racing calls and builds, drop without close, and many
//! open/close cycles on one shared ADS stream.
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling
//! loops.

#![cfg(feature = "xds")]

mod support;

use std::time::Duration;

use grpc_channel::{Channel, Code, Request, ResolverOptions};
use interop::xds_resources::{named, rds_listener, type_url};
use interop::xds_server::ManagementServer;
use interop_proto::paths;
use support::xds::{
    bounded, listener_names, management_server, one_backend, xds_channel, xds_channel_for, CALL,
    NAME, ROUTES,
};
use support::{interop_server_handle, served_by};

/// Publishes a Listener for each of `names`, all naming [`ROUTES`].
fn set_listeners(server: &ManagementServer, names: &[String]) {
    server.set(
        type_url::LISTENER,
        names
            .iter()
            .map(|n| named(n, type_url::LISTENER, &rds_listener(n, ROUTES)))
            .collect(),
    );
}

/// A unary call with these options, its outcome's code (`Ok` for success).
async fn call(channel: &Channel, request: Request<interop_proto::SimpleRequest>) -> Code {
    match channel
        .unary::<_, interop_proto::SimpleResponse>(paths::UNARY_CALL, request)
        .await
    {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

/// A `SimpleRequest` with no options.
fn request() -> Request<interop_proto::SimpleRequest> {
    Request::new(interop_proto::SimpleRequest::default())
}

/// [`call`] on its own task (on a clone of `channel`).
fn spawn_call(
    channel: &Channel,
    request: Request<interop_proto::SimpleRequest>,
) -> tokio::task::JoinHandle<Code> {
    let channel = channel.clone();
    tokio::spawn(async move { call(&channel, request).await })
}

/// How many tasks are alive on this runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Polls (every 20 ms, at most `tries` times) until at most `before` tasks are alive and `also` holds;
/// the last count of alive tasks.
async fn tasks_back_to(before: usize, tries: usize, also: impl Fn() -> bool) -> usize {
    let mut after = 0;
    for _ in 0..tries {
        after = alive_tasks();
        if after <= before && also() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    after
}

/// Polls `done` (every 10 ms, at most 1000 times).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// Drop without close: dropping the only `xds:` channel (never closed) releases its share of the ADS
/// stream as close() does.
#[tokio::test]
async fn dropping_the_only_xds_channel_without_close_ends_the_ads_stream() {
    bounded("drop ends the stream", async {
        let (_a, server) = one_backend().await;
        let channel = xds_channel(&server);
        served_by(&channel, CALL).await.expect("a call");
        drop(channel);
        eventually("the ADS stream ends after the drop", || {
            server.streams_ended() == 1
        })
        .await;
        assert_eq!(server.streams_opened(), 1);
    })
    .await;
}

/// close() before any call: no resolver starts, no ADS stream opens, calls fail UNAVAILABLE, close() is
/// idempotent, connect() after close does nothing, and xds_resources() is None.
#[tokio::test]
async fn closing_before_the_first_call_starts_nothing_and_closing_twice_is_harmless() {
    bounded("close before start", async {
        let server = management_server().await;
        let channel = xds_channel(&server);
        channel.close();
        channel.close();
        channel.connect();
        let code = call(&channel, request().with_timeout(CALL)).await;
        assert_eq!(code, Code::Unavailable);
        assert!(channel.ready().await.is_err());
        assert!(channel.xds_resources().is_none());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            server.streams_opened(),
            0,
            "a closed channel opened a stream"
        );
        channel.close();
    })
    .await;
}

/// A wait-for-ready call waiting for a Listener that never comes ends once the channel is closed
/// (UNAVAILABLE), rather than waiting for ever (it has no deadline).
#[tokio::test(start_paused = true)]
async fn a_wait_for_ready_call_waiting_for_the_listener_ends_at_close() {
    bounded("close ends a waiting call", async {
        let server = management_server().await;
        let channel = xds_channel(&server);
        let waiting = spawn_call(&channel, request().with_wait_for_ready(true));
        eventually("the Listener is asked for", || {
            server
                .requests()
                .iter()
                .any(|r| r.type_url == type_url::LISTENER)
        })
        .await;
        // Past the does-not-exist timer: the channel fails, the call waits on.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!waiting.is_finished(), "a wait-for-ready call waits");
        channel.close();
        let code = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the call ended with close()")
            .expect("task");
        assert_eq!(code, Code::Unavailable);
    })
    .await;
}

/// Many channels, each for its own Listener, open (one call each) and close while one channel keeps the
/// ADS stream: afterwards the stream subscribes to the staying channel's Listener only, the client holds
/// nothing more than before, and no task was left behind.
#[tokio::test]
async fn many_open_close_cycles_on_a_shared_stream_leave_nothing_behind() {
    bounded("open/close cycles", async {
        const CYCLES: usize = 200;
        let (_a, server) = one_backend().await;
        let mut names: Vec<String> = (0..CYCLES).map(|i| format!("l{i}.test")).collect();
        names.push(NAME.to_owned());
        set_listeners(&server, &names);
        let staying = xds_channel(&server);
        served_by(&staying, CALL).await.expect("a call");
        // One cycle first, so that everything made once per process exists in the baseline.
        for name in &names[..1] {
            let ch = xds_channel_for(&server, name);
            served_by(&ch, CALL).await.expect("a call");
            ch.close();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tasks_before = alive_tasks();
        let resources_before = staying.xds_resources().expect("resources").resources.len();

        for name in &names[1..CYCLES] {
            let ch = xds_channel_for(&server, name);
            served_by(&ch, CALL).await.expect("a call");
            ch.close();
            drop(ch);
        }
        eventually("only the staying channel's Listener is left", || {
            listener_names(&staying) == [NAME]
        })
        .await;
        let last = server
            .requests()
            .into_iter()
            .rev()
            .find(|r| r.type_url == type_url::LISTENER)
            .expect("a Listener request");
        assert_eq!(last.resource_names, [NAME], "the stream's subscription");
        assert_eq!(
            staying.xds_resources().expect("resources").resources.len(),
            resources_before
        );
        assert_eq!(server.streams_opened(), 1);
        let tasks_after = tasks_back_to(tasks_before, 100, || true).await;
        assert!(
            tasks_after <= tasks_before,
            "tasks left behind: {tasks_before} before, {tasks_after} after {CYCLES} cycles"
        );
        served_by(&staying, CALL).await.expect("still works");
    })
    .await;
}

/// The only channel of an ADS stream closes while the next one is being built (same bootstrap): the new
/// channel never shares a client whose task is ending, and its calls work, cycle after cycle, on a
/// multi-threaded runtime where the close and the build run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_last_channel_while_the_next_is_built_never_shares_a_dead_stream() {
    bounded("close racing build", async {
        let (_a, server) = one_backend().await;
        let mut previous = xds_channel(&server);
        served_by(&previous, CALL).await.expect("a call");
        for i in 0..30 {
            let closing = previous.clone();
            let closer = tokio::spawn(async move {
                closing.close();
                drop(closing);
            });
            let next = xds_channel(&server);
            drop(previous);
            served_by(&next, CALL)
                .await
                .unwrap_or_else(|s| panic!("cycle {i}: {s:?}"));
            closer.await.expect("closer");
            previous = next;
        }
    })
    .await;
}

/// A server-streaming call running when the channel closes ends (it does not hang), with a status.
#[tokio::test]
async fn a_streaming_call_in_progress_ends_when_the_xds_channel_closes() {
    bounded("close during a stream", async {
        let (_a, server) = one_backend().await;
        let channel = xds_channel(&server);
        let mut stream = support::xds::slow_stream(&channel, 100, Duration::from_millis(100)).await;
        channel.close();
        let mut outcome = None;
        for _ in 0..200 {
            match tokio::time::timeout(CALL, stream.message()).await {
                Err(_) => panic!("the stream hangs after close()"),
                Ok(Ok(Some(_))) => continue,
                Ok(other) => {
                    outcome = Some(other.map(|_| ()));
                    break;
                }
            }
        }
        let outcome = outcome.expect("the stream ends");
        eprintln!("stream after close: {outcome:?}");
    })
    .await;
}

/// DNS: a wait-for-ready call waiting for a name that never resolves (a silent DNS server) ends once
/// the channel closes: the resolver stops and the wait ends, at most a query timeout later.
#[tokio::test(start_paused = true)]
async fn a_wait_for_ready_call_waiting_for_dns_ends_at_close() {
    let (_socket, silent) = interop::dns::silent().await.expect("socket");
    let channel = Channel::builder(format!("dns://{silent}/svc.test:1"))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(1)))
        .build()
        .expect("channel");
    let waiting = spawn_call(&channel, request().with_wait_for_ready(true));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!waiting.is_finished(), "a wait-for-ready call waits");
    channel.close();
    let code = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the call ended after close()")
        .expect("task");
    assert_eq!(code, Code::Unavailable);
}

/// Many `xds:` channels, each for its own Listener, built, called, and closed or dropped concurrently on
/// a multi-threaded runtime while one channel keeps the ADS stream: the subscription and the tasks come
/// back to where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_open_call_close_cycles_leave_nothing_behind() {
    bounded("concurrent cycles", async {
        const CHANNELS: usize = 60;
        let (_a, server) = one_backend().await;
        let server = std::sync::Arc::new(server);
        let mut names: Vec<String> = (0..CHANNELS).map(|i| format!("p{i}.test")).collect();
        names.push(NAME.to_owned());
        set_listeners(&server, &names);
        let staying = xds_channel(&server);
        served_by(&staying, CALL).await.expect("a call");
        let warm = xds_channel_for(&server, &names[0]);
        served_by(&warm, CALL).await.expect("a call");
        warm.close();
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tasks_before = alive_tasks();

        let mut tasks = Vec::new();
        for (i, name) in names[..CHANNELS].iter().enumerate() {
            let server = server.clone();
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                let ch = xds_channel_for(&server, &name);
                // A call left running while the channel closes, and one that finished.
                served_by(&ch, CALL).await.expect("a call");
                let running = tokio::spawn({
                    let ch = ch.clone();
                    async move {
                        let _ = served_by(&ch, CALL).await;
                    }
                });
                if i % 2 == 0 {
                    ch.close();
                }
                drop(ch);
                running.await.expect("call task");
            }));
        }
        for t in tasks {
            t.await.expect("cycle");
        }
        eventually("only the staying channel's Listener is left", || {
            listener_names(&staying) == [NAME]
        })
        .await;
        let tasks_after = tasks_back_to(tasks_before, 200, || true).await;
        assert!(
            tasks_after <= tasks_before,
            "tasks left behind: {tasks_before} before, {tasks_after} after"
        );
        assert_eq!(server.streams_opened(), 1);
        served_by(&staying, CALL).await.expect("still works");
    })
    .await;
}

/// DNS: channels built, called and closed (the `Channel` value kept alive) leave no task behind: each
/// resolver task ends with close().
#[tokio::test]
async fn closed_dns_channels_leave_no_resolver_task() {
    let a = interop_server_handle().await;
    let dns = interop::dns::TestDns::start().await.expect("dns");
    dns.add_a("svc.test", std::net::Ipv4Addr::new(127, 0, 0, 1))
        .await;
    let build = || {
        Channel::builder(format!("dns://{}/svc.test:{}", dns.addr, a.addr.port()))
            .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
            .build()
            .expect("channel")
    };
    let warm = build();
    served_by(&warm, CALL).await.expect("a call");
    warm.close();
    drop(warm);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = alive_tasks();
    let mut kept = Vec::new();
    for _ in 0..20 {
        let ch = build();
        served_by(&ch, CALL).await.expect("a call");
        ch.close();
        kept.push(ch);
    }
    let after = tasks_back_to(before, 200, || true).await;
    assert!(
        after <= before,
        "tasks left: {before} before, {after} after 20 closed channels"
    );
    drop(kept);
}

/// The only `xds:` channel of its management server, called then closed (its value kept alive): the ADS
/// task, its stream's writer, the channel to the management server and the resolver all end; nothing is
/// left running compared with before the channel was built.
#[tokio::test]
async fn closing_the_only_xds_channel_leaves_no_task_behind() {
    bounded("no task left", async {
        let (_a, server) = one_backend().await;
        let before = alive_tasks();
        let mut kept = Vec::new();
        for i in 0..5u64 {
            let ch = xds_channel(&server);
            served_by(&ch, CALL).await.expect("a call");
            ch.close();
            kept.push(ch);
            eventually("the stream ends", || server.streams_ended() == i + 1).await;
        }
        let after = tasks_back_to(before, 200, || true).await;
        assert!(
            after <= before,
            "tasks left: {before} before, {after} after"
        );
        drop(kept);
    })
    .await;
}

/// close() right after connect(), before the resolver task ever ran (or while it makes its first
/// watch): no stream is left open and no task is left running, cycle after cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_right_after_connect_leaves_no_stream_and_no_task() {
    bounded("close right after connect", async {
        let server = management_server().await;
        set_listeners(&server, &[NAME.to_owned()]);
        let before = alive_tasks();
        let mut kept = Vec::new();
        for i in 0..50 {
            let ch = xds_channel(&server);
            ch.connect();
            if i % 3 == 1 {
                tokio::task::yield_now().await;
            } else if i % 3 == 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ch.close();
            kept.push(ch);
        }
        eventually("every stream opened ends", || {
            server.streams_opened() == server.streams_ended()
        })
        .await;
        let after = tasks_back_to(before, 200, || {
            server.streams_opened() == server.streams_ended()
        })
        .await;
        assert!(
            after <= before,
            "tasks left: {before} before, {after} after"
        );
        assert_eq!(server.streams_opened(), server.streams_ended());
        drop(kept);
    })
    .await;
}
