//! The interop client through xDS as `cargo xtask interop --xds` runs it: the `xds-control-plane` binary
//! (its bootstrap written to a file) serving an in-process interop server as the one backend of
//! `xds:///svc.test`, and `interop-client --target=xds:///svc.test` with `GRPC_XDS_BOOTSTRAP` naming that
//! file. The cases pass, and the control plane's printed requests show the client fetched and ACKed the
//! whole chain. Every process is bounded and killed at the end.
//!
//! With `--tls_dir` (as `cargo xtask interop --xds --tls` runs it) the control plane asks for mTLS: its
//! bootstrap names the certificate files, its Cluster an UpstreamTlsContext. Python grpcio's xDS client with
//! xDS credentials (`--secure_mode=true`) reaches the backend, which requires a client certificate, and
//! records the client's SPIFFE ID; without xDS credentials it cannot (skipped without grpcio, see
//! `interop::grpcio_peer`). Our interop client the same way once the channel applies xDS credentials.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(60);

/// Kills the child when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A plaintext interop server on its own runtime thread; returns its port.
fn interop_server() -> u16 {
    interop_server_with(interop::server::ServerOptions::new())
}

/// An interop server with `options` on its own runtime thread; returns its port.
fn interop_server_with(options: interop::server::ServerOptions) -> u16 {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let server = interop::server::start_with("127.0.0.1:0".parse().expect("addr"), options)
                .await
                .expect("bind");
            let _ = tx.send(server.addr.port());
            std::future::pending::<()>().await;
        });
    });
    rx.recv_timeout(BOUND).expect("port")
}

/// Starts `xds-control-plane` for `backend`, writing its bootstrap to `bootstrap`; returns it and a channel
/// of its stdout lines after `listening on`.
fn control_plane(backend: u16, bootstrap: &Path) -> (Killed, mpsc::Receiver<String>) {
    control_plane_with(backend, bootstrap, &[])
}

/// Like [`control_plane`], with more arguments.
fn control_plane_with(
    backend: u16,
    bootstrap: &Path,
    args: &[String],
) -> (Killed, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xds-control-plane"))
        .arg("--port=0")
        .arg("--name=svc.test")
        .arg(format!("--backends=127.0.0.1:{backend}"))
        .arg(format!("--bootstrap_out={}", bootstrap.display()))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn xds-control-plane");
    let stdout = child.stdout.take().expect("stdout");
    let child = Killed(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(BOUND)
        .expect("the control plane's first line");
    assert!(first.starts_with("listening on 127.0.0.1:"), "{first}");
    (child, rx)
}

/// Runs the interop client with `args` and `GRPC_XDS_BOOTSTRAP=bootstrap`; (success, stdout and stderr).
fn client(args: &[&str], bootstrap: &Path) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_interop-client"))
        .args(args)
        .env("GRPC_XDS_BOOTSTRAP", bootstrap)
        .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn interop-client");
    let give_up = Instant::now() + BOUND;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            panic!("interop-client {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (status.success(), text)
}

#[test]
fn the_interop_client_runs_its_cases_through_the_control_plane() {
    let backend = interop_server();
    let bootstrap = std::env::temp_dir().join(format!("xds-bootstrap-{}.json", std::process::id()));
    let (_control_plane, lines) = control_plane(backend, &bootstrap);
    let text =
        std::fs::read_to_string(&bootstrap).expect("the bootstrap is written before listening");
    assert!(
        text.contains("\"xds_servers\"") && text.contains("xds_v3"),
        "{text}"
    );

    let (ok, out) = client(
        &[
            "--target=xds:///svc.test",
            "--test_case=empty_unary,large_unary,server_streaming,ping_pong,status_code_and_message",
        ],
        &bootstrap,
    );
    assert!(ok, "{out}");
    assert!(out.contains("5 passed, 0 failed"), "{out}");

    // The client asked for, and ACKed, each resource of the chain (an ACK carries the version it accepts).
    // The control plane prints the requests as it polls them: they are awaited, within the bound.
    let acks = [
        ("Listener", "svc.test"),
        ("RouteConfiguration", "svc.test-routes"),
        ("Cluster", "svc.test-cluster"),
        ("ClusterLoadAssignment", "svc.test-cluster"),
    ];
    let acked = |requests: &[String], kind: &str, name: &str| {
        let prefix = format!("ads request: {kind} names={name} version=");
        requests.iter().any(|l| {
            l.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.starts_with(' ') && !rest.contains(" nack="))
        })
    };
    let mut requests: Vec<String> = Vec::new();
    let give_up = Instant::now() + BOUND;
    while !acks.iter().all(|(k, n)| acked(&requests, k, n)) {
        match lines.recv_timeout(give_up.saturating_duration_since(Instant::now())) {
            Ok(line) => requests.push(line),
            Err(_) => panic!("not every resource ACKed ({acks:?}) among {requests:#?}"),
        }
    }
    let _ = std::fs::remove_file(&bootstrap);
}

#[test]
fn without_a_bootstrap_the_xds_target_fails_by_name() {
    let missing =
        std::env::temp_dir().join(format!("no-such-bootstrap-{}.json", std::process::id()));
    let (ok, out) = client(
        &["--target=xds:///svc.test", "--test_case=empty_unary"],
        &missing,
    );
    assert!(!ok, "{out}");
    assert!(out.contains("bootstrap"), "{out}");
}

/// The mesh of `cargo xtask interop --xds --tls`: the files `interop-certs` writes, a backend requiring a
/// client certificate of their CA (recording the identities it sees), and the control plane with
/// `--tls_dir`. Removes the directory when dropped.
struct Mesh {
    dir: std::path::PathBuf,
    bootstrap: std::path::PathBuf,
    log: interop::server::PeerLog,
    _control_plane: Killed,
}

impl Drop for Mesh {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn mesh(test: &str) -> Mesh {
    use interop::tls::{server_config, InteropFiles};
    let dir = std::env::temp_dir().join(format!("xds-mesh-{}-{test}", std::process::id()));
    InteropFiles::generate(&dir).expect("certificates");
    let identity = InteropFiles::read_identity(
        &dir.join(InteropFiles::SERVER_CERT),
        &dir.join(InteropFiles::SERVER_KEY),
    )
    .expect("server identity");
    let ca = std::fs::read_to_string(dir.join(InteropFiles::CA)).expect("CA");
    let config = server_config(&identity, &[b"h2"], Some(&ca)).expect("config");
    let log = interop::server::PeerLog::new();
    let backend = interop_server_with(
        interop::server::ServerOptions::new()
            .tls(config)
            .peer_log(log.clone()),
    );
    let bootstrap = dir.join("bootstrap.json");
    let (control_plane, _lines) = control_plane_with(
        backend,
        &bootstrap,
        &[format!("--tls_dir={}", dir.display())],
    );
    Mesh {
        dir,
        bootstrap,
        log,
        _control_plane: control_plane,
    }
}

/// grpcio's xDS client (`interop/peers/grpcio/xds_client.py`) with `--secure_mode=BOOL`: five `UnaryCall`s;
/// its JSON answer, or `None` without grpcio.
fn grpcio_unary(mesh: &Mesh, secure_mode: bool) -> Option<String> {
    use interop::grpcio_peer::{proto_dir, python_or_skip, script, PeerProcess};
    let python = python_or_skip()?;
    let bootstrap = mesh.bootstrap.to_string_lossy().into_owned();
    let mut client = PeerProcess::spawn(
        &python,
        &script("xds_client.py"),
        &[
            "--target=xds:///svc.test".to_owned(),
            format!("--proto_dir={}", proto_dir().display()),
            format!("--secure_mode={secure_mode}"),
        ],
        &[("GRPC_XDS_BOOTSTRAP", &bootstrap)],
    );
    client.wait_for("ready", Duration::from_secs(120));
    Some(client.command(
        r#"{"method": "/grpc.testing.TestService/UnaryCall", "calls": 5, "timeout": 10}"#,
        BOUND,
    ))
}

#[test]
fn with_tls_dir_the_control_plane_asks_for_mtls_that_grpcio_accepts() {
    let mesh = mesh("grpcio");
    let text = std::fs::read_to_string(&mesh.bootstrap).expect("bootstrap");
    assert!(
        text.contains(r#""certificate_providers":{"mesh":{"plugin_name":"file_watcher""#)
            && text.contains("client.pem")
            && text.contains("ca.pem"),
        "{text}"
    );
    let Some(secure) = grpcio_unary(&mesh, true) else {
        return;
    };
    assert!(secure.contains(r#""codes": {"OK": 5}"#), "{secure}");
    let connections = mesh.log.connections();
    assert!(!connections.is_empty());
    for c in &connections {
        assert_eq!(
            c.client_uris(),
            vec![interop::tls::CLIENT_SPIFFE_ID.to_owned()],
            "{c:?}"
        );
    }
    // Without xDS credentials the client talks plaintext to a TLS backend: no call passes.
    let plain = grpcio_unary(&mesh, false).expect("grpcio");
    assert!(plain.contains(r#""codes": {"UNAVAILABLE": 5}"#), "{plain}");
    assert_eq!(
        mesh.log.calls(),
        5,
        "only the secure calls reached the backend"
    );
}

#[test]
fn with_tls_dir_the_interop_client_passes_with_secure_mode() {
    let mesh = mesh("ours");
    let (ok, out) = client(
        &[
            "--target=xds:///svc.test",
            "--secure_mode=true",
            "--test_case=empty_unary,large_unary,ping_pong",
        ],
        &mesh.bootstrap,
    );
    assert!(ok, "{out}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
    assert!(mesh
        .log
        .connections()
        .iter()
        .all(|c| c.client_uris() == [interop::tls::CLIENT_SPIFFE_ID.to_owned()]));
    // Without --secure_mode the client cannot reach the mTLS backend.
    let (ok, out) = client(
        &["--target=xds:///svc.test", "--test_case=empty_unary"],
        &mesh.bootstrap,
    );
    assert!(!ok, "{out}");
}
