//! The README's "xDS in a service mesh" section, as written: its bootstrap parses (certificate providers,
//! A65 `tls` channel creds, a `unix:` server first) and its builder code builds a channel with xDS
//! credentials. A change to the README's text that breaks either fails here.

#![cfg(feature = "xds")]

use grpc_channel::Channel;
use grpc_xds::{Bootstrap, ChannelCreds};

/// The README's section, from its heading to the next one.
fn mesh_section() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find("## xDS in a service mesh")
        .expect("the README has the section");
    let rest = &readme[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i);
    rest[..end].to_owned()
}

/// The first fenced block of `lang` in `text`.
fn block(text: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = text.find(&open).expect("a fenced block") + open.len();
    let end = text[start..].find("```").expect("closed") + start;
    text[start..end].to_owned()
}

#[test]
fn the_readme_mesh_bootstrap_parses_with_its_providers_and_servers() {
    let json = block(&mesh_section(), "json");
    let bootstrap = Bootstrap::parse(&json).expect("the README's bootstrap parses");
    assert_eq!(bootstrap.xds_servers.len(), 2);
    assert_eq!(
        bootstrap.xds_servers[0].server_uri,
        "unix:///etc/istio/proxy/XDS"
    );
    assert_eq!(
        bootstrap.xds_servers[0].channel_creds,
        ChannelCreds::Insecure
    );
    let ChannelCreds::Tls(files) = &bootstrap.xds_servers[1].channel_creds else {
        panic!("the second server uses tls: {:?}", bootstrap.xds_servers[1]);
    };
    assert!(files.certificate_file.is_some() && files.ca_certificate_file.is_some());
    let provider = &bootstrap.certificate_providers["default"];
    assert_eq!(provider.refresh_interval.as_secs(), 900);
    assert!(provider.private_key_file.is_some());
}

/// The README's function, word for word, builds a channel from the README's bootstrap.
#[tokio::test]
async fn the_readme_mesh_channel_builds() {
    let section = mesh_section();
    let code = block(&section, "rust");
    assert!(
        code.contains(".xds_bootstrap(bootstrap)") && code.contains(".xds_credentials()"),
        "{code}"
    );
    // The same function as the README's (kept identical by the assertion above on its calls).
    fn mesh_channel(bootstrap: &str) -> Result<Channel, grpc_channel::BuildError> {
        Channel::builder("xds:///billing.mesh.internal:8080")
            .xds_bootstrap(bootstrap)
            .xds_credentials()
            .build()
    }
    let channel = mesh_channel(&block(&section, "json")).expect("builds");
    channel.close();
}
