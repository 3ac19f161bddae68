//! The DNS resolver (gRFC A2, A10, `doc/naming.md`) on hickory-resolver: A and AAAA records for the
//! addresses and, unless turned off, the TXT record `_grpc_config.<host>` for the service config, queried
//! together. No TXT lookup for `localhost` or IP literals (A10). A [`ResolverTask`] re-resolves when asked, at
//! most once per minimum interval, and (if set) every refresh interval, and retries failures with backoff
//! ([`Schedule`]).
//!
//! This is the one module of the crate that does I/O.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use grpc_retry::Rng;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::system_conf::{parse_resolv_conf, read_system_conf};
use hickory_resolver::{Resolver, TokioResolver};
use tokio::sync::{watch, Notify};

use crate::schedule::{Schedule, DEFAULT_MIN_INTERVAL};
use crate::selection::ConfigResult;
use crate::service_config::{ParseOptions, ServiceConfig};
use crate::txt::{self, ChoiceContext, CLIENT_LANGUAGE};

/// Resolver options: start from [`ResolverOptions::default`] and set what differs (the fields, or the
/// `with_` methods); options added later get their defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResolverOptions {
    /// Look up the `_grpc_config` TXT record (on by default; the application may turn it off).
    pub txt_lookups: bool,
    /// The minimum interval between resolutions (30 s by default, grpc-go's `MinResolutionInterval`,
    /// C-core's `GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS`): a re-resolution request (a connection
    /// failed, a GOAWAY) within it of the last success waits for its end. The channel also spaces the
    /// ResolveNow requests it passes to a registered resolver by it.
    pub min_interval: Duration,
    /// Re-resolve DNS names by themselves this long after each success (`None`, the default: only when
    /// the channel asks, as in every gRPC stack). Never sooner than `min_interval`. For a Kubernetes
    /// headless Service, whose new pods are otherwise seen only when a connection fails.
    pub refresh_interval: Option<Duration>,
    /// How long one DNS query may take before it is retried or fails.
    pub query_timeout: Duration,
    /// How the service config is parsed.
    pub parse: ParseOptions,
    /// The host name matched against `clientHostname`; `None` means the machine's ([`system_hostname`]).
    pub hostname: Option<String>,
    /// The text of a resolv.conf to use instead of `/etc/resolv.conf`: name servers, `search` domains,
    /// `ndots`. With a DNS server in the target (`dns://server/host`) only its search domains and `ndots`
    /// apply, and `/etc/resolv.conf` is not read.
    pub resolv_conf: Option<String>,
    /// The DNS server to ask for names that come without one: the host names of xDS LOGICAL_DNS clusters
    /// (gRFC A37). `None` (the default): the system's name servers (or those of `resolv_conf`). A `dns:`
    /// target names its own server (`dns://server/host`) or uses the system's.
    pub default_server: Option<std::net::SocketAddr>,
}

impl Default for ResolverOptions {
    fn default() -> Self {
        ResolverOptions {
            txt_lookups: true,
            min_interval: DEFAULT_MIN_INTERVAL,
            refresh_interval: None,
            query_timeout: Duration::from_secs(5),
            parse: ParseOptions::default(),
            hostname: None,
            resolv_conf: None,
            default_server: None,
        }
    }
}

impl ResolverOptions {
    /// Looks up the `_grpc_config` TXT record, or not.
    pub fn with_txt_lookups(mut self, on: bool) -> Self {
        self.txt_lookups = on;
        self
    }

    /// The minimum interval between resolutions (see [`ResolverOptions::min_interval`]).
    pub fn with_min_interval(mut self, interval: Duration) -> Self {
        self.min_interval = interval;
        self
    }

    /// Re-resolves DNS names by themselves `interval` after each success, or (`None`, the default) only
    /// when asked (see [`ResolverOptions::refresh_interval`]).
    pub fn with_refresh_interval(mut self, interval: Option<Duration>) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// The DNS server for names that come without one (see [`ResolverOptions::default_server`]).
    pub fn with_default_server(mut self, server: Option<std::net::SocketAddr>) -> Self {
        self.default_server = server;
        self
    }

    /// How long one DNS query may take before it is retried or fails.
    pub fn with_query_timeout(mut self, timeout: Duration) -> Self {
        self.query_timeout = timeout;
        self
    }

    /// How the service config is parsed.
    pub fn with_parse(mut self, parse: ParseOptions) -> Self {
        self.parse = parse;
        self
    }

    /// The host name matched against `clientHostname` instead of the machine's.
    pub fn with_hostname(mut self, hostname: impl Into<String>) -> Self {
        self.hostname = Some(hostname.into());
        self
    }

    /// The text of a resolv.conf to use instead of `/etc/resolv.conf`.
    pub fn with_resolv_conf(mut self, resolv_conf: impl Into<String>) -> Self {
        self.resolv_conf = Some(resolv_conf.into());
        self
    }
}

/// The machine's host name, as gethostname(2) gives it on Linux: the kernel's UTS node name from
/// `/proc/sys/kernel/hostname`, else the first line of `/etc/hostname`. Read from files because the
/// workspace forbids `unsafe` (no libc call), and a dependency is not worth two reads. `None` when neither
/// says anything.
pub fn system_hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
        })
}

/// Why the addresses could not be resolved.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// The DNS query failed.
    #[error("DNS resolution of {host} failed: {source}")]
    Dns {
        /// The host.
        host: String,
        /// hickory's error.
        #[source]
        source: Arc<hickory_resolver::net::NetError>,
    },
    /// The name has no A or AAAA records.
    #[error("DNS resolution of {host} returned no addresses")]
    NoAddresses {
        /// The host.
        host: String,
    },
    /// The resolver could not be set up.
    #[error("cannot set up the DNS resolver: {0}")]
    Setup(String),
}

/// One resolution's result.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// The addresses, in the order DNS gave them.
    pub addresses: Result<Vec<SocketAddr>, ResolveError>,
    /// What the TXT record said.
    pub config: ConfigResult,
}

/// Resolves one host.
pub struct DnsResolver {
    inner: Option<TokioResolver>,
    host: String,
    port: u16,
    txt: bool,
    /// Whether A/AAAA records are looked up (not when a proxy resolves the name).
    addresses: bool,
    options: ResolverOptions,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsResolver")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("txt", &self.txt)
            .finish_non_exhaustive()
    }
}

impl DnsResolver {
    /// A resolver for `host:port`, asking `server` (or the system's resolvers, from /etc/resolv.conf).
    pub fn new(
        host: &str,
        port: u16,
        server: Option<SocketAddr>,
        options: ResolverOptions,
    ) -> Result<DnsResolver, ResolveError> {
        let mut options = options;
        if options.hostname.is_none() && options.txt_lookups {
            // `clientHostname` choices match the machine's name unless the application gives another.
            options.hostname = system_hostname();
        }
        let literal = host.parse::<IpAddr>().is_ok();
        let localhost = host.eq_ignore_ascii_case("localhost");
        let inner = if literal {
            None
        } else {
            let setup = |e: hickory_resolver::net::NetError| ResolveError::Setup(e.to_string());
            let mut builder = match server {
                Some(server) => {
                    let mut ns = NameServerConfig::udp_and_tcp(server.ip());
                    for c in &mut ns.connections {
                        c.port = server.port();
                    }
                    let _: &Vec<ConnectionConfig> = &ns.connections;
                    // The target names its DNS server; search domains come only from a resolv.conf the
                    // application gave.
                    let (search, ndots) = match options.resolv_conf.as_deref() {
                        Some(text) => {
                            let (config, opts) = parse_resolv_conf(text).map_err(setup)?;
                            (config.search().to_vec(), Some(opts.ndots))
                        }
                        None => (Vec::new(), None),
                    };
                    let mut builder = Resolver::builder_with_config(
                        ResolverConfig::from_parts(None, search, vec![ns]),
                        TokioRuntimeProvider::default(),
                    );
                    if let Some(ndots) = ndots {
                        builder.options_mut().ndots = ndots;
                    }
                    builder
                }
                None => {
                    // The system's name servers, search list and ndots (or those of the given resolv.conf).
                    let (config, opts) = match options.resolv_conf.as_deref() {
                        Some(text) => parse_resolv_conf(text),
                        None => read_system_conf(),
                    }
                    .map_err(setup)?;
                    let mut builder =
                        Resolver::builder_with_config(config, TokioRuntimeProvider::default());
                    *builder.options_mut() = opts;
                    builder
                }
            };
            let opts: &mut ResolverOpts = builder.options_mut();
            opts.timeout = options.query_timeout;
            opts.attempts = 1;
            // gRPC asks again when it needs to; hickory's cache would hide record changes (and the tests'
            // updated records) behind TTLs.
            opts.cache_size = 0;
            Some(
                builder
                    .build()
                    .map_err(|e| ResolveError::Setup(e.to_string()))?,
            )
        };
        Ok(DnsResolver {
            inner,
            host: host.to_owned(),
            port,
            txt: options.txt_lookups && !literal && !localhost,
            addresses: true,
            options,
        })
    }

    /// Looks up no addresses, only the service config: an HTTP CONNECT proxy resolves the name (gRFC A1).
    /// Each resolution's addresses are then `Ok` and empty.
    pub fn without_address_lookups(mut self) -> DnsResolver {
        self.addresses = false;
        self
    }

    /// Resolves once: addresses and (if enabled) the service config, queried together.
    pub async fn resolve(&self, rng: &mut dyn Rng) -> Resolution {
        let Some(inner) = &self.inner else {
            // An IP literal resolves to itself, with no DNS and no service config lookup (A10).
            let addresses = self
                .host
                .parse::<IpAddr>()
                .map(|ip| vec![SocketAddr::new(ip, self.port)])
                .map_err(|_| ResolveError::NoAddresses {
                    host: self.host.clone(),
                });
            return Resolution {
                addresses,
                config: ConfigResult::None,
            };
        };
        // Relative names go through the search list (resolv.conf `search`, `ndots`), as getaddrinfo and
        // grpc-go's net.LookupHost / LookupTXT do; a name ending in '.' is absolute.
        let txt_name = format!("_grpc_config.{}", self.host);
        let ips = async {
            if self.addresses {
                Some(inner.lookup_ip(self.host.as_str()).await)
            } else {
                None
            }
        };
        let txt = async {
            if self.txt {
                Some(inner.txt_lookup(txt_name.as_str()).await)
            } else {
                None
            }
        };
        let (ips, txt) = tokio::join!(ips, txt);
        let addresses = match ips {
            None => Ok(Vec::new()),
            Some(Ok(lookup)) => {
                let list: Vec<SocketAddr> = lookup
                    .iter()
                    .map(|ip| SocketAddr::new(ip, self.port))
                    .collect();
                if list.is_empty() {
                    Err(ResolveError::NoAddresses {
                        host: self.host.clone(),
                    })
                } else {
                    Ok(list)
                }
            }
            Some(Err(e)) if e.is_no_records_found() => Err(ResolveError::NoAddresses {
                host: self.host.clone(),
            }),
            Some(Err(e)) => Err(ResolveError::Dns {
                host: self.host.clone(),
                source: Arc::new(e),
            }),
        };
        let config = match txt {
            None => ConfigResult::None,
            Some(Err(e)) if e.is_no_records_found() => ConfigResult::None,
            Some(Err(e)) => {
                ConfigResult::LookupFailed(format!("TXT lookup of {txt_name} failed: {e}"))
            }
            Some(Ok(lookup)) => {
                let records: Vec<Vec<Vec<u8>>> = lookup
                    .answers()
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::TXT(t) => Some(t.txt_data.iter().map(|s| s.to_vec()).collect()),
                        _ => None,
                    })
                    .collect();
                let mut ctx = ChoiceContext {
                    language: CLIENT_LANGUAGE,
                    hostname: self.options.hostname.as_deref(),
                    rng,
                };
                match txt::select(&records, &mut ctx, self.options.parse.clone()) {
                    Ok(Some(config)) => ConfigResult::Config(Arc::new(config)),
                    Ok(None) => ConfigResult::None,
                    Err(e) => ConfigResult::Invalid(e),
                }
            }
        };
        Resolution { addresses, config }
    }
}

/// A running resolver: the latest resolution, and a way to ask for a new one.
#[derive(Clone, Debug)]
pub struct ResolverHandle {
    updates: watch::Receiver<Option<Arc<Resolution>>>,
    resolve_now: Arc<Notify>,
}

impl ResolverHandle {
    /// Asks for a new resolution (honouring the minimum interval).
    pub fn resolve_now(&self) {
        self.resolve_now.notify_one();
    }

    /// A receiver of resolutions.
    pub fn updates(&self) -> watch::Receiver<Option<Arc<Resolution>>> {
        self.updates.clone()
    }
}

/// The consumer's verdict on each resolution, called in the resolver task right after it: `false` means the
/// channel could not use it (A21: the first service config is invalid and there is no default), and the
/// resolver then retries with backoff as it does after a DNS failure. This is grpc-go's contract, where
/// `ClientConn.UpdateState` returns `ErrBadResolverState` and the DNS resolver backs off.
pub type Accept = Box<dyn FnMut(&Resolution) -> bool + Send>;

/// Drives a [`DnsResolver`] on a [`Schedule`].
pub struct ResolverTask;

impl ResolverTask {
    /// Spawns the resolver loop on the current tokio runtime. It stops when every handle is dropped. Every
    /// resolution whose addresses resolved counts as a success.
    pub fn spawn(resolver: DnsResolver, rng: Box<dyn Rng>) -> ResolverHandle {
        ResolverTask::spawn_with(resolver, rng, Box::new(|_| true))
    }

    /// Spawns the resolver loop with a consumer that judges each resolution before it is published
    /// ([`Accept`]): a rejected one is retried with backoff (1 s × 1.6 up to 120 s), like a failed one.
    pub fn spawn_with(
        resolver: DnsResolver,
        mut rng: Box<dyn Rng>,
        mut accept: Accept,
    ) -> ResolverHandle {
        let (tx, rx) = watch::channel(None);
        let notify = Arc::new(Notify::new());
        let resolve_now = notify.clone();
        let min_interval = resolver.options.min_interval;
        let refresh = resolver.options.refresh_interval;
        tokio::spawn(async move {
            let mut schedule = Schedule::new(min_interval).with_refresh(refresh);
            loop {
                let now = tokio::time::Instant::now();
                match schedule.next(now.into_std()) {
                    Some(at) if at > now.into_std() => {
                        tokio::select! {
                            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                            () = notify.notified() => { schedule.resolve_now(); continue; }
                            () = tx.closed() => return,
                        }
                    }
                    Some(_) => {}
                    None => {
                        tokio::select! {
                            () = notify.notified() => { schedule.resolve_now(); continue; }
                            () = tx.closed() => return,
                        }
                    }
                }
                let started = tokio::time::Instant::now().into_std();
                let resolution = resolver.resolve(rng.as_mut()).await;
                let accepted = accept(&resolution);
                match &resolution.addresses {
                    Ok(_) if accepted => schedule.succeeded(started),
                    Ok(_) => {
                        let wait =
                            schedule.failed(tokio::time::Instant::now().into_std(), rng.as_mut());
                        tracing::debug!(
                            ?wait,
                            "the channel rejected the resolution; retrying after backoff"
                        );
                    }
                    Err(e) => {
                        let wait =
                            schedule.failed(tokio::time::Instant::now().into_std(), rng.as_mut());
                        tracing::debug!(error = %e, ?wait, "resolution failed; retrying after backoff");
                    }
                }
                if tx.send(Some(Arc::new(resolution))).is_err() {
                    return;
                }
            }
        });
        ResolverHandle {
            updates: rx,
            resolve_now,
        }
    }
}

/// Parses a default service config given by the application.
pub fn parse_default(
    json: &str,
    options: ParseOptions,
) -> Result<ServiceConfig, crate::ParseError> {
    ServiceConfig::parse(json, options)
}
