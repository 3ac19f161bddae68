//! Review tests: the interop client's TLS flag combinations against an in-process TLS interop server with
//! certificates `InteropFiles::generate` wrote into a temporary directory. Each client run is bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use interop::tls::{server_config, InteropFiles};

const BOUND: Duration = Duration::from_secs(60);

fn certs() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("interop-tls-review-{}", std::process::id()));
    InteropFiles::generate(&dir).expect("certs");
    dir
}

/// A TLS interop server on its own runtime thread; returns its port.
fn tls_server(dir: &Path) -> u16 {
    let identity = InteropFiles::read_identity(
        &dir.join(InteropFiles::SERVER_CERT),
        &dir.join(InteropFiles::SERVER_KEY),
    )
    .expect("identity");
    let config = server_config(&identity, &[b"h2"], None).expect("config");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let server = interop::server::start_tls("127.0.0.1:0".parse().expect("addr"), config)
                .await
                .expect("bind");
            let _ = tx.send(server.addr.port());
            std::future::pending::<()>().await;
        });
    });
    rx.recv().expect("port")
}

/// Runs the interop client with `args`; (success, output).
fn client(args: &[String], env: &[(&str, &Path)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_interop-client"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
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

/// Client arguments and extra environment.
type Combo<'a> = (Vec<String>, Vec<(&'a str, &'a Path)>);

#[test]
fn tls_flag_combinations_reach_the_tls_server() {
    let dir = certs();
    let port = tls_server(&dir);
    let ca = dir.join(InteropFiles::CA);
    let ca_flag = format!("--ca_file={}", ca.display());
    let s = |v: &str| v.to_owned();
    let combos: Vec<Combo<'_>> = vec![
        (
            vec![
                s("--use_tls=true"),
                ca_flag.clone(),
                format!("--target=ipv4:127.0.0.1:{port}"),
                s("--test_case=empty_unary"),
            ],
            vec![],
        ),
        (
            vec![
                s("--use_tls=true"),
                ca_flag.clone(),
                format!("--target=https://localhost:{port}"),
                s("--test_case=large_unary"),
            ],
            vec![],
        ),
        (
            vec![
                s("--use_tls=true"),
                ca_flag.clone(),
                s("--server_host=127.0.0.1"),
                format!("--server_port={port}"),
                s("--server_host_override=foo.test.google.fr"),
                s("--test_case=empty_unary"),
            ],
            vec![],
        ),
        (
            vec![
                s("--use_tls=true"),
                s("--use_test_ca=true"),
                format!("--target=localhost:{port}"),
                s("--server_host_override=foo.test.google.fr"),
                s("--test_case=ping_pong"),
            ],
            vec![("INTEROP_TLS_DIR", dir.as_path())],
        ),
        // channel_soak makes a new channel per iteration: each must keep TLS and the CA.
        (
            vec![
                s("--use_tls=true"),
                ca_flag.clone(),
                format!("--target=localhost:{port}"),
                s("--test_case=channel_soak"),
                s("--soak_iterations=3"),
                s("--soak_overall_timeout_seconds=30"),
            ],
            vec![],
        ),
    ];
    let mut failures = Vec::new();
    for (args, env) in &combos {
        let (ok, out) = client(args, env);
        eprintln!("{args:?}: ok={ok}\n{out}");
        if !ok {
            failures.push(format!("{args:?}: {out}"));
        }
    }
    // Plaintext against the TLS server fails (bounded), saying the server expects TLS.
    let (ok, out) = client(
        &[
            format!("--target=ipv4:127.0.0.1:{port}"),
            s("--test_case=empty_unary"),
        ],
        &[],
    );
    eprintln!("plaintext: ok={ok}\n{out}");
    if ok || !out.contains("expects TLS") {
        failures.push(format!("plaintext against TLS: ok={ok}: {out}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "failed combinations:\n{}",
        failures.join("\n")
    );
}
