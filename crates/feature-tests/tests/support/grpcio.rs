//! The Python grpcio (C-core) interop server, `interop/peers/grpcio/server.py`, as a child process for one
//! test: started on a free loopback port, killed (by its process id) when dropped, a panicking test
//! included.
//!
//! Its Python comes from `GRPCIO_PYTHON`, else from the virtualenv `cargo xtask interop --peer grpcio`
//! makes in the target directory (`target/grpcio-peer/venv`). Without either the tests that need it print
//! why and pass, unless `GRPCIO_PEER_REQUIRED` is set (CI sets it once the virtualenv exists), when they
//! fail.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The running server.
pub struct Grpcio {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// Starts the server; `None` (after saying why) when there is no grpcio to run it and
/// `GRPCIO_PEER_REQUIRED` is not set.
pub fn start() -> Option<Grpcio> {
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
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send(addr.trim().to_owned());
                break;
            }
        }
        // Keep draining, so the server never blocks on a full pipe.
        for _ in lines {}
    });
    // Killed on drop from here on, a failed start included.
    let mut server = Grpcio {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    // A bound on the start-up (protoc runs first), not a measurement.
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the grpcio server reports its port");
    server.addr = addr.parse().expect("host:port");
    Some(server)
}
