//! The Python grpcio (C-core) peer's scripts (`interop/peers/grpcio/`) as child processes of a test: where
//! the Python with grpcio is, and a process whose stdout lines are read as they come, killed (by its
//! process id) when dropped, a panicking test included.
//!
//! The Python comes from `GRPCIO_PYTHON`, else from the virtualenv `cargo xtask interop --peer grpcio`
//! makes in the target directory (`target/grpcio-peer/venv`), found from the running test binary's path.
//! Without either, [`python_or_skip`] says why and returns `None` (the test then passes), unless
//! `GRPCIO_PEER_REQUIRED` is set (CI sets it once the virtualenv exists), when it panics.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A script of the grpcio peer (`interop/peers/grpcio/<name>`).
pub fn script(name: &str) -> PathBuf {
    root().join("interop/peers/grpcio").join(name)
}

/// The interop protos' directory (`proto/`), for the scripts' `--proto_dir`.
pub fn proto_dir() -> PathBuf {
    root().join("proto")
}

/// The Python with grpcio installed, if there is one.
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GRPCIO_PYTHON") {
        return Some(PathBuf::from(p));
    }
    // A test binary is `<target>/<profile>/deps/<name>`.
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?.parent()?;
    let python = target.join("grpcio-peer/venv/bin/python");
    python.exists().then_some(python)
}

/// [`python`], or `None` after saying why the test skips; panics instead when `GRPCIO_PEER_REQUIRED` is set.
pub fn python_or_skip() -> Option<PathBuf> {
    let python = python();
    if python.is_none() {
        assert!(
            std::env::var_os("GRPCIO_PEER_REQUIRED").is_none(),
            "GRPCIO_PEER_REQUIRED is set but there is no grpcio: set GRPCIO_PYTHON or run \
             `cargo xtask interop --peer grpcio` once"
        );
        eprintln!(
            "SKIPPED: no Python with grpcio (set GRPCIO_PYTHON, or run `cargo xtask interop --peer \
             grpcio` once to make target/grpcio-peer/venv)"
        );
    }
    python
}

/// A running peer script: its stdin for commands and its stdout lines, in order.
pub struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    what: String,
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PeerProcess {
    /// Starts `python script args…` with these extra environment variables; its stderr goes to the test's.
    pub fn spawn(
        python: &Path,
        script: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> PeerProcess {
        let mut command = Command::new(python);
        command
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        // Every line, read as it comes, so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        PeerProcess {
            child,
            stdin,
            lines,
            what: script.display().to_string(),
        }
    }

    /// The next line the process prints, within `limit`; panics (naming `why`) without one.
    pub fn next_line(&self, limit: Duration, why: &str) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{}: no line within {limit:?} ({why})", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => panic!(
                "{}: exited before printing a line ({why}); its stderr above says why (a virtualenv \
                 made from an older interop/peers/grpcio/requirements.txt: run `cargo xtask interop \
                 --peer grpcio` once to update it)",
                self.what
            ),
        }
    }

    /// Skips lines until one starts with `prefix`, within `limit`; returns the rest of that line.
    pub fn wait_for(&self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.next_line(left, &format!("waiting for `{prefix}`"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    /// Writes one command line and returns the line that answers it (within `limit`).
    pub fn command(&mut self, line: &str, limit: Duration) -> String {
        let stdin = self.stdin.as_mut().expect("the process's stdin");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: write a command: {e}", self.what));
        self.next_line(limit, &format!("the answer to {line}"))
    }
}
