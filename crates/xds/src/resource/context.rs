//! What validating a resource needs to know of the client beyond the resource itself: the bootstrap's
//! certificate provider instance names (gRFC A29: a Cluster naming an instance the bootstrap does not
//! define is NACKed). [`DecodeContext`] is built from the [`Bootstrap`] and passed to
//! [`decode_response_with`](super::decode_response_with); the plain decoders use the empty context, in
//! which every Cluster that names a provider instance is invalid.
//!
//! Not here: the providers themselves (the files are read by grpc-channel).

use std::collections::BTreeSet;

use crate::Bootstrap;

/// What the client's bootstrap tells the resource validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeContext {
    /// The bootstrap's `certificate_providers` instance names.
    pub certificate_providers: BTreeSet<String>,
}

impl DecodeContext {
    /// The context of a client whose bootstrap defines these certificate provider instances.
    pub fn new<I, S>(certificate_providers: I) -> DecodeContext
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        DecodeContext {
            certificate_providers: certificate_providers.into_iter().map(Into::into).collect(),
        }
    }

    /// The context of a client with this bootstrap.
    pub fn from_bootstrap(bootstrap: &Bootstrap) -> DecodeContext {
        DecodeContext::new(bootstrap.certificate_providers.keys().cloned())
    }

    /// Whether the bootstrap defines the certificate provider instance `name`.
    pub fn has_certificate_provider(&self, name: &str) -> bool {
        self.certificate_providers.contains(name)
    }
}

impl From<&Bootstrap> for DecodeContext {
    fn from(bootstrap: &Bootstrap) -> DecodeContext {
        DecodeContext::from_bootstrap(bootstrap)
    }
}
