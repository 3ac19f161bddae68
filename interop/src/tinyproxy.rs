//! tinyproxy (the Debian package), a real HTTP CONNECT proxy, as a child process for tests and for
//! `cargo xtask interop --proxy`: started on a free loopback port with a generated config (optionally with
//! Basic authentication), its log read back for the CONNECT requests it received, killed when dropped.
//!
//! Without a `tinyproxy` binary on the `PATH` (or in `TINYPROXY`), [`Tinyproxy::start`] says so and
//! returns `None`, so that tests can skip; with `TINYPROXY_REQUIRED` set (CI sets it, after installing
//! the package) it panics instead.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How tinyproxy runs.
#[derive(Clone, Debug, Default)]
pub struct TinyproxyOptions {
    /// Require `Proxy-Authorization: Basic` with this user and password.
    pub basic_auth: Option<(String, String)>,
}

/// A running tinyproxy.
pub struct Tinyproxy {
    child: Child,
    dir: PathBuf,
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TINYPROXY") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("tinyproxy"))
        .find(|p| p.is_file())
}

impl Tinyproxy {
    /// Starts tinyproxy, or returns `None` after saying why it cannot (see the module docs).
    pub fn start(options: TinyproxyOptions) -> Option<Tinyproxy> {
        let Some(binary) = binary() else {
            assert!(
                std::env::var_os("TINYPROXY_REQUIRED").is_none(),
                "TINYPROXY_REQUIRED is set but there is no tinyproxy (apt-get install tinyproxy)"
            );
            eprintln!(
                "SKIPPED: no tinyproxy on the PATH (apt-get install tinyproxy, or set TINYPROXY)"
            );
            return None;
        };
        let dir = std::env::temp_dir().join(format!(
            "grpc-channel-tinyproxy-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        // A free port: bound, noted, released (tinyproxy binds it a moment later).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.join("tinyproxy.log");
        let mut config = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{}\"\nLogLevel Connect\n\
             MaxClients 200\nAllow 127.0.0.1\n",
            log.display()
        );
        if let Some((user, password)) = &options.basic_auth {
            config.push_str(&format!("BasicAuth {user} {password}\n"));
        }
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(&conf, config).expect("the config");
        let child = Command::new(&binary)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut proxy = Tinyproxy { child, dir, addr };
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                panic!(
                    "tinyproxy exited at start ({status}); its log: {}",
                    proxy.log()
                );
            }
            assert!(
                Instant::now() < until,
                "tinyproxy did not listen on {addr} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(proxy)
    }

    /// The proxy's URI, `http://127.0.0.1:PORT`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What tinyproxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tinyproxy.log")).unwrap_or_default()
    }

    /// The targets of the CONNECT requests it received, in order (`localhost:50051`, `[::1]:5`).
    pub fn connect_requests(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|line| line.split_once("): CONNECT ").map(|(_, rest)| rest))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }
}
