//! The interop client through xDS as `cargo xtask interop --xds` runs it: the `xds-control-plane` binary
//! (its bootstrap written to a file) serving an in-process interop server as the one backend of
//! `xds:///svc.test`, and `interop-client --target=xds:///svc.test` with `GRPC_XDS_BOOTSTRAP` naming that
//! file. The cases pass, and the control plane's printed requests show the client fetched and ACKed the
//! whole chain. Every process is bounded and killed at the end.

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
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let server = interop::server::start("127.0.0.1:0".parse().expect("addr"))
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_xds-control-plane"))
        .arg("--port=0")
        .arg("--name=svc.test")
        .arg(format!("--backends=127.0.0.1:{backend}"))
        .arg(format!("--bootstrap_out={}", bootstrap.display()))
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
