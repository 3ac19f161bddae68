//! A real DNS server on loopback for tests: hickory-server with an in-memory zone, serving UDP and TCP on
//! one port. Records can be changed while it runs; a `silent` server binds a UDP port and never answers.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use hickory_server::proto::rr::rdata::{A, AAAA, SOA, TXT};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RrKey};

pub use hickory_server::proto::rr::RecordType;
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use hickory_server::Server;
use tokio::net::{TcpListener, UdpSocket};

/// The zone the test server is authoritative for.
pub const ZONE: &str = "test.";

/// A running DNS server.
pub struct TestDns {
    /// Where it listens (UDP and TCP).
    pub addr: SocketAddr,
    zone: Arc<InMemoryZoneHandler>,
    serial: std::sync::atomic::AtomicU32,
    _server: Server<Catalog>,
}

fn name(n: &str) -> Name {
    let full = if n.ends_with('.') {
        n.to_owned()
    } else {
        format!("{n}.")
    };
    Name::from_str(&full).unwrap_or_else(|_| Name::root())
}

impl TestDns {
    /// Starts a server for the zone `test.` on a free loopback port.
    pub async fn start() -> std::io::Result<TestDns> {
        // UDP and TCP on the same port: the free UDP port may be taken for TCP (other tests run in parallel),
        // so try a few.
        let mut attempt = 0;
        let (udp, tcp, addr) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await?;
            let addr = udp.local_addr()?;
            match TcpListener::bind(addr).await {
                Ok(tcp) => break (udp, tcp, addr),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < 50 => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let origin = name(ZONE);
        let mut zone =
            InMemoryZoneHandler::empty(origin.clone(), ZoneType::Primary, AxfrPolicy::Deny);
        let soa = SOA::new(name("ns.test."), name("admin.test."), 1, 60, 60, 60, 0);
        zone.upsert_mut(Record::from_rdata(origin.clone(), 60, RData::SOA(soa)), 1);
        let zone = Arc::new(zone);
        let mut catalog = Catalog::new();
        catalog.upsert(LowerName::new(&origin), vec![zone.clone()]);
        let mut server = Server::new(catalog);
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 64);
        Ok(TestDns {
            addr,
            zone,
            serial: std::sync::atomic::AtomicU32::new(2),
            _server: server,
        })
    }

    fn next_serial(&self) -> u32 {
        self.serial
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds an A record.
    pub async fn add_a(&self, host: &str, ip: Ipv4Addr) {
        let r = Record::from_rdata(name(host), 0, RData::A(A::from(ip)));
        self.zone.upsert(r, self.next_serial()).await;
    }

    /// Adds an AAAA record.
    pub async fn add_aaaa(&self, host: &str, ip: Ipv6Addr) {
        let r = Record::from_rdata(name(host), 0, RData::AAAA(AAAA::from(ip)));
        self.zone.upsert(r, self.next_serial()).await;
    }

    /// Replaces the TXT records of `host` with one record made of `strings`.
    pub async fn set_txt(&self, host: &str, strings: &[&str]) {
        self.remove(host, RecordType::TXT).await;
        let data: Vec<&[u8]> = strings.iter().map(|s| s.as_bytes()).collect();
        let r = Record::from_rdata(name(host), 0, RData::TXT(TXT::from_bytes(data)));
        self.zone.upsert(r, self.next_serial()).await;
    }

    /// Replaces the TXT record of `_grpc_config.<host>` with `grpc_config=<choices>`, split into strings of
    /// at most 255 bytes as DNS requires.
    pub async fn set_service_config(&self, host: &str, choices_json: &str) {
        let full = format!("grpc_config={choices_json}");
        let chunks: Vec<&str> = full
            .as_bytes()
            .chunks(255)
            .map(|c| std::str::from_utf8(c).unwrap_or(""))
            .collect();
        self.set_txt(&format!("_grpc_config.{host}"), &chunks).await;
    }

    /// Removes the records of one type from a name.
    pub async fn remove(&self, host: &str, rtype: RecordType) {
        let key = RrKey::new(LowerName::new(&name(host)), rtype);
        self.zone.records_mut().await.remove(&key);
    }
}

/// A UDP port that accepts queries and never answers.
pub async fn silent() -> std::io::Result<(UdpSocket, SocketAddr)> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let addr = socket.local_addr()?;
    Ok((socket, addr))
}
