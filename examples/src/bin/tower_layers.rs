//! tower's layers around a grpc-build client: the generated `TestServiceClient<T>` takes any tower service
//! over the channel, so a `ServiceBuilder` stack (a concurrency limit, a timeout, load shedding) wraps it as
//! it wraps a tonic client. A layer's errors arrive as a `Status`: the timeout's as DEADLINE_EXCEEDED, load
//! shedding's as UNAVAILABLE (`Status::from_error`). The channel's retries, hedging and load balancing run
//! underneath, inside each call a layer lets through.

use std::time::Duration;

use grpc_channel::service::GrpcCall;
use grpc_channel::Channel;
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::SimpleRequest;
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::new(grpc_examples::target())?;

    // At most 2 calls in flight from this client (and its clones), each answered within 5 s; a caller
    // beyond the limit is refused at once (UNAVAILABLE) instead of queuing.
    let service = ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(2)
        .timeout(Duration::from_secs(5))
        // A layer of one's own sees each call's path and metadata.
        .map_request(|call: GrpcCall| {
            println!("calling {} ({:?})", call.path(), call.shape());
            call
        })
        .service(channel);
    let client = TestServiceClient::new(service);

    // Four calls at once, each on a clone of the client (clones share the layers' limit).
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let request = SimpleRequest {
                    response_size: 8 * (i + 1),
                    ..Default::default()
                };
                client.unary_call(request).await
            })
        })
        .collect();
    let mut answered = 0;
    for call in calls {
        let result = call.await?;
        match result {
            Ok(response) => {
                answered += 1;
                let size = response.into_inner().payload.map_or(0, |p| p.body.len());
                println!("answered with {size} bytes");
            }
            // Shed by the limit: retry later, or raise the limit.
            Err(status) => println!("refused: {:?} {}", status.code(), status.message()),
        }
    }
    println!("{answered} of 4 calls answered");
    if answered == 0 {
        return Err("no call was answered".into());
    }

    // The plain client is still `TestServiceClient::new(channel)`: its type parameter defaults to `Channel`.
    let mut plain: TestServiceClient =
        TestServiceClient::new(Channel::new(grpc_examples::target())?);
    plain.unary_call(SimpleRequest::default()).await?;
    println!("the plain client works as before");
    Ok(())
}
