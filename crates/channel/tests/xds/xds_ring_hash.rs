//! RING_HASH clusters end to end (gRFC A42): a route whose hash policy hashes header `x-user` sends every
//! call of one user to the same backend of a ring_hash cluster of three, different users spread over the
//! backends, and a backend going down moves only its own users (to the next endpoints on the ring).
//! `Channel::ready` reaches READY without a call (a ring connects one endpoint when asked to leave IDLE).
//!
//! Every test is bounded (`support::xds::BOUND` around it); waits for a condition are bounded polling loops.

#![cfg(feature = "xds")]

use grpc_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::interop_server_handle;
use support::xds::{
    bounded, locality, management_server, publish_ring_hash, unary_served_by, xds_channel, CALL,
};

/// The users of the tests.
fn users() -> Vec<String> {
    (0..20).map(|i| format!("user-{i}")).collect()
}

/// One call of `user`, retried (at most 100 times, 20 ms apart) until it succeeds: who answered.
async fn served(channel: &grpc_channel::Channel, user: &str) -> String {
    let mut last = None;
    for _ in 0..100 {
        match unary_served_by(channel, &[("x-user", user)]).await {
            Ok(id) => return id,
            Err(status) => last = Some(status),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no call of {user} succeeded; last status {last:?}");
}

#[tokio::test]
async fn one_user_sticks_to_one_backend_and_users_spread() {
    bounded("ring hash affinity", async {
        let backends = [
            interop_server_handle().await,
            interop_server_handle().await,
            interop_server_handle().await,
        ];
        let server = management_server().await;
        let addrs: Vec<_> = backends.iter().map(|b| b.addr).collect();
        publish_ring_hash(&server, "x-user", "ring", locality(&addrs));
        let channel = xds_channel(&server);
        tokio::time::timeout(CALL, channel.ready())
            .await
            .expect("READY without a call")
            .expect("READY");
        // 30 calls of one user: one backend answers them all (every call, none failing).
        let mut alice = BTreeSet::new();
        for i in 0..30 {
            let id = unary_served_by(&channel, &[("x-user", "alice")]).await;
            alice.insert(id.unwrap_or_else(|s| panic!("alice's call {i} failed: {s:?}")));
        }
        assert_eq!(alice.len(), 1, "alice reached {alice:?}");
        // Twenty users, twice each: each user keeps its backend, and they use more than one.
        let mut by_user = BTreeMap::new();
        for user in users() {
            by_user.insert(user.clone(), served(&channel, &user).await);
        }
        for user in users() {
            assert_eq!(
                served(&channel, &user).await,
                by_user[&user],
                "{user} moved"
            );
        }
        let used: BTreeSet<&String> = by_user.values().collect();
        assert!(used.len() > 1, "every user on one backend: {by_user:?}");
    })
    .await;
}

#[tokio::test]
async fn a_backend_going_down_moves_only_its_users() {
    bounded("ring hash failover", async {
        let mut backends = vec![
            interop_server_handle().await,
            interop_server_handle().await,
            interop_server_handle().await,
        ];
        let server = management_server().await;
        let addrs: Vec<_> = backends.iter().map(|b| b.addr).collect();
        publish_ring_hash(&server, "x-user", "ring", locality(&addrs));
        let channel = xds_channel(&server);
        let mut before = BTreeMap::new();
        for user in users() {
            before.insert(user.clone(), served(&channel, &user).await);
        }
        // Take down the backend of user-0.
        let down = before["user-0"].clone();
        let i = backends
            .iter()
            .position(|b| b.addr.to_string() == down)
            .expect("user-0's backend");
        backends.remove(i).shutdown();
        for user in users() {
            let now = served(&channel, &user).await;
            if before[&user] == down {
                assert_ne!(now, down, "{user} still reaches the stopped backend");
            } else {
                assert_eq!(now, before[&user], "{user} moved though its backend is up");
            }
        }
        // And they stay where they went.
        let mut after = BTreeMap::new();
        for user in users() {
            after.insert(user.clone(), served(&channel, &user).await);
        }
        for user in users() {
            assert_eq!(
                served(&channel, &user).await,
                after[&user],
                "{user} moved again"
            );
        }
    })
    .await;
}
