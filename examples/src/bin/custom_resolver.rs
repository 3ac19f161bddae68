//! A resolver of your own, on the public resolver API only (`grpc_channel::resolver`): `file:///PATH`
//! targets whose endpoints are the `host:port` lines of a file, read again every 200 ms (a stand-in for an
//! in-house registry). The example writes the first backend of `--target=ipv4:A,B` to the file, calls, then
//! adds the second mid-run and calls until it answers too; it exits non-zero if it never does.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use grpc_channel::resolver::{
    Address, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
    ResolverUpdate, UpdateError,
};
use grpc_channel::Channel;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::SimpleRequest;
use tokio::sync::Notify;

/// Builds a [`FileResolver`] for each `file:///PATH` channel.
struct FileResolverBuilder;

/// A running file resolver: stops its task when the channel drops it.
struct FileResolver {
    task: tokio::task::JoinHandle<()>,
    now: std::sync::Arc<Notify>,
}

impl Resolver for FileResolver {
    fn resolve_now(&mut self) {
        // Read the file at once (the channel spaces these out).
        self.now.notify_one();
    }
}

impl Drop for FileResolver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The endpoints of the file's lines; a line that is not `host:port` is skipped.
fn read(path: &PathBuf) -> std::io::Result<Vec<Endpoint>> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .filter_map(|line| line.trim().parse::<SocketAddr>().ok())
        .map(|addr| Endpoint::new(Address::Tcp(addr)))
        .collect())
}

impl ResolverBuilder for FileResolverBuilder {
    fn scheme(&self) -> &str {
        "file"
    }

    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        if target.endpoint().is_empty() {
            return Err(ResolverError::InvalidTarget {
                target: target.as_str().to_owned(),
                reason: "expected file:///PATH".to_owned(),
            });
        }
        let path = PathBuf::from(format!("/{}", target.endpoint()));
        let now = std::sync::Arc::new(Notify::new());
        let wake = now.clone();
        let task = tokio::spawn(async move {
            let mut last = None;
            loop {
                match read(&path) {
                    Ok(endpoints) if Some(&endpoints) != last.as_ref() => {
                        match sink.update(ResolverUpdate::new(endpoints.clone())) {
                            Ok(()) => last = Some(endpoints),
                            Err(UpdateError::Closed) => return,
                            // No endpoints yet, say: try again at the next read.
                            Err(e) => eprintln!("registry: {e}"),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => sink.report_error(format!("cannot read {}: {e}", path.display())),
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    () = wake.notified() => {}
                    () = sink.closed() => return,
                }
            }
        });
        Ok(Box::new(FileResolver { task, now }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two backends: --target=ipv4:A,B (what `cargo xtask examples` gives this example).
    let target = grpc_examples::target();
    let list = target
        .strip_prefix("ipv4:")
        .ok_or("give --target=ipv4:A,B")?;
    let backends: Vec<SocketAddr> = list.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let [first, second] = backends[..] else {
        return Err("give two backends: --target=ipv4:A,B".into());
    };

    let file = std::env::temp_dir().join(format!("grpc-registry-{}.txt", std::process::id()));
    std::fs::write(&file, format!("{first}\n"))?;
    let channel = Channel::builder(format!("file://{}", file.display()))
        .resolver(FileResolverBuilder)
        .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
        .build()?;
    let mut client = TestServiceClient::new(channel.clone());
    let call = || SimpleRequest {
        fill_server_id: true,
        ..Default::default()
    };
    for _ in 0..5 {
        let id = client.unary_call(call()).await?.into_inner().server_id;
        if id != first.to_string() {
            return Err(format!("a call went to {id}, not in the registry").into());
        }
    }
    println!("5 calls to {first}, the only backend registered");

    // A second backend registers.
    std::fs::write(&file, format!("{first}\n{second}\n"))?;
    let mut reached = false;
    for _ in 0..100 {
        let id = client.unary_call(call()).await?.into_inner().server_id;
        if id == second.to_string() {
            reached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    channel.close();
    let _ = std::fs::remove_file(&file);
    if !reached {
        return Err(format!("{second} was registered but never got a call").into());
    }
    println!("{second} registered mid-run and got calls");
    Ok(())
}
