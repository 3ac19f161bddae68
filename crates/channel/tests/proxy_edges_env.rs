//! The proxy environment, read by `Channel::builder(..).build()`: `*.example.com` entries, a variable that
//! is set but not UTF-8 and an https:// proxy (both ignored), and targets that never read the proxy. Alone in its binary,
//! one test: it changes the process's environment.

use std::sync::Arc;
use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ALL: [&str; 10] = [
    "grpc_proxy",
    "GRPC_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
    "no_grpc_proxy",
    "NO_GRPC_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// Whether a call to `target` with `no_proxy` set reached the proxy (a refusing one).
async fn proxied(target: &str, no_proxy: &str, proxy_uri: &str, count: &Arc<Mutex<usize>>) -> bool {
    for name in ALL {
        std::env::remove_var(name);
    }
    std::env::set_var("https_proxy", proxy_uri);
    std::env::set_var("no_proxy", no_proxy);
    reached_proxy(target, count).await
}

/// Whether a call to `target` on a channel built from the environment as it is reached the (refusing)
/// proxy. A proxy variable the channel cannot use must not fail the build.
async fn reached_proxy(target: &str, count: &Arc<Mutex<usize>>) -> bool {
    let before = *count.lock();
    let channel = Channel::builder(target)
        .service_config_lookup(false)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("channel");
    let call = channel.unary::<_, SimpleResponse>(
        paths::UNARY_CALL,
        Request::new(SimpleRequest::default()).with_timeout(Duration::from_secs(2)),
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), call).await;
    let after = *count.lock();
    after > before
}

/// A target on loopback, so that a call that does not go through the proxy stays on this machine.
const LOOPBACK: &str = "dns:///localhost:1";

#[tokio::test]
async fn the_environment_at_its_edges() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(Mutex::new(0usize));
    let seen = count.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            *seen.lock() += 1;
            let mut buf = [0u8; 1024];
            let _ = client.read(&mut buf).await;
            let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        }
    });
    let uri = format!("http://{addr}");
    // Sanity: with an unrelated no_proxy entry, the call goes to the proxy.
    assert!(proxied("dns:///api.example.com:443", "other.org", &uri, &count).await);
    // Sanity: a plain domain entry exempts.
    assert!(!proxied("dns:///api.example.com:443", "example.com", &uri, &count).await);
    // `*.example.com` is read as `.example.com`, as Go reads it.
    assert!(!proxied("dns:///api.example.com:443", "*.example.com", &uri, &count).await);
    // Sanity: a usable https_proxy alone is used.
    for name in ALL {
        std::env::remove_var(name);
    }
    std::env::set_var("https_proxy", &uri);
    assert!(
        reached_proxy(LOOPBACK, &count).await,
        "a usable https_proxy"
    );
    // "The first of grpc_proxy, ... that is set" wins: a grpc_proxy that is set but not UTF-8 is set, and
    // unusable: it is ignored (a warning names it) and the channel connects directly; https_proxy is not
    // used instead (as C-core).
    {
        use std::os::unix::ffi::OsStrExt as _;
        for name in ALL {
            std::env::remove_var(name);
        }
        std::env::set_var(
            "grpc_proxy",
            std::ffi::OsStr::from_bytes(b"http://pr\xffxy:3128"),
        );
        std::env::set_var("https_proxy", &uri);
        assert!(
            !reached_proxy(LOOPBACK, &count).await,
            "grpc_proxy (not UTF-8)"
        );
    }
    // Only http:// proxies: https_proxy=https://... is ignored with a warning, not a build error (C-core
    // logs it and connects directly), and http_proxy is not read instead.
    for name in ALL {
        std::env::remove_var(name);
    }
    std::env::set_var("https_proxy", "https://corp-proxy.example:8443");
    std::env::set_var("http_proxy", &uri);
    assert!(
        !reached_proxy(LOOPBACK, &count).await,
        "https_proxy=https://"
    );
    // The application's own proxy must be usable: a build error naming it.
    let e = Channel::builder("dns:///localhost:1")
        .proxy("https://corp-proxy.example:8443")
        .build()
        .expect_err("an https:// proxy given to the builder");
    assert!(e.to_string().contains("ChannelBuilder::proxy"), "{e}");
    // ...but only for a channel that would use it: `unix:` targets never go through a proxy, and
    // `no_proxy=*` exempts everything.
    Channel::builder("unix:///tmp/proxy-edges.sock")
        .build()
        .expect("a unix: target does not read the proxy");
    std::env::set_var("no_proxy", "*");
    Channel::builder("dns:///api.example.com:443")
        .build()
        .expect("an exempt target does not read the proxy");
    accept.abort();
    for name in ALL {
        std::env::remove_var(name);
    }
}
