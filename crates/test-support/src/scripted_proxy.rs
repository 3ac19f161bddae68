//! An in-process HTTP CONNECT proxy on a loopback port, scripted per test, for what tinyproxy cannot do:
//! every connection's request header is read and recorded, then handed with the connection to the script;
//! and the scripts' building blocks (the request's target, a connection to it, a pipe, a fixed answer).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A scripted proxy: every connection's request header is read and recorded, then handed with the
/// connection to the script.
pub struct ScriptedProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The request headers received, in order, up to and including the blank line.
    pub requests: Arc<Mutex<Vec<String>>>,
    accept: JoinHandle<()>,
}

impl Drop for ScriptedProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ScriptedProxy {
    /// A proxy on a free loopback port.
    pub async fn start<F, Fut>(script: F) -> ScriptedProxy
    where
        F: Fn(TcpStream, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::start_on("127.0.0.1:0", script).await
    }

    /// A proxy on `bind` (`[::1]:0` for an IPv6 one).
    pub async fn start_on<F, Fut>(bind: &str, script: F) -> ScriptedProxy
    where
        F: Fn(TcpStream, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind(bind).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                // Or Nagle holds the scripts' small writes.
                stream.set_nodelay(true).expect("nodelay");
                let Some(head) = read_head(&mut stream).await else {
                    continue;
                };
                seen.lock().push(head.clone());
                tokio::spawn(script(stream, head));
            }
        });
        ScriptedProxy {
            addr,
            requests,
            accept,
        }
    }

    /// Its URI, `http://127.0.0.1:P`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How a status names this proxy.
    pub fn named(&self) -> String {
        format!("proxy http://{}", self.addr)
    }

    /// The first request header it received.
    pub fn first_request(&self) -> String {
        self.requests
            .lock()
            .first()
            .cloned()
            .expect("the proxy received a request")
    }

    /// How many requests it received.
    pub fn count(&self) -> usize {
        self.requests.lock().len()
    }
}

/// Reads a request header, up to its blank line (at most 64 KiB); `None` if the client closed first.
pub async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 << 10 || stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8(head).expect("an ASCII request"))
}

/// The `host:port` of a `CONNECT host:port HTTP/1.1` request.
pub fn connect_target(head: &str) -> String {
    head.strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next())
        .expect("a CONNECT request")
        .to_owned()
}

/// A connection to the request's target.
pub async fn upstream(head: &str) -> TcpStream {
    let upstream = TcpStream::connect(connect_target(head))
        .await
        .expect("the target accepts");
    upstream.set_nodelay(true).expect("nodelay");
    upstream
}

/// Pipes bytes both ways until either side closes.
pub async fn pipe(mut client: TcpStream, mut upstream: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// A script that answers `answer` and closes.
pub fn answers(
    answer: &'static [u8],
) -> impl Fn(TcpStream, String) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync
{
    move |mut stream, _| {
        Box::pin(async move {
            let _ = stream.write_all(answer).await;
            let _ = stream.shutdown().await;
        })
    }
}
