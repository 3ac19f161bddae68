//! etcd (Debian's `etcd-server`, `/usr/bin/etcd`), a real etcd as a child process for the etcd resolver's
//! tests: a single member on free loopback ports with a temporary data directory, which a test can kill and
//! start again on the same ports and data; and [`EtcdKv`], the writes the tests make (`Put`,
//! `DeleteRange`, `Compact`) through grpc-channel with hand-written messages.
//!
//! Without an etcd binary (`/usr/bin/etcd`, the `PATH`, or `$ETCD`), [`Etcd::start`] says so and returns
//! `None`, so that tests can skip; with `ETCD_REQUIRED` set (CI sets it, after installing the package) it
//! panics instead.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Request, Status, TlsConfig};

/// A single-member etcd on loopback.
pub struct Etcd {
    child: Option<Child>,
    binary: PathBuf,
    dir: PathBuf,
    /// Its client address (127.0.0.1:PORT).
    pub addr: SocketAddr,
    peer_port: u16,
    /// Serves clients over TLS with this certificate and key (PEM files in `dir`).
    tls: bool,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Etcd {
    /// Starts etcd, or returns `None` after saying why it cannot (see the module docs).
    pub fn start() -> Option<Etcd> {
        Etcd::start_with(None)
    }

    /// Like [`Etcd::start`], serving its clients over TLS with this certificate (`(cert_pem, key_pem)`)
    /// when given.
    pub fn start_with(tls: Option<(&str, &str)>) -> Option<Etcd> {
        let Some(binary) = binary() else {
            assert!(
                std::env::var_os("ETCD_REQUIRED").is_none(),
                "ETCD_REQUIRED is set but there is no etcd (apt-get install etcd-server)"
            );
            eprintln!("SKIPPED: no etcd (apt-get install etcd-server, or set ETCD)");
            return None;
        };
        let dir = std::env::temp_dir().join(format!(
            "grpc-channel-etcd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        if let Some((cert, key)) = tls {
            std::fs::write(dir.join("server.pem"), cert).expect("the certificate file");
            std::fs::write(dir.join("server.key"), key).expect("the key file");
        }
        let mut etcd = Etcd {
            child: None,
            binary,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            peer_port: free_port(),
            tls: tls.is_some(),
        };
        etcd.restart();
        Some(etcd)
    }

    /// The client URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Kills etcd (SIGKILL), as a crash would; its data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again (after [`Etcd::kill`]) on the same ports and data, and waits until it listens.
    pub fn restart(&mut self) {
        self.kill();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("etcd's log file");
        let mut command = Command::new(&self.binary);
        if self.tls {
            command
                .arg(format!(
                    "--cert-file={}",
                    self.dir.join("server.pem").display()
                ))
                .arg(format!(
                    "--key-file={}",
                    self.dir.join("server.key").display()
                ));
        }
        let child = command
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={}", self.url()))
            .arg(format!("--advertise-client-urls={}", self.url()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(self.addr).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("etcd exited at start ({status}); its log: {}", self.log());
            }
            assert!(
                Instant::now() < until,
                "etcd did not listen on {} within 20 s; its log: {}",
                self.addr,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What etcd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

/// `etcdserverpb.PutRequest` (key, value).
#[derive(Clone, PartialEq, prost::Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `etcdserverpb.DeleteRangeRequest` (key, range_end).
#[derive(Clone, PartialEq, prost::Message)]
struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
}

/// `etcdserverpb.CompactionRequest` (revision, physical).
#[derive(Clone, PartialEq, prost::Message)]
struct CompactionRequest {
    #[prost(int64, tag = "1")]
    revision: i64,
    #[prost(bool, tag = "2")]
    physical: bool,
}

/// `etcdserverpb.RequestOp` (its put arm).
#[derive(Clone, PartialEq, prost::Message)]
struct RequestOp {
    #[prost(message, optional, tag = "2")]
    request_put: Option<PutRequest>,
}

/// `etcdserverpb.TxnRequest` (no compares: the success ops always run).
#[derive(Clone, PartialEq, prost::Message)]
struct TxnRequest {
    #[prost(message, repeated, tag = "2")]
    success: Vec<RequestOp>,
}

/// `etcdserverpb.ResponseHeader` (revision).
#[derive(Clone, PartialEq, prost::Message)]
struct ResponseHeader {
    #[prost(int64, tag = "3")]
    revision: i64,
}

/// Any etcd response: its header.
#[derive(Clone, PartialEq, prost::Message)]
struct WithHeader {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
}

/// Writes to etcd through grpc-channel.
#[derive(Clone)]
pub struct EtcdKv {
    channel: Channel,
}

impl EtcdKv {
    /// A client of the etcd at `addr` (plaintext).
    pub fn new(addr: SocketAddr) -> EtcdKv {
        EtcdKv::with_tls(addr, None)
    }

    /// A client of the etcd at `addr`, over TLS with `tls` if given.
    pub fn with_tls(addr: SocketAddr, tls: Option<TlsConfig>) -> EtcdKv {
        let mut builder = Channel::builder(format!("ipv4:{addr}")).service_config_lookup(false);
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        let channel = builder.build().expect("a channel to etcd");
        EtcdKv { channel }
    }

    async fn call<Req: prost::Message>(&self, path: &str, request: Req) -> Result<i64, Status> {
        let request = Request::new(request)
            .with_timeout(Duration::from_secs(10))
            .with_wait_for_ready(true);
        let response: WithHeader = self.channel.unary(path, request).await?.into_inner();
        Ok(response.header.map_or(0, |h| h.revision))
    }

    /// Puts `value` at `key`; returns the new revision.
    pub async fn put(&self, key: &str, value: &str) -> Result<i64, Status> {
        let request = PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        };
        self.call("/etcdserverpb.KV/Put", request).await
    }

    /// Puts the naming convention's value for `addr` at `key` (`{"Addr":...,"Metadata":null}`).
    pub async fn register(&self, key: &str, addr: SocketAddr) -> Result<i64, Status> {
        self.put(key, &format!(r#"{{"Addr":"{addr}","Metadata":null}}"#))
            .await
    }

    /// Deletes `key`; returns the new revision.
    pub async fn delete(&self, key: &str) -> Result<i64, Status> {
        let request = DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            range_end: Vec::new(),
        };
        self.call("/etcdserverpb.KV/DeleteRange", request).await
    }

    /// Puts every `(key, value)` in one Txn (one revision), as etcd's `endpoints.Manager::Update` does;
    /// returns the new revision.
    pub async fn txn_put(&self, kvs: &[(String, String)]) -> Result<i64, Status> {
        let request = TxnRequest {
            success: kvs
                .iter()
                .map(|(k, v)| RequestOp {
                    request_put: Some(PutRequest {
                        key: k.as_bytes().to_vec(),
                        value: v.as_bytes().to_vec(),
                    }),
                })
                .collect(),
        };
        self.call("/etcdserverpb.KV/Txn", request).await
    }

    /// Deletes the keys in `[key, range_end)` (one revision, as `etcdctl del --prefix` does); returns
    /// the new revision.
    pub async fn delete_range(&self, key: &str, range_end: &str) -> Result<i64, Status> {
        let request = DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            range_end: range_end.as_bytes().to_vec(),
        };
        self.call("/etcdserverpb.KV/DeleteRange", request).await
    }

    /// Compacts the history up to `revision` (physically: the watchers behind it are canceled).
    pub async fn compact(&self, revision: i64) -> Result<i64, Status> {
        let request = CompactionRequest {
            revision,
            physical: true,
        };
        self.call("/etcdserverpb.KV/Compact", request).await
    }
}
