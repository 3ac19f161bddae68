//! One etcd value as the naming convention writes it: the JSON object of etcd ≥ 3.5's `endpoints.Manager`,
//! `{"Addr":"10.0.0.1:50051","Metadata":...}`, and etcd 3.4's `clientv3/naming` (grpc-go ≤ 1.29's
//! `naming.Update`), which adds `"Op"`: 0 (or `null`, as Go reads it) adds the address, 1 deletes it.
//!
//! A value decodes into [`Value`] or a [`ValueError`] that says what is wrong with it; the table decides what
//! a bad value means. `Addr` is an IP literal with its port (`10.0.0.1:50051`, `[::1]:50051`) or a host
//! name with its port (`backend-0.example:50051`), which the I/O side resolves. `Metadata` may be any
//! JSON (an object, a string, `null`): it is kept as compact JSON text, `null` and absent alike being none.
//!
//! Not here: the key (the table checks its prefix), the size bounds (the table's), name resolution.

use std::net::SocketAddr;
use std::sync::Arc;

/// Where an endpoint is, as its `Addr` says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Addr {
    /// An IP literal and a port.
    Socket(SocketAddr),
    /// A host name and a port, to resolve.
    Name {
        /// The host name.
        host: Arc<str>,
        /// The port.
        port: u16,
    },
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Socket(addr) => write!(f, "{addr}"),
            Addr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What a well-formed value asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// The key names an endpoint (no `Op`, or `Op` 0).
    Add {
        /// Its address.
        addr: Addr,
        /// Its `Metadata` as compact JSON text, if any and not `null`.
        metadata: Option<Arc<str>>,
    },
    /// `Op` 1: the key names no endpoint (etcd 3.4's delete update).
    Delete,
}

/// Why a value is not one of the naming convention's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// Not a JSON object.
    #[error("not a JSON object: {0}")]
    NotAnObject(String),
    /// `Op` is neither 0 nor 1.
    #[error("\"Op\" is {0}, neither 0 (add) nor 1 (delete)")]
    BadOp(String),
    /// No string `Addr`.
    #[error("no string \"Addr\"")]
    NoAddr,
    /// `Addr` is not `host:port`.
    #[error("\"Addr\" {0:?} is not host:port")]
    BadAddr(String),
}

/// Decodes one value.
pub(crate) fn decode(value: &[u8]) -> Result<Value, ValueError> {
    let json: serde_json::Value =
        serde_json::from_slice(value).map_err(|e| ValueError::NotAnObject(e.to_string()))?;
    let serde_json::Value::Object(object) = json else {
        return Err(ValueError::NotAnObject(format!("a JSON {}", kind(&json))));
    };
    match object.get("Op") {
        // Go's `encoding/json` leaves `Op` at its zero value (add) for `null`.
        None | Some(serde_json::Value::Null) => {}
        Some(op) => match op.as_u64() {
            Some(0) => {}
            Some(1) => return Ok(Value::Delete),
            _ => return Err(ValueError::BadOp(op.to_string())),
        },
    }
    let addr = object
        .get("Addr")
        .and_then(serde_json::Value::as_str)
        .ok_or(ValueError::NoAddr)?;
    let addr = parse_addr(addr).ok_or_else(|| ValueError::BadAddr(addr.to_owned()))?;
    let metadata = match object.get("Metadata") {
        None | Some(serde_json::Value::Null) => None,
        Some(metadata) => Some(Arc::from(metadata.to_string())),
    };
    Ok(Value::Add { addr, metadata })
}

fn kind(json: &serde_json::Value) -> &'static str {
    match json {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// `host:port`: an IP literal (IPv6 in brackets) or a host name, and a port from 1 to 65535.
fn parse_addr(addr: &str) -> Option<Addr> {
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return (socket.port() != 0).then_some(Addr::Socket(socket));
    }
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    name_ok.then(|| Addr::Name {
        host: host.into(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(s: &str) -> Addr {
        Addr::Socket(s.parse().expect("a socket address"))
    }

    #[test]
    fn decodes_the_35_format() {
        assert_eq!(
            decode(br#"{"Addr":"127.0.0.1:50051","Metadata":null}"#),
            Ok(Value::Add {
                addr: socket("127.0.0.1:50051"),
                metadata: None
            })
        );
        assert_eq!(
            decode(br#"{"Addr":"[::1]:7","Metadata":{"zone":"a","w":2}}"#),
            Ok(Value::Add {
                addr: socket("[::1]:7"),
                metadata: Some(r#"{"w":2,"zone":"a"}"#.into())
            })
        );
        assert_eq!(
            decode(br#"{"Addr":"backend-0.svc.local:443"}"#),
            Ok(Value::Add {
                addr: Addr::Name {
                    host: "backend-0.svc.local".into(),
                    port: 443
                },
                metadata: None
            })
        );
    }

    #[test]
    fn decodes_the_34_format_with_op() {
        assert_eq!(
            decode(br#"{"Op":0,"Addr":"10.0.0.1:1","Metadata":"x"}"#),
            Ok(Value::Add {
                addr: socket("10.0.0.1:1"),
                metadata: Some(r#""x""#.into())
            })
        );
        assert_eq!(
            decode(br#"{"Op":1,"Addr":"10.0.0.1:1"}"#),
            Ok(Value::Delete)
        );
        assert!(matches!(
            decode(br#"{"Op":2,"Addr":"10.0.0.1:1"}"#),
            Err(ValueError::BadOp(_))
        ));
        assert!(matches!(
            decode(br#"{"Op":"0","Addr":"10.0.0.1:1"}"#),
            Err(ValueError::BadOp(_))
        ));
    }

    /// etcd 3.4's writer is Go: `encoding/json` leaves `Op` at its zero value (0, add) for `"Op":null`,
    /// so the etcd project's own decoders read such a value as an add.
    #[test]
    fn op_null_is_an_add_as_in_go() {
        assert_eq!(
            decode(br#"{"Op":null,"Addr":"10.0.0.1:1"}"#),
            Ok(Value::Add {
                addr: socket("10.0.0.1:1"),
                metadata: None
            })
        );
    }

    #[test]
    fn rejects_what_is_not_the_convention() {
        for garbage in [
            &b""[..],
            b"10.0.0.1:50051",
            b"\xff\xfe",
            b"[1,2]",
            b"null",
            br#""127.0.0.1:1""#,
            br#"{"Addr":""}"#,
            br#"{"Addr":5}"#,
            br#"{"addr":"127.0.0.1:1"}"#,
            br#"{"Addr":"127.0.0.1"}"#,
            br#"{"Addr":"127.0.0.1:0"}"#,
            br#"{"Addr":"127.0.0.1:70000"}"#,
            br#"{"Addr":"::1:80"}"#,
            br#"{"Addr":"a b:80"}"#,
            br#"{"Addr":":80"}"#,
        ] {
            assert!(
                decode(garbage).is_err(),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
        }
    }
}
