//! The connection under a channel: TCP (with TCP_NODELAY) and an HTTP/2 client handshake with prior knowledge,
//! a task that drives the connection, and reconnection when it dies.
//!
//! Load balancing, connection backoff and connectivity state come with the `lb` crate; until then a channel
//! holds one connection, to the first endpoint that accepts, and makes a new one on the next call after it
//! dies. A failed connection attempt asks the resolver for fresh addresses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use crate::connect::{establish, AbortOnDrop, Established, Http2Settings};
use crate::control::{ActiveCalls, CallGuard};
use crate::keepalive::{self, Keepalive};
use crate::resolution::{Endpoint, Resolution};
use crate::sniff::Seen;
use crate::status::{Code, Status};
use crate::tls::TlsConnector;

#[derive(Clone)]
struct Conn {
    send: SendRequest<Bytes>,
    alive: Arc<AtomicBool>,
    /// What the server sent that h2 does not report (a GOAWAY: the connection takes no new streams).
    seen: Arc<Seen>,
}

/// Backoff between connection attempts of a wait-for-ready call (`doc/connection-backoff.md` numbers; the
/// jittered, per-subchannel version comes with the `lb` crate).
const WAIT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const WAIT_BACKOFF_MAX: Duration = Duration::from_secs(120);

pub(crate) struct Transport {
    settings: Http2Settings,
    /// TLS over the socket, or plaintext.
    tls: Option<TlsConnector>,
    keepalive: Arc<Keepalive>,
    /// The calls in flight (keepalive pings only while there are some, unless permitted without).
    active: Arc<ActiveCalls>,
    current: Mutex<Option<Conn>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Transport {
    pub(crate) fn new(
        settings: Http2Settings,
        tls: Option<TlsConnector>,
        keepalive: Arc<Keepalive>,
    ) -> Transport {
        Transport {
            settings,
            tls,
            keepalive,
            active: ActiveCalls::detached(),
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Registers a call (for keepalive).
    pub(crate) fn call_started(&self) -> CallGuard {
        self.active.call_started()
    }

    /// A handle ready to open one stream. Fails fast with UNAVAILABLE when no connection can be made, unless
    /// `wait_for_ready`, in which case it keeps trying until the caller's deadline (which the caller enforces).
    pub(crate) async fn ready(
        &self,
        resolution: &Resolution,
        wait_for_ready: bool,
    ) -> Result<SendRequest<Bytes>, Status> {
        let mut backoff = WAIT_BACKOFF_INITIAL;
        loop {
            let result = match self.live() {
                // A connection found dead (closed, or refusing streams after a GOAWAY) is marked so:
                // connect anew at once; the call never left the client.
                Some(conn) => match self.try_ready(conn, &[]).await {
                    Err(_) => continue,
                    ready => ready,
                },
                None => {
                    let (endpoints, _) = resolution.wait(wait_for_ready).await?;
                    let result = self.try_ready_with(&endpoints).await;
                    if result.is_err() {
                        resolution.resolve_now();
                    }
                    result
                }
            };
            match result {
                Ok(send) => return Ok(send),
                Err(status) if wait_for_ready && status.code() == Code::Unavailable => {
                    tracing::debug!(%status, ?backoff, "wait-for-ready call waiting for a connection");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.mul_f64(1.6).min(WAIT_BACKOFF_MAX);
                }
                Err(status) => return Err(status),
            }
        }
    }

    async fn try_ready_with(&self, endpoints: &[Endpoint]) -> Result<SendRequest<Bytes>, Status> {
        let conn = self.connection(endpoints).await?;
        self.try_ready(conn, endpoints).await
    }

    /// Waits for a stream slot on `conn`. A connection found dead here has sent nothing of this call: try a
    /// fresh one once (if endpoints are known) before giving up.
    async fn try_ready(
        &self,
        conn: Conn,
        endpoints: &[Endpoint],
    ) -> Result<SendRequest<Bytes>, Status> {
        match conn.send.clone().ready().await {
            Ok(send) => Ok(send),
            Err(e) => {
                // The connection was proven (an answered PING) when it was made: this is a later end.
                conn.alive.store(false, Ordering::Release);
                if endpoints.is_empty() {
                    return Err(Status::from_h2(e));
                }
                let fresh = self.connection(endpoints).await?;
                fresh.send.clone().ready().await.map_err(|e| {
                    fresh.alive.store(false, Ordering::Release);
                    Status::from_h2(e)
                })
            }
        }
    }

    async fn connection(&self, endpoints: &[Endpoint]) -> Result<Conn, Status> {
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let _guard = self.connecting.lock().await;
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let conn = self.connect(endpoints).await?;
        *self.current.lock() = Some(conn.clone());
        Ok(conn)
    }

    fn live(&self) -> Option<Conn> {
        let current = self.current.lock();
        current
            .as_ref()
            // After a GOAWAY the connection only finishes its streams: new calls get a new one.
            .filter(|c| c.alive.load(Ordering::Acquire) && c.seen.goaway().is_none())
            .cloned()
    }

    async fn connect(&self, endpoints: &[Endpoint]) -> Result<Conn, Status> {
        let mut last = None;
        for endpoint in endpoints {
            match self.connect_one(endpoint).await {
                Ok(conn) => return Ok(conn),
                Err(status) => {
                    tracing::debug!(%endpoint, %status, "connection attempt failed");
                    last = Some(status);
                }
            }
        }
        let last = last.unwrap_or_else(|| Status::new(Code::Unavailable, "no addresses"));
        let list: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
        let message = format!(
            "failed to connect to all addresses ({}); last error: {}",
            list.join(", "),
            last.message()
        );
        Err(Status::new(Code::Unavailable, message).with_source(last))
    }

    async fn connect_one(&self, endpoint: &Endpoint) -> Result<Conn, Status> {
        let deadline = crate::saturating_deadline(self.settings.connect_timeout);
        let timed_out = || {
            Status::new(
                Code::Unavailable,
                format!("connecting to {endpoint} timed out"),
            )
        };
        match endpoint {
            Endpoint::Tcp(addr) => {
                let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| Status::from_io(&format!("connect to {addr}"), e))?;
                tcp.set_nodelay(true)
                    .map_err(|e| Status::from_io(&format!("set TCP_NODELAY on {addr}"), e))?;
                self.secure_handshake(tcp, endpoint, deadline).await
            }
            Endpoint::Unix(path) => {
                let unix = tokio::time::timeout_at(deadline, UnixStream::connect(path))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| {
                        Status::from_io(&format!("connect to unix:{}", path.display()), e)
                    })?;
                self.secure_handshake(unix, endpoint, deadline).await
            }
        }
    }

    /// The TLS handshake first when the channel uses TLS, then HTTP/2's (answered PING included), each
    /// bounded by `deadline`; then the task that watches the connection.
    async fn secure_handshake<T>(
        &self,
        io: T,
        endpoint: &Endpoint,
        deadline: Instant,
    ) -> Result<Conn, Status>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let timed_out = |what: &str| {
            Status::new(
                Code::Unavailable,
                format!("{what} with {endpoint} timed out"),
            )
        };
        let peer = endpoint.to_string();
        let established = match &self.tls {
            None => tokio::time::timeout_at(deadline, establish(io, &self.settings, None, &peer))
                .await
                .map_err(|_| timed_out("HTTP/2 handshake"))??,
            Some(tls) => {
                let (io, handshake) = tokio::time::timeout_at(deadline, tls.connect(io))
                    .await
                    .map_err(|_| timed_out("TLS handshake"))??;
                tokio::time::timeout_at(
                    deadline,
                    establish(io, &self.settings, Some(&handshake), &peer),
                )
                .await
                .map_err(|_| timed_out("HTTP/2 handshake"))??
            }
        };
        let Established {
            send,
            driver,
            closed,
            seen,
            ping_pong,
        } = established;
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let (keepalive, active, watched) =
            (self.keepalive.clone(), self.active.clone(), seen.clone());
        tokio::spawn(async move {
            // Ending this task (keepalive) closes the connection.
            let _abort = AbortOnDrop(driver);
            tokio::select! {
                _ = closed => {}
                status = keepalive::run(keepalive.clone(), ping_pong, watched.clone(), || active.in_use()) => {
                    // The peer stopped answering: dropping the connection fails its calls UNAVAILABLE.
                    tracing::info!(%peer, %status, "closing the connection");
                }
                goaway = async {
                    let goaway = watched.goaway_received().await;
                    keepalive.on_goaway(&goaway);
                    std::future::pending::<()>().await
                } => goaway,
            }
            flag.store(false, Ordering::Release);
        });
        tracing::debug!(%endpoint, "connected");
        Ok(Conn { send, alive, seen })
    }
}
