//! The request URI of each method a channel calls (`http[s]://authority/package.Service/Method`), checked and
//! built once per method instead of once per call, and shared: a call's URI costs a lookup and a reference
//! count, not a parse, a copy and an allocation, and the call's parts that keep it (what its attempts send,
//! its telemetry) keep a pointer, not an 88-byte `http::Uri` each.
//!
//! The cache is bounded: past [`MAX_METHODS`] distinct paths, further ones are built per call, as before.

use std::collections::HashMap;
use std::sync::Arc;

use http::uri::{Authority, PathAndQuery, Scheme};
use parking_lot::Mutex;

use crate::wire::status::{Code, Status};

/// The most methods whose URIs a channel keeps.
pub(crate) const MAX_METHODS: usize = 1024;

/// The URIs of the methods called so far.
#[derive(Default)]
pub(crate) struct MethodUris {
    uris: Mutex<HashMap<Box<str>, Arc<http::Uri>>>,
}

impl MethodUris {
    /// The URI for `path` on `authority` with `scheme` (always the same scheme and authority for one
    /// cache), or INTERNAL when `path` is not `/package.Service/Method`.
    pub(crate) fn get(
        &self,
        scheme: &Scheme,
        authority: &Authority,
        path: &str,
    ) -> Result<Arc<http::Uri>, Status> {
        if let Some(uri) = self.uris.lock().get(path) {
            return Ok(uri.clone());
        }
        let uri = Arc::new(build(scheme, authority, path)?);
        let mut uris = self.uris.lock();
        if uris.len() < MAX_METHODS {
            uris.insert(path.into(), uri.clone());
        }
        Ok(uri)
    }
}

fn build(scheme: &Scheme, authority: &Authority, path: &str) -> Result<http::Uri, Status> {
    let path_and_query = PathAndQuery::try_from(path)
        .ok()
        .filter(|p| p.query().is_none() && p.path().starts_with('/') && p.path()[1..].contains('/'))
        .ok_or_else(|| {
            Status::new(
                Code::Internal,
                format!("invalid method path {path:?}: expected /package.Service/Method"),
            )
        })?;
    http::Uri::builder()
        .scheme(scheme.clone())
        .authority(authority.clone())
        .path_and_query(path_and_query)
        .build()
        .map_err(|e| Status::new(Code::Internal, format!("invalid request URI: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_once_checks_every_time_and_stays_bounded() {
        let cache = MethodUris::default();
        let authority = Authority::from_static("h:1");
        let a = cache
            .get(&Scheme::HTTP, &authority, "/p.S/M")
            .expect("valid");
        assert_eq!(*a, "http://h:1/p.S/M");
        assert_eq!(
            cache
                .get(&Scheme::HTTP, &authority, "/p.S/M")
                .expect("cached"),
            a
        );
        for bad in ["", "p.S/M", "/p.S", "/p.S/M?q=1", "/p S/M"] {
            let err = cache.get(&Scheme::HTTP, &authority, bad).expect_err(bad);
            assert_eq!(err.code(), Code::Internal, "{bad}");
        }
        for i in 0..MAX_METHODS + 10 {
            let path = format!("/p.S/M{i}");
            assert_eq!(
                cache
                    .get(&Scheme::HTTP, &authority, &path)
                    .expect("valid")
                    .path(),
                path.as_str()
            );
        }
        assert_eq!(cache.uris.lock().len(), MAX_METHODS);
    }
}
