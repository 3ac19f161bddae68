//! The proxy environment variables (gRFC A1) as an application meets them: the `interop-client` process
//! runs with a controlled environment (`env_clear`, then `PATH` and only the variables a case sets)
//! against an in-process interop server, with one or two tinyproxies (`interop::tinyproxy`) whose logs say
//! which proxy, if any, carried the call and what its CONNECT named. Without tinyproxy the cases that need
//! it say so and pass, unless `TINYPROXY_REQUIRED` is set. Each client run is bounded.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use interop::tinyproxy::{Tinyproxy, TinyproxyOptions};

/// How long one client run may take (real time: a separate process).
const BOUND: Duration = Duration::from_secs(60);

/// An interop server on a runtime of its own, alive as long as this is.
struct Server {
    port: u16,
    _handle: interop::server::ServerHandle,
    _runtime: tokio::runtime::Runtime,
}

fn server() -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let handle = runtime
        .block_on(interop::server::start(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
        .expect("server");
    Server {
        port: handle.addr.port(),
        _handle: handle,
        _runtime: runtime,
    }
}

/// How a client run ended.
struct Run {
    ok: bool,
    /// stdout and stderr.
    output: String,
}

/// Runs `interop-client --server_host=HOST --server_port=PORT --test_case=empty_unary` with only `PATH`
/// and `vars` in its environment.
fn client(host: &str, port: u16, vars: &[(&str, &str)]) -> Run {
    let dir = std::env::temp_dir();
    let name = format!(
        "proxy-env-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "");
    let (out_path, err_path) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let out = std::fs::File::create(&out_path).expect("stdout file");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_interop-client"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .arg(format!("--server_host={host}"))
        .arg(format!("--server_port={port}"))
        .arg("--test_case=empty_unary")
        .arg("--use_tls=false")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let mut child = cmd.spawn().expect("spawn interop-client");
    let give_up = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            panic!("interop-client with {vars:?} did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    let _ = std::fs::remove_file(out_path);
    let _ = std::fs::remove_file(err_path);
    eprintln!("interop-client with {vars:?}: {status}\n{output}");
    Run {
        ok: status.success() && output.contains("empty_unary: passed"),
        output,
    }
}

/// The CONNECT requests `proxy` logged, once it has logged `n` (waiting at most 5 s: tinyproxy is a
/// process of its own).
fn connects(proxy: &Tinyproxy, n: usize) -> Vec<String> {
    for _ in 0..250 {
        let seen = proxy.connect_requests();
        if seen.len() >= n {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.connect_requests()
}

fn tinyproxy() -> Option<Tinyproxy> {
    Tinyproxy::start(TinyproxyOptions::default())
}

/// Asserts that the client passed through `proxy`, whose single CONNECT named `localhost:PORT`.
fn assert_through(run: &Run, proxy: &Tinyproxy, port: u16) {
    assert!(run.ok, "the call failed: {}", run.output);
    assert_eq!(
        connects(proxy, 1),
        [format!("localhost:{port}")],
        "one CONNECT, to the name unresolved; log: {}",
        proxy.log()
    );
}

/// Asserts that the client passed without `proxy`.
fn assert_direct(run: &Run, proxy: &Tinyproxy) {
    assert!(run.ok, "the call failed: {}", run.output);
    assert_eq!(
        proxy.connect_requests(),
        Vec::<String>::new(),
        "no CONNECT; log: {}",
        proxy.log()
    );
}

#[test]
fn grpc_proxy_beats_https_proxy() {
    let (Some(grpc), Some(https)) = (tinyproxy(), tinyproxy()) else {
        return;
    };
    let server = server();
    let run = client(
        "localhost",
        server.port,
        &[("grpc_proxy", &grpc.uri()), ("https_proxy", &https.uri())],
    );
    assert_through(&run, &grpc, server.port);
    assert_eq!(https.connect_requests(), Vec::<String>::new());
}

#[test]
fn each_proxy_variable_alone() {
    let server = server();
    for variable in [
        "https_proxy",
        "http_proxy",
        "HTTPS_PROXY",
        "GRPC_PROXY",
        "HTTP_PROXY",
    ] {
        let Some(proxy) = tinyproxy() else {
            return;
        };
        let run = client("localhost", server.port, &[(variable, &proxy.uri())]);
        assert_through(&run, &proxy, server.port);
    }
}

#[test]
fn a_scheme_less_value_is_http() {
    let Some(proxy) = tinyproxy() else {
        return;
    };
    let server = server();
    let run = client(
        "localhost",
        server.port,
        &[("https_proxy", &proxy.addr.to_string())],
    );
    assert_through(&run, &proxy, server.port);
}

#[test]
fn set_and_empty_grpc_proxy_means_direct() {
    let Some(proxy) = tinyproxy() else {
        return;
    };
    let server = server();
    let run = client(
        "localhost",
        server.port,
        &[("grpc_proxy", ""), ("https_proxy", &proxy.uri())],
    );
    assert_direct(&run, &proxy);
}

#[test]
fn no_proxy_forms_exempt_the_target() {
    let server = server();
    let port = server.port.to_string();
    let by_port = format!("localhost:{port}");
    // (no_proxy, the host the client is given)
    for (no_proxy, host) in [
        ("localhost", "localhost"),
        (".localhost", "localhost"),
        ("LOCALHOST.", "localhost"),
        ("example.com, localhost", "localhost"),
        (by_port.as_str(), "localhost"),
        ("*", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.0/8", "127.0.0.1"),
    ] {
        let Some(proxy) = tinyproxy() else {
            return;
        };
        let run = client(
            host,
            server.port,
            &[("https_proxy", &proxy.uri()), ("no_proxy", no_proxy)],
        );
        assert_direct(&run, &proxy);
    }
}

#[test]
fn a_non_matching_no_proxy_still_proxies() {
    let server = server();
    let other_port = format!("localhost:{}", u32::from(server.port) % 65535 + 1);
    // An address entry is compared with an address target, never with what a name resolves to (the name
    // goes to the proxy unresolved): `127.0.0.1` does not exempt `localhost`.
    for no_proxy in [
        "127.0.0.1",
        "example.com",
        "otherlocalhost",
        "10.0.0.0/8",
        other_port.as_str(),
        "",
    ] {
        let Some(proxy) = tinyproxy() else {
            return;
        };
        let run = client(
            "localhost",
            server.port,
            &[("https_proxy", &proxy.uri()), ("NO_PROXY", no_proxy)],
        );
        assert_through(&run, &proxy, server.port);
    }
}

#[test]
fn no_grpc_proxy_beats_no_proxy() {
    let server = server();
    // no_grpc_proxy is read, and does not exempt the target: proxied, although no_proxy would exempt it.
    let Some(proxy) = tinyproxy() else {
        return;
    };
    let run = client(
        "localhost",
        server.port,
        &[
            ("https_proxy", &proxy.uri()),
            ("no_grpc_proxy", "example.com"),
            ("no_proxy", "localhost"),
        ],
    );
    assert_through(&run, &proxy, server.port);
    // And the other way round.
    let Some(proxy) = tinyproxy() else {
        return;
    };
    let run = client(
        "localhost",
        server.port,
        &[
            ("https_proxy", &proxy.uri()),
            ("NO_GRPC_PROXY", "localhost"),
            ("no_proxy", "example.com"),
        ],
    );
    assert_direct(&run, &proxy);
}

#[test]
fn an_unusable_proxy_uri_is_ignored_and_the_call_goes_direct() {
    let server = server();
    // As C-core: the first variable set names the proxy; one the client cannot use is logged and ignored
    // (the channel connects directly), and the later variables are not read instead.
    for (variable, value) in [
        ("https_proxy", "https://127.0.0.1:3128"),
        ("grpc_proxy", "socks5://127.0.0.1:1080"),
        ("https_proxy", "http://user:hunter2@127.0.0.1:0"),
    ] {
        let Some(later) = tinyproxy() else {
            return;
        };
        let run = client(
            "localhost",
            server.port,
            &[(variable, value), ("http_proxy", &later.uri())],
        );
        assert_direct(&run, &later);
        assert!(!run.output.contains("hunter2"), "{}", run.output);
    }
}
