//! The Python grpcio (C-core) interop server, `interop/peers/grpcio/server.py`, as a child process for one
//! test: started on a free loopback port, killed (by its process id) when dropped, a panicking test
//! included.
//!
//! Its Python comes from `GRPCIO_PYTHON`, else from the virtualenv `cargo xtask interop --peer grpcio`
//! makes in the target directory (`target/grpcio-peer/venv`). Without either the tests that need it print
//! why and pass, unless `GRPCIO_PEER_REQUIRED` is set (CI sets it once the virtualenv exists), when they
//! fail.
//!
//! The server serves `grpc.health.v1.Health` (grpcio-health-checking's servicer) unless started without it
//! ([`GrpcioOptions::health`]); [`Grpcio::set_health`] changes a service's status through the server's
//! stdin commands.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A bound on the server's start-up (protoc runs first), not a measurement.
const START_LIMIT: Duration = Duration::from_secs(120);

/// A bound on how long the server takes to acknowledge a command.
const ACK_LIMIT: Duration = Duration::from_secs(10);

/// How to start the server.
#[derive(Clone, Debug)]
pub struct GrpcioOptions {
    /// Serve `grpc.health.v1.Health`, the whole server ("") SERVING (the default); without it `Check` and
    /// `Watch` answer UNIMPLEMENTED (`--health=false`).
    pub health: bool,
}

impl Default for GrpcioOptions {
    fn default() -> Self {
        Self { health: true }
    }
}

/// The running server.
pub struct Grpcio {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its command input.
    stdin: Option<ChildStdin>,
    /// The lines it prints, in order.
    lines: Receiver<String>,
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Grpcio {
    /// Sets `service`'s health status (`SERVING`, `NOT_SERVING`, `SERVICE_UNKNOWN` or `UNKNOWN`; "" is the
    /// whole server) and waits (at most 10 s) for the server to say it did: from then on `Check` answers it
    /// and every `Watch` on `service` has been sent it.
    pub fn set_health(&mut self, service: &str, status: &str) {
        assert!(
            service != "-"
                && !service
                    .chars()
                    .any(|c| c.is_whitespace() || c == '"' || c == '\''),
            "the server's commands take one plain word as a service name, not {service:?}"
        );
        let name = if service.is_empty() { "-" } else { service };
        let stdin = self.stdin.as_mut().expect("the server's stdin");
        writeln!(stdin, "health {name} {status}")
            .and_then(|()| stdin.flush())
            .expect("write a command to the grpcio server");
        let answer = match self.lines.recv_timeout(ACK_LIMIT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("the grpcio server did not acknowledge `health {name} {status}` within {ACK_LIMIT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the grpcio server exited before acknowledging `health {name} {status}`")
            }
        };
        assert_eq!(
            answer, "ok",
            "the grpcio server's answer to `health {name} {status}`"
        );
    }
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with grpcio installed, if there is one.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GRPCIO_PYTHON") {
        return Some(PathBuf::from(p));
    }
    // This test binary is `<target>/<profile>/deps/<name>`.
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?.parent()?;
    let python = target.join("grpcio-peer/venv/bin/python");
    python.exists().then_some(python)
}

/// Starts the server with the default options (the health service on); `None` (after saying why) when
/// there is no grpcio to run it and `GRPCIO_PEER_REQUIRED` is not set.
pub fn start() -> Option<Grpcio> {
    start_with(GrpcioOptions::default())
}

/// Starts the server with `options`; `None` (after saying why) when there is no grpcio to run it and
/// `GRPCIO_PEER_REQUIRED` is not set.
pub fn start_with(options: GrpcioOptions) -> Option<Grpcio> {
    let Some(python) = python() else {
        assert!(
            std::env::var_os("GRPCIO_PEER_REQUIRED").is_none(),
            "GRPCIO_PEER_REQUIRED is set but there is no grpcio: set GRPCIO_PYTHON or run \
             `cargo xtask interop --peer grpcio` once"
        );
        eprintln!(
            "SKIPPED: no Python with grpcio (set GRPCIO_PYTHON, or run `cargo xtask interop --peer \
             grpcio` once to make target/grpcio-peer/venv)"
        );
        return None;
    };
    let mut child = Command::new(&python)
        .arg(root().join("interop/peers/grpcio/server.py"))
        .arg("--port=0")
        .arg(format!("--proto_dir={}", root().join("proto").display()))
        .arg(format!("--health={}", options.health))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = mpsc::channel();
    // Every line, read as it comes, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Killed on drop from here on, a failed start included.
    let mut server = Grpcio {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        stdin,
        lines,
    };
    let deadline = Instant::now() + START_LIMIT;
    let addr = loop {
        match server
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(line) => {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    break addr.trim().to_owned();
                }
            }
            Err(e) => panic!(
                "the grpcio server did not report its port ({e}): if it exited, its stderr above \
                 says why (a virtualenv made from an older interop/peers/grpcio/requirements.txt: run \
                 `cargo xtask interop --peer grpcio` once to update it)"
            ),
        }
    };
    server.addr = addr.parse().expect("host:port");
    Some(server)
}
