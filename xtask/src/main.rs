//! Project chores, run as `cargo xtask <command>`:
//!
//! * `interop [--peer ours|grpcio] [--tls] [--proxy] [--xds] [--etcd] [--test_case=LIST] [--service_config_json=JSON]`: builds the release interop
//!   binaries, starts the chosen server on a free loopback port (ours, or Python grpcio installed into a
//!   virtualenv under `target/`), runs every client case with a progress line each, stops the server, prints a
//!   summary table and exits non-zero on any failure. `--service_config_json` is handed to the client (its
//!   standard flag: no service config lookup, this JSON as the default). Against grpcio the
//!   client_compressed_* cases are skipped (grpcio's server application cannot see a request message's
//!   compressed flag), and the suite runs a second time with a retry policy for every TestService method
//!   (`RETRY_SERVICE_CONFIG`), with a summary per pass; the closing line is the last pass's
//!   `N passed, N failed[, N skipped]`. With `--tls`, `interop-certs` first writes a fresh test CA and
//!   server certificate (`*.test.google.fr`, `localhost`, `127.0.0.1`) into `target/interop-tls`; the server
//!   serves TLS with that certificate and the client runs with the standard TLS flags (`--use_tls=true
//!   --use_test_ca=true --server_host_override=foo.test.google.fr`). With `--proxy`, a tinyproxy (the
//!   `tinyproxy` of the `PATH`, or `$TINYPROXY`; `apt-get install tinyproxy`) is started on a free loopback
//!   port with a config written under `target/interop-proxy`, and the client runs with
//!   `grpc_proxy=http://127.0.0.1:PORT` in its environment (the no-proxy variables removed), as any
//!   application picks up a proxy: every connection goes through an HTTP CONNECT tunnel (gRFC A1). After
//!   the run, tinyproxy's log must show at least one CONNECT to the server's port, or the xtask fails.
//!   The binaries are always built with the interop crate's feature `xds-server` (one release build for
//!   every interop and chaos run). With `--xds` (not with `--proxy`), `xds-control-plane` is
//!   started on a free loopback port with the server as the one
//!   backend of `xds:///svc.test` (Listener → RouteConfiguration → EDS cluster), writing its bootstrap to
//!   `target/interop-xds/bootstrap-PEER.json`; the client runs with `--target=xds:///svc.test` and
//!   `GRPC_XDS_BOOTSTRAP` naming that file, as any gRPC application finds its control plane. After the
//!   run, the control plane's output (one line per ADS request, kept in `target/interop-xds`) must show
//!   an ACK of each of the four resources and a Listener subscription per client run, or the xtask fails.
//!   With `--xds --tls` the run is a service mesh's (gRFC A29): `interop-certs` also writes a client
//!   identity (`client.pem`, `client.key`, SPIFFE ID `spiffe://test.example/ns/default/sa/client`) and puts
//!   the SPIFFE ID `spiffe://test.example/ns/default/sa/server` in the server certificate; the server serves
//!   TLS requiring a client certificate of the test CA (`--tls_client_ca_file`); the control plane's cluster
//!   carries an `UpstreamTlsContext` (mTLS, an exact SAN matcher on the server's SPIFFE ID) and its
//!   bootstrap a `file_watcher` certificate provider of those files (`--tls_dir`); and the client runs with
//!   `--secure_mode=true` (xDS credentials) instead of the TLS flags, so its only way to TLS is the control
//!   plane's.
//!   With `--etcd` (alone of the three), an etcd (`/usr/bin/etcd`, the `PATH`, or `$ETCD`; `apt-get install
//!   etcd-server`) is started on free loopback ports with its data under `target/interop-etcd`, the server
//!   is registered under `ETCD_NAME/127.0.0.1:PORT` in the etcd naming format (`{"Addr":...}`, written
//!   through etcd's JSON gateway), and the client runs with `--target=etcd://127.0.0.1:ETCD_PORT/ETCD_NAME`
//!   (grpc-etcd-resolver): the only way it can find the server is through etcd.
//!
//! * `bench [--quick]`: builds the release interop server and `grpc-bench`, starts the interop server and a
//!   tonic server (`grpc-bench tonic-server`) each in its own process on a free loopback port, pinned with
//!   `taskset` to the last CPU while the bench runs on the others (unpinned, with a warning, where taskset or
//!   a second CPU is missing), and runs the scenarios (grpc-channel, tonic and a raw h2 client side by side;
//!   windowed bidi against both servers; then the A6 scenarios against backends in a child process),
//!   printing Markdown tables with ratios and writing them with a JSON copy and the hedging chart into
//!   `target/bench` (`target/bench-quick`).
//!
//! * `chaos [--quick]`: builds the release `chaos-server` and `chaos-client` (package `interop`), starts the
//!   server (four fault-injecting backends on loopback ports, which it prints on one line, and the four of
//!   the sick-backend scenario on another), runs the client's soak against them (1,000,000 calls, or 10,000
//!   with `--quick`; see `interop::chaos`) and then the sick-backend scenario (`interop::chaos::sick`: success
//!   rates with and without health checking and outlier detection), then closes the server's stdin so it
//!   prints what it injected, and exits with the client's exit status.
//! * `fuzz [--time SECONDS] [TARGET...]`: runs each fuzz target of `fuzz/` (or only the ones named) for SECONDS
//!   (60 by default) with `cargo +nightly fuzz run`, one after the other, each on its corpus under
//!   `fuzz/corpus/`; installs cargo-fuzz with `cargo install cargo-fuzz --locked` first if it is missing. Exits
//!   non-zero if any target crashes (the input is left under `fuzz/artifacts/`). Needs a nightly toolchain.
//!
//! * `examples`: builds `grpc-examples` and the interop server, starts two interop servers, runs every
//!   example against them (hedging and the custom least_in_flight policy across both) and fails if any
//!   fails.
//!
//! * `tidy [--verbose]`: checks over the sources that no compiler or linter makes: no module cycle in any
//!   crate, and grpc-channel's modules each use only their own layer or lower ones (see `tidy/`;
//!   `--verbose` prints the layer table). Also run by `xtask`'s unit tests, so `cargo test --workspace`
//!   fails on a cycle or an upward import.
//!
//! Plain `std::process`: no dependencies.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod tidy;

const GRPCIO_SKIPS: &str = "client_compressed_unary,client_compressed_streaming";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("chaos") => return chaos(&args[1..]),
        Some("interop") => interop(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("examples") => examples(&args[1..]),
        Some("tidy") => tidy::tidy(&root(), &args[1..]),
        _ => Err(
            "usage: cargo xtask interop [--peer ours|grpcio] [--tls] [--proxy] [--xds] [--etcd] [--test_case=a,b,...] [--service_config_json=JSON] | cargo xtask bench [--quick] | cargo xtask chaos [--quick] | cargo xtask fuzz [--time SECONDS] [TARGET...] | cargo xtask examples | cargo xtask tidy [--verbose]"
                .to_owned(),
        ),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// The features of every release build of the interop crate alone (interop, chaos): the same set each
/// time, so they share one build.
const INTEROP_FEATURES: &[&str] = &["interop/xds-server"];

/// Builds the binaries of `packages` in release mode, with these `features` (`package/feature`).
fn build_release(packages: &[&str], features: &[&str], what: &str) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask: building {what} (release)");
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(root())
        .args(["build", "--release", "--bins"]);
    for p in packages {
        cmd.args(["--package", p]);
    }
    for f in features {
        cmd.args(["--features", f]);
    }
    run(&mut cmd, "cargo build")
}

/// Kills the server when dropped, whatever happens in between.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The service config of the second pass against grpcio: a retry policy for every TestService method.
const RETRY_SERVICE_CONFIG: &str = r#"{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;

/// One run of the interop client over the suite.
struct Pass {
    /// `interop against grpcio`, `interop against grpcio with a retryPolicy`.
    title: String,
    /// Where the client's output goes.
    log: PathBuf,
    /// `--service_config_json` for every case, if any.
    service_config_json: Option<String>,
    /// TLS with the test CA of this directory (`interop-certs`'s), or plaintext.
    tls: Option<PathBuf>,
    /// `grpc_proxy` in the client's environment, if any.
    proxy: Option<String>,
    /// Through xDS: the bootstrap file for `GRPC_XDS_BOOTSTRAP`, the target being `xds:///XDS_NAME`.
    xds: Option<PathBuf>,
    /// Through etcd: the target `etcd://127.0.0.1:PORT/ETCD_NAME`.
    etcd: Option<String>,
    /// `--secure_mode=true`: xDS credentials, the TLS settings from the control plane (`--xds --tls`).
    secure_mode: bool,
}

/// What a pass printed and how it ended.
struct PassResult {
    rows: Vec<(String, String)>,
    /// The client's closing `N passed, N failed[, N skipped]` line (empty if it never printed one).
    summary: String,
    ok: bool,
}

fn interop(args: &[String]) -> Result<bool, String> {
    let mut peer = "ours".to_owned();
    let mut cases = "all".to_owned();
    let mut service_config_json: Option<String> = None;
    let mut tls = false;
    let mut proxy = false;
    let mut xds = false;
    let mut etcd = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--tls" {
            tls = true;
        } else if a == "--proxy" {
            proxy = true;
        } else if a == "--xds" {
            xds = true;
        } else if a == "--etcd" {
            etcd = true;
        } else if let Some(p) = a.strip_prefix("--peer=") {
            peer = p.to_owned();
        } else if a == "--peer" {
            peer = it.next().cloned().ok_or("--peer needs a value")?;
        } else if let Some(c) = a.strip_prefix("--test_case=") {
            cases = c.to_owned();
        } else if let Some(j) = a.strip_prefix("--service_config_json=") {
            service_config_json = Some(j.to_owned());
        } else if a == "--service_config_json" {
            service_config_json = Some(
                it.next()
                    .cloned()
                    .ok_or("--service_config_json needs a value")?,
            );
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    if xds && proxy {
        return Err("--xds does not combine with --proxy".to_owned());
    }
    if etcd && (tls || proxy || xds) {
        return Err("--etcd does not combine with --tls, --proxy or --xds".to_owned());
    }
    // Every run builds the interop binaries with xds-control-plane: one release build serves every
    // interop and chaos run (a build without the feature would be a second one, with tonic's server).
    build_release(
        &["interop"],
        INTEROP_FEATURES,
        "the interop binaries and xds-control-plane",
    )?;
    let bin = target_dir().join("release");
    let tls_dir = target_dir().join("interop-tls");
    if tls {
        run(
            Command::new(bin.join("interop-certs")).arg(format!("--out={}", tls_dir.display())),
            "interop-certs",
        )?;
    }
    let (mut server_cmd, skip) = match peer.as_str() {
        "ours" => {
            let mut c = Command::new(bin.join("interop-server"));
            c.arg("--port=0");
            (c, "")
        }
        "grpcio" => {
            let python = grpcio_venv()?;
            let mut c = Command::new(python);
            // Its stdin takes commands (the feature tests set health statuses through it); here it
            // gets none, rather than reading the terminal's.
            c.arg(root().join("interop/peers/grpcio/server.py"))
                .arg("--port=0")
                .arg(format!("--proto_dir={}", root().join("proto").display()))
                .stdin(Stdio::null());
            (c, GRPCIO_SKIPS)
        }
        other => return Err(format!("unknown peer {other:?}: expected ours or grpcio")),
    };
    if tls {
        server_cmd
            .arg("--use_tls=true")
            .arg(format!(
                "--tls_cert_file={}",
                tls_dir.join("server.pem").display()
            ))
            .arg(format!(
                "--tls_key_file={}",
                tls_dir.join("server.key").display()
            ));
    }
    // A mesh: the server requires a client certificate of the test CA.
    let mesh = xds && tls;
    if mesh {
        server_cmd.arg(format!(
            "--tls_client_ca_file={}",
            tls_dir.join("ca.pem").display()
        ));
    }
    let (mut over, mut suffix) = if mesh {
        (String::new(), "-mtls".to_owned())
    } else if tls {
        (" over TLS".to_owned(), "-tls".to_owned())
    } else {
        (String::new(), String::new())
    };
    // Started before the server, so that a missing tinyproxy fails at once.
    let tinyproxy = if proxy {
        over.push_str(" through tinyproxy");
        suffix.push_str("-proxy");
        Some(Tinyproxy::start()?)
    } else {
        None
    };
    let client_proxy = tinyproxy.as_ref().map(Tinyproxy::uri);
    // Through xDS with mTLS the client gets its TLS settings from the control plane alone.
    let client_tls = (tls && !mesh).then(|| tls_dir.clone());
    let xds_dir = target_dir().join("interop-xds");
    let client_xds = xds.then(|| xds_dir.join(format!("bootstrap-{peer}.json")));
    if xds {
        over.push_str(if mesh {
            " through xDS with mTLS (--secure_mode=true)"
        } else {
            " through xDS"
        });
        suffix.push_str("-xds");
    }
    // Started before the server, so that a missing etcd fails at once.
    let etcd_server = if etcd {
        over.push_str(" through etcd");
        suffix.push_str("-etcd");
        Some(EtcdServer::start()?)
    } else {
        None
    };
    let client_etcd = etcd_server
        .as_ref()
        .map(|e| format!("etcd://127.0.0.1:{}/{ETCD_NAME}", e.port));
    let mut passes = vec![Pass {
        title: format!("interop against {peer}{over}"),
        log: target_dir().join(format!("interop-{peer}{suffix}.log")),
        service_config_json,
        tls: client_tls.clone(),
        proxy: client_proxy.clone(),
        xds: client_xds.clone(),
        etcd: client_etcd.clone(),
        secure_mode: mesh,
    }];
    // Against grpcio, the whole suite once more with a retry policy on every call: the retrying call paths
    // must pass the same cases against an independent server.
    if peer == "grpcio" {
        passes.push(Pass {
            title: format!("interop against {peer}{over} with a retryPolicy"),
            log: target_dir().join(format!("interop-{peer}{suffix}-retry.log")),
            service_config_json: Some(RETRY_SERVICE_CONFIG.to_owned()),
            tls: client_tls,
            proxy: client_proxy,
            xds: client_xds.clone(),
            etcd: client_etcd,
            secure_mode: mesh,
        });
    }
    let (server, port) = start_server(server_cmd, &peer)?;
    eprintln!("xtask: {peer} server listening on 127.0.0.1:{port}");
    // The control plane, with the server as the one backend of xds:///XDS_NAME.
    let control_plane = match &client_xds {
        Some(bootstrap) => Some(ControlPlane::start(
            &bin,
            &xds_dir,
            bootstrap,
            port,
            &peer,
            mesh.then_some(tls_dir.as_path()),
        )?),
        None => None,
    };
    // The server's one registration, in the etcd naming format.
    if let Some(etcd_server) = &etcd_server {
        etcd_server.register(port)?;
    }
    let mut results = Vec::new();
    for pass in &passes {
        if passes.len() > 1 {
            println!("{}:", pass.title);
        }
        results.push(run_pass(&bin, port, &cases, skip, pass)?);
    }
    // The client must have fetched and accepted the whole chain from the control plane.
    let fetched = control_plane
        .as_ref()
        .map(|control_plane| control_plane.check_fetched(passes.len()));
    drop(control_plane);
    drop(etcd_server);
    drop(server);
    // The calls must have gone through the proxy: its log names the server's port.
    let tunnels = tinyproxy.as_ref().map(|tinyproxy| {
        let target = format!("127.0.0.1:{port}");
        let connects = tinyproxy.connect_requests();
        let to_server = connects.iter().filter(|t| **t == target).count();
        if to_server == 0 {
            Err(format!(
                "--proxy: tinyproxy logged no CONNECT to {target} (it logged {connects:?}): the client \
                 did not go through the proxy; see {}",
                tinyproxy.log.display()
            ))
        } else {
            Ok(format!(
                "through tinyproxy {}: {to_server} CONNECT {target} in its log ({})",
                tinyproxy.uri(),
                tinyproxy.log.display()
            ))
        }
    });
    drop(tinyproxy);

    let mut all_ok = true;
    for (pass, result) in passes.iter().zip(&results) {
        let width = result
            .rows
            .iter()
            .map(|(c, _)| c.len())
            .max()
            .unwrap_or(4)
            .max(4);
        println!();
        println!("{} (log: {})", pass.title, pass.log.display());
        if let Some(json) = &pass.service_config_json {
            println!("service config: {json}");
        }
        println!("{:<width$}  result", "case");
        println!("{:-<width$}  ------", "");
        for (case, result) in &result.rows {
            println!("{case:<width$}  {result}");
        }
        println!("{}", result.summary);
        all_ok &= result.ok;
    }
    if passes.len() > 1 {
        println!();
        for (pass, result) in passes.iter().zip(&results) {
            let summary = if result.summary.is_empty() {
                "no summary (the client did not finish)"
            } else {
                result.summary.as_str()
            };
            println!("{}: {summary}", pass.title);
        }
    }
    if let Some(tunnels) = tunnels {
        println!();
        println!("{}", tunnels?);
    }
    if let Some(fetched) = fetched {
        println!();
        println!("{}", fetched?);
    }
    if passes.len() > 1 || proxy || xds || etcd {
        // The closing line stays the last pass's bare summary, for tools that read it.
        if let Some(last) = results.last() {
            println!("{}", last.summary);
        }
    }
    Ok(all_ok)
}

/// Runs the interop client once over `cases` against 127.0.0.1:`port` (or `xds:///XDS_NAME` with the pass's
/// bootstrap), echoing a progress line per case.
fn run_pass(
    bin: &Path,
    port: u16,
    cases: &str,
    skip: &str,
    pass: &Pass,
) -> Result<PassResult, String> {
    let mut client = Command::new(bin.join("interop-client"));
    match (&pass.xds, &pass.etcd) {
        (_, Some(target)) => {
            client.arg(format!("--target={target}"));
        }
        // As any application gets its bootstrap: from the environment.
        (Some(bootstrap), None) => {
            client
                .arg(format!("--target=xds:///{XDS_NAME}"))
                .env("GRPC_XDS_BOOTSTRAP", bootstrap)
                .env_remove("GRPC_XDS_BOOTSTRAP_CONFIG");
        }
        (None, None) => {
            client
                .arg("--server_host=127.0.0.1")
                .arg(format!("--server_port={port}"));
        }
    }
    client
        .arg(format!("--test_case={cases}"))
        .stdout(Stdio::piped());
    match &pass.tls {
        None => {
            client.arg("--use_tls=false");
        }
        Some(dir) => {
            // The standard flags: the test CA (found through INTEROP_TLS_DIR) and the host override the
            // certificate names.
            client
                .env("INTEROP_TLS_DIR", dir)
                .arg("--use_tls=true")
                .arg("--use_test_ca=true")
                .arg("--server_host_override=foo.test.google.fr");
        }
    }
    if !skip.is_empty() {
        client.arg(format!("--skip={skip}"));
    }
    if pass.secure_mode {
        client.arg("--secure_mode=true");
    }
    if let Some(json) = &pass.service_config_json {
        client.arg(format!("--service_config_json={json}"));
    }
    if let Some(proxy) = &pass.proxy {
        // As any application gets its proxy; an inherited no-proxy list (often `localhost,127.0.0.1`)
        // would exempt the server.
        client.env("grpc_proxy", proxy);
        for name in ["no_grpc_proxy", "NO_GRPC_PROXY", "no_proxy", "NO_PROXY"] {
            client.env_remove(name);
        }
    }
    let mut child = client
        .spawn()
        .map_err(|e| format!("cannot start interop-client: {e}"))?;
    let stdout = child.stdout.take().ok_or("no client stdout")?;
    let mut log =
        std::fs::File::create(&pass.log).map_err(|e| format!("{}: {e}", pass.log.display()))?;
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut summary = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading the client's output: {e}"))?;
        let _ = writeln!(log, "{line}");
        if line.starts_with("soak ") {
            continue;
        }
        if let Some((case, result)) = line.split_once(": ") {
            if !case.contains(' ') {
                rows.push((case.to_owned(), result.to_owned()));
                println!("[{:>2}] {case}: {result}", rows.len());
                continue;
            }
        }
        if line.contains(" passed, ") {
            summary = line.clone();
        }
        println!("{line}");
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the client: {e}"))?;
    let ok = status.success() && !summary.is_empty();
    Ok(PassResult { rows, summary, ok })
}

/// The examples, and what each is given: one interop server's `host:port`, or both as an `ipv4:` list.
const EXAMPLES: &[(&str, bool)] = &[
    ("unary", false),
    ("streaming", false),
    ("retry_policy", false),
    ("hedging", true),
    ("dns_service_config", false),
    ("interceptor", false),
    ("tonic_over_tower", false),
    ("tower_layers", false),
    ("custom_resolver", true),
    ("least_in_flight", true),
];

fn examples(args: &[String]) -> Result<bool, String> {
    if let Some(other) = args.first() {
        return Err(format!("unknown argument {other:?}"));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run(
        Command::new(&cargo).args([
            "build",
            "-p",
            "grpc-examples",
            "--bins",
            "-p",
            "interop",
            "--bin",
            "interop-server",
        ]),
        "building the examples and the interop server",
    )?;
    let bin = target_dir().join("debug");
    let mut servers = Vec::new();
    let mut ports = Vec::new();
    for name in ["first", "second"] {
        let mut cmd = Command::new(bin.join("interop-server"));
        cmd.arg("--port=0");
        let (server, port) = start_server(cmd, &format!("{name} interop"))?;
        servers.push(server);
        ports.push(port);
    }
    let mut failed = Vec::new();
    for (example, both) in EXAMPLES {
        let target = if *both {
            format!("ipv4:127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1])
        } else {
            format!("127.0.0.1:{}", ports[0])
        };
        println!("\n==> {example} --target={target}");
        let status = Command::new(bin.join(example))
            .arg(format!("--target={target}"))
            .status()
            .map_err(|e| format!("cannot run {example}: {e}"))?;
        if !status.success() {
            failed.push(*example);
        }
    }
    drop(servers);
    println!(
        "\nexamples: {} passed, {} failed{}",
        EXAMPLES.len() - failed.len(),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        }
    );
    Ok(failed.is_empty())
}

fn bench(args: &[String]) -> Result<bool, String> {
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(other) = args.iter().find(|a| *a != "--quick") {
        return Err(format!("unknown argument {other:?}"));
    }
    build_release(
        &["interop", "grpc-bench"],
        &[],
        "the interop server and grpc-bench",
    )?;
    let bin = target_dir().join("release");
    let (server_cpus, bench_cpus) = bench_cpus();
    let mut server = pinned(&bin.join("interop-server"), server_cpus.as_deref());
    server.arg("--port=0");
    let (server, port) = start_server(server, "interop")?;
    let mut tonic = pinned(&bin.join("grpc-bench"), server_cpus.as_deref());
    tonic.arg("tonic-server").stdin(Stdio::piped());
    let (tonic, tonic_port) = start_server(tonic, "tonic")?;
    eprintln!(
        "xtask: interop server on 127.0.0.1:{port}, tonic server on 127.0.0.1:{tonic_port}; running the \
         scenarios (this takes a while)"
    );
    let mut bench = pinned(&bin.join("grpc-bench"), bench_cpus.as_deref());
    bench.arg(format!("--tonic-port={tonic_port}"));
    let out = target_dir().join(if quick { "bench-quick" } else { "bench" });
    bench
        .arg(format!("--port={port}"))
        .arg(format!("--out={}", out.display()));
    if quick {
        bench.arg("--quick");
    }
    let status = bench
        .status()
        .map_err(|e| format!("cannot start grpc-bench: {e}"))?;
    drop(server);
    drop(tonic);
    Ok(status.success())
}

/// The CPUs for the bench's servers (the last) and for the bench itself (the others), as `taskset -c`
/// lists; `None` (no pinning, with a warning) with one CPU or no `taskset`.
fn bench_cpus() -> (Option<String>, Option<String>) {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let taskset = Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if cpus < 2 || !taskset {
        eprintln!(
            "xtask: warning: {} CPU(s), taskset {}: servers and bench run unpinned",
            cpus,
            if taskset { "present" } else { "missing" }
        );
        return (None, None);
    }
    let last = cpus - 1;
    let others = if last == 1 {
        "0".to_owned()
    } else {
        format!("0-{}", last - 1)
    };
    eprintln!("xtask: servers pinned to CPU {last}, the bench to CPU(s) {others}");
    (Some(last.to_string()), Some(others))
}

/// `program`, run on `cpus` through `taskset -c` when given.
fn pinned(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(cpus).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

fn chaos(args: &[String]) -> ExitCode {
    match chaos_run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the chaos soak; the client's exit status is the result.
fn chaos_run(args: &[String]) -> Result<ExitCode, String> {
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(other) = args.iter().find(|a| *a != "--quick") {
        return Err(format!("unknown argument {other:?}"));
    }
    build_release(
        &["interop"],
        INTEROP_FEATURES,
        "chaos-server and chaos-client",
    )?;
    let bin = target_dir().join("release");
    let started = Instant::now();
    let mut child = Command::new(bin.join("chaos-server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start chaos-server: {e}"))?;
    // Closing the server's stdin asks it to print its tally and exit.
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("no server stdout")?;
    let mut server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(ports) = line.strip_prefix("chaos ports: ") {
                let _ = tx.send(("chaos", ports.trim().to_owned()));
            } else if let Some(ports) = line.strip_prefix("sick ports: ") {
                let _ = tx.send(("sick", ports.trim().to_owned()));
                break;
            }
        }
        for _ in lines {}
    });
    let mut ports = HashMap::new();
    while ports.len() < 2 {
        let (kind, list) = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "chaos-server did not print its ports within 60 s".to_owned())?;
        ports.insert(kind, list);
    }
    let (chaos_ports, sick_ports) = (&ports["chaos"], &ports["sick"]);
    eprintln!("xtask: chaos-server backends on 127.0.0.1:{{{chaos_ports}}}, sick-backend scenario on 127.0.0.1:{{{sick_ports}}}");
    let mut client = Command::new(bin.join("chaos-client"));
    client.arg(format!("--ports={chaos_ports}"));
    client.arg(format!("--sick_ports={sick_ports}"));
    if quick {
        client.arg("--quick");
    }
    let status = client
        .status()
        .map_err(|e| format!("cannot start chaos-client: {e}"))?;
    drop(stdin);
    let stop = Instant::now() + Duration::from_secs(5);
    while Instant::now() < stop {
        if matches!(server.0.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    eprintln!(
        "xtask: chaos{} took {:.0} s",
        if quick { " --quick" } else { "" },
        started.elapsed().as_secs_f64()
    );
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1).max(1)),
        None => ExitCode::FAILURE,
    })
}

/// Runs the fuzz targets (all, or the ones named) for `--time` seconds each; `Ok(false)` if any crashed.
fn fuzz(args: &[String]) -> Result<bool, String> {
    let mut seconds: u64 = 60;
    let mut wanted: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = if let Some(v) = a.strip_prefix("--time=") {
            Some(v.to_owned())
        } else if a == "--time" {
            Some(it.next().cloned().ok_or("--time needs a value")?)
        } else if a.starts_with('-') {
            return Err(format!("unknown argument {a:?}"));
        } else {
            wanted.push(a.clone());
            None
        };
        if let Some(v) = value {
            seconds = v.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                format!("--time: expected a positive number of seconds, got {v:?}")
            })?;
        }
    }
    // The rustup proxy from PATH, not $CARGO (the toolchain's own cargo, which does not understand +nightly).
    let cargo = "cargo";
    let fuzz_dir = root().join("fuzz");
    ensure_cargo_fuzz(cargo)?;
    let listed = Command::new(cargo)
        .current_dir(&fuzz_dir)
        .args(["+nightly", "fuzz", "list"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo fuzz list: cannot start: {e}"))?;
    if !listed.status.success() {
        return Err(format!(
            "cargo +nightly fuzz list failed ({})",
            listed.status
        ));
    }
    let all: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(unknown) = wanted.iter().find(|t| !all.contains(t)) {
        return Err(format!(
            "unknown fuzz target {unknown:?}; the targets are: {}",
            all.join(", ")
        ));
    }
    let targets = if wanted.is_empty() { all } else { wanted };
    let mut results = Vec::new();
    for t in &targets {
        eprintln!("xtask: fuzzing {t} for {seconds} s");
        // The corpus directory is created if missing; libFuzzer keeps new inputs there.
        let corpus = fuzz_dir.join("corpus").join(t);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        // `cargo fuzz run` builds the target (cargo's parallelism: set CARGO_BUILD_JOBS to limit it); libFuzzer
        // runs one worker. A crash, leak, timeout or out-of-memory ends it with a non-zero status.
        let status = Command::new(cargo)
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", t, "--"])
            .arg(format!("-max_total_time={seconds}"))
            .arg("-print_final_stats=1")
            .status()
            .map_err(|e| format!("cargo fuzz run {t}: cannot start: {e}"))?;
        results.push((t.clone(), status.success()));
    }
    println!();
    let width = targets.iter().map(String::len).max().unwrap_or(6).max(6);
    println!("{:<width$}  result", "target");
    println!("{:-<width$}  ------", "");
    for (t, ok) in &results {
        println!("{t:<width$}  {}", if *ok { "ok" } else { "FAILED" });
    }
    let failed = results.iter().filter(|(_, ok)| !ok).count();
    println!(
        "{} targets, {seconds} s each: {} ok, {failed} failed",
        results.len(),
        results.len() - failed
    );
    Ok(failed == 0)
}

/// Installs cargo-fuzz from crates.io unless `cargo fuzz` already runs.
fn ensure_cargo_fuzz(cargo: &str) -> Result<(), String> {
    let present = Command::new(cargo)
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: cargo-fuzz is missing; installing it (cargo install cargo-fuzz --locked)");
    run(
        Command::new(cargo).args(["install", "cargo-fuzz", "--locked"]),
        "cargo install cargo-fuzz",
    )
}

/// Starts a server that prints `listening on HOST:PORT`, and returns it with the port.
fn start_server(cmd: Command, name: &str) -> Result<(Server, u16), String> {
    start_server_keeping(cmd, name, None).map(|(server, port, _)| (server, port))
}

/// The lines a server printed after `listening on`, as they come.
type Lines = Arc<Mutex<Vec<String>>>;

/// [`start_server`], keeping what the server prints after `listening on` when `log` is given: written there
/// and returned.
fn start_server_keeping(
    mut cmd: Command,
    name: &str,
    log: Option<PathBuf>,
) -> Result<(Server, u16, Lines), String> {
    let mut log = match log {
        Some(path) => {
            Some(std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        None => None,
    };
    let kept = Lines::default();
    let keep = kept.clone();
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the {name} server: {e}"))?;
    let stdout = child.stdout.take().ok_or("no server stdout")?;
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(port) = line
                .strip_prefix("listening on ")
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.trim().parse::<u16>().ok())
            {
                let _ = tx.send(port);
                break;
            }
        }
        // Keep draining so the server never blocks on a full pipe.
        for line in lines {
            let Ok(line) = line else { break };
            if let Some(log) = &mut log {
                let _ = writeln!(log, "{line}");
                if let Ok(mut kept) = keep.lock() {
                    kept.push(line);
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(port) => Ok((server, port, kept)),
        Err(_) => Err(format!(
            "the {name} server did not report a port within 120 s"
        )),
    }
}

/// The service the client reaches through xDS (`interop --xds`): its target is `xds:///svc.test`.
const XDS_NAME: &str = "svc.test";

/// `xds-control-plane`, for `interop --xds`: serving the peer server as the one backend of
/// `xds:///XDS_NAME`, its bootstrap written to a file; the line it prints per ADS request kept (and logged
/// under `target/interop-xds`); killed when dropped.
struct ControlPlane {
    _child: Server,
    port: u16,
    requests: Lines,
    log: PathBuf,
}

impl ControlPlane {
    fn start(
        bin: &Path,
        dir: &Path,
        bootstrap: &Path,
        backend_port: u16,
        peer: &str,
        tls_dir: Option<&Path>,
    ) -> Result<ControlPlane, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // A stale file must not pass for this run's.
        let _ = std::fs::remove_file(bootstrap);
        let log = dir.join(format!("control-plane-{peer}.log"));
        let mut cmd = Command::new(bin.join("xds-control-plane"));
        cmd.arg("--port=0")
            .arg(format!("--name={XDS_NAME}"))
            .arg(format!("--backends=127.0.0.1:{backend_port}"))
            .arg(format!("--bootstrap_out={}", bootstrap.display()))
            .stdin(Stdio::null());
        // mTLS to the backend: the cluster's UpstreamTlsContext and the bootstrap's file_watcher provider.
        if let Some(tls_dir) = tls_dir {
            cmd.arg(format!("--tls_dir={}", tls_dir.display()));
        }
        let (child, port, requests) =
            start_server_keeping(cmd, "xds-control-plane", Some(log.clone()))?;
        // It writes the bootstrap before it listens.
        if !bootstrap.is_file() {
            return Err(format!(
                "xds-control-plane listens but wrote no bootstrap at {}",
                bootstrap.display()
            ));
        }
        eprintln!(
            "xtask: xds-control-plane listening on 127.0.0.1:{port}, serving xds:///{XDS_NAME} with the \
             {peer} server as its backend (bootstrap: {}, log: {})",
            bootstrap.display(),
            log.display()
        );
        Ok(ControlPlane {
            _child: child,
            port,
            requests,
            log,
        })
    }

    /// Waits (up to 10 s) until the control plane has printed, for each resource of the chain, a request
    /// that ACKs it (a version, no error), and at least `clients` first requests of the Listener (one per
    /// client process); the closing report, or why not.
    fn check_fetched(&self, clients: usize) -> Result<String, String> {
        let chain = [
            ("Listener", XDS_NAME.to_owned()),
            ("RouteConfiguration", format!("{XDS_NAME}-routes")),
            ("Cluster", format!("{XDS_NAME}-cluster")),
            ("ClusterLoadAssignment", format!("{XDS_NAME}-cluster")),
        ];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let requests: Vec<AdsRequest> = self
                .requests
                .lock()
                .map(|lines| lines.iter().filter_map(|l| AdsRequest::parse(l)).collect())
                .unwrap_or_default();
            let missing: Vec<&(&str, String)> = chain
                .iter()
                .filter(|(kind, name)| !requests.iter().any(|r| r.acks(kind, name)))
                .collect();
            let subscriptions = requests
                .iter()
                .filter(|r| r.kind == "Listener" && r.names(XDS_NAME) && r.version.is_empty())
                .count();
            if missing.is_empty() && subscriptions >= clients {
                return Ok(format!(
                    "through xDS: xds-control-plane 127.0.0.1:{} got {} ADS requests, {subscriptions} \
                     subscription(s) to Listener {XDS_NAME} and an ACK of each resource of its chain \
                     (log: {})",
                    self.port,
                    requests.len(),
                    self.log.display()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "--xds: xds-control-plane saw no ACK of {missing:?}, or fewer than {clients} \
                     subscription(s) to Listener {XDS_NAME} ({subscriptions}): the client did not get its \
                     configuration from the control plane; see {}",
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One line `xds-control-plane` prints per request: `ads request: TYPE names=A,B version=V nonce=N[ nack=..]`.
#[derive(Debug, PartialEq)]
struct AdsRequest {
    kind: String,
    names: Vec<String>,
    version: String,
    nack: bool,
}

impl AdsRequest {
    fn parse(line: &str) -> Option<AdsRequest> {
        let mut words = line.strip_prefix("ads request: ")?.split(' ');
        let kind = words.next()?.to_owned();
        let names = words.next()?.strip_prefix("names=")?;
        let version = words.next()?.strip_prefix("version=")?.to_owned();
        let nack = line.contains(" nack=");
        Some(AdsRequest {
            kind,
            names: names
                .split(',')
                .filter(|n| *n != "-")
                .map(str::to_owned)
                .collect(),
            version,
            nack,
        })
    }

    fn names(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// An ACK of `kind` `name`: a request for it carrying a version, without an error.
    fn acks(&self, kind: &str, name: &str) -> bool {
        self.kind == kind && self.names(name) && !self.version.is_empty() && !self.nack
    }
}

/// tinyproxy, for `interop --proxy`: started on a free loopback port with a config written under
/// `target/interop-proxy` (logging every CONNECT), killed when dropped.
/// The service name the interop server is registered under in etcd (`--etcd`).
const ETCD_NAME: &str = "interop-server";

/// etcd for `--etcd`: one member on free loopback ports, its data and log under `target/interop-etcd`.
struct EtcdServer {
    _child: Server,
    port: u16,
}

impl EtcdServer {
    fn start() -> Result<EtcdServer, String> {
        let binary = std::env::var_os("ETCD")
            .map(PathBuf::from)
            .or_else(|| {
                let path = std::env::var_os("PATH").unwrap_or_default();
                std::env::split_paths(&path)
                    .chain([PathBuf::from("/usr/bin")])
                    .map(|dir| dir.join("etcd"))
                    .find(|p| p.is_file())
            })
            .ok_or("--etcd needs etcd on the PATH (apt-get install etcd-server, or set ETCD)")?;
        let dir = target_dir().join("interop-etcd");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let free_port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| format!("a free port: {e}"))
        };
        let (port, peer_port) = (free_port()?, free_port()?);
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log_path = dir.join("etcd.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let child = Command::new(&binary)
            .arg("--name=interop")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=interop={peer}"))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut child = Server(child);
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.0.try_wait() {
                return Err(format!(
                    "etcd exited at start ({status}); its log: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ));
            }
            if Instant::now() > until {
                return Err(format!(
                    "etcd did not listen on 127.0.0.1:{port} within 20 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "xtask: etcd listening on 127.0.0.1:{port} (log: {})",
            log_path.display()
        );
        Ok(EtcdServer {
            _child: child,
            port,
        })
    }

    /// Registers the server at 127.0.0.1:`server_port` under `ETCD_NAME/`, with a Put through etcd's
    /// JSON gateway (`POST /v3/kv/put`, key and value in base64), retried while etcd elects itself.
    fn register(&self, server_port: u16) -> Result<(), String> {
        let addr = format!("127.0.0.1:{server_port}");
        let key = format!("{ETCD_NAME}/{addr}");
        let value = format!(r#"{{"Addr":"{addr}","Metadata":null}}"#);
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            base64(key.as_bytes()),
            base64(value.as_bytes())
        );
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            match http_post(self.port, "/v3/kv/put", &body) {
                Ok((200, response)) if response.contains("\"header\"") => {
                    eprintln!("xtask: registered {key} = {value} in etcd");
                    return Ok(());
                }
                Ok((status, response)) if Instant::now() > until => {
                    return Err(format!("etcd's put answered {status}: {response}"));
                }
                Err(e) if Instant::now() > until => return Err(format!("etcd's put: {e}")),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// A plain HTTP/1.1 POST of JSON to 127.0.0.1:`port`: the status and the body.
fn http_post(port: u16, path: &str, body: &str) -> Result<(u16, String), String> {
    use std::io::Read;
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

struct Tinyproxy {
    _child: Server,
    port: u16,
    log: PathBuf,
}

impl Tinyproxy {
    fn start() -> Result<Tinyproxy, String> {
        let binary = std::env::var_os("TINYPROXY")
            .map(PathBuf::from)
            .or_else(|| {
                let path = std::env::var_os("PATH").unwrap_or_default();
                std::env::split_paths(&path)
                    .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
                    .map(|dir| dir.join("tinyproxy"))
                    .find(|p| p.is_file())
            })
            .ok_or(
                "--proxy needs tinyproxy on the PATH (apt-get install tinyproxy, or set TINYPROXY)",
            )?;
        let dir = target_dir().join("interop-proxy");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = dir.join("tinyproxy.log");
        let _ = std::fs::remove_file(&log);
        // A free port: bound, noted, released (tinyproxy binds it a moment later).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nLogFile \"{}\"\nLogLevel Connect\n\
                 MaxClients 1000\nAllow 127.0.0.1\n",
                log.display()
            ),
        )
        .map_err(|e| format!("{}: {e}", conf.display()))?;
        let child = Command::new(&binary)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut child = Server(child);
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.0.try_wait() {
                return Err(format!(
                    "tinyproxy exited at start ({status}); its log: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if Instant::now() > until {
                return Err(format!(
                    "tinyproxy did not listen on 127.0.0.1:{port} within 10 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "xtask: tinyproxy listening on 127.0.0.1:{port} (log: {})",
            log.display()
        );
        Ok(Tinyproxy {
            _child: child,
            port,
            log,
        })
    }

    fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The targets of the CONNECT requests it logged (`127.0.0.1:50051`).
    fn connect_requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_once("): CONNECT ").map(|(_, rest)| rest))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }
}

/// Creates (once, again when the file changes) a virtualenv with what
/// `interop/peers/grpcio/requirements.txt` lists (grpcio, grpcio-tools, grpcio-health-checking) from PyPI;
/// returns its python.
fn grpcio_venv() -> Result<PathBuf, String> {
    let venv = target_dir().join("grpcio-peer/venv");
    let python = venv.join("bin/python");
    let requirements = root().join("interop/peers/grpcio/requirements.txt");
    let stamp = venv.join(".installed");
    let wanted = std::fs::read_to_string(&requirements)
        .map_err(|e| format!("{}: {e}", requirements.display()))?;
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) && python.exists() {
        return Ok(python);
    }
    eprintln!(
        "xtask: installing {} into {}",
        requirements.display(),
        venv.display()
    );
    let system_python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    run(
        Command::new(&system_python).args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        "pip install -r interop/peers/grpcio/requirements.txt",
    )?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::AdsRequest;

    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"interop/\xff"), "aW50ZXJvcC//");
    }

    #[test]
    fn ads_request_lines_parse() {
        let ack = AdsRequest::parse("ads request: Listener names=svc.test,b version=3 nonce=4")
            .expect("parses");
        assert!(ack.acks("Listener", "svc.test") && ack.acks("Listener", "b"));
        assert!(!ack.acks("Cluster", "svc.test"));
        let first = AdsRequest::parse("ads request: Listener names=svc.test version= nonce=")
            .expect("parses");
        assert!(first.names("svc.test") && !first.acks("Listener", "svc.test"));
        let nack =
            AdsRequest::parse("ads request: Cluster names=c version=1 nonce=2 nack=bad: no type")
                .expect("parses");
        assert!(!nack.acks("Cluster", "c"));
        let none =
            AdsRequest::parse("ads request: Cluster names=- version= nonce=").expect("parses");
        assert!(none.names.is_empty());
        assert_eq!(AdsRequest::parse("listening on 127.0.0.1:1"), None);
    }
}
