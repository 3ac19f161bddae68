//! [`Endpoint`]: one backend as a resolver names it, one or more [`Address`]es (gRFC A61: a dual-stack host
//! is one endpoint with an IPv4 and an IPv6 address) with [`Attributes`] that resolvers give and load
//! balancing policies read (a weight, a locality, a registry's metadata).
//!
//! An endpoint cannot be empty: it is made from its first address, and a list of addresses becomes one only
//! when it has one ([`Endpoint::from_addresses`]). Attributes are plain values, compared and hashed with
//! the endpoint, so that a policy can tell whether a resolution changed anything. Not here: how a policy
//! uses several addresses of one endpoint (each policy's docs say), the resolvers themselves.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::address::Address;

/// A value of an endpoint's attribute.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttributeValue {
    /// A flag.
    Bool(bool),
    /// A number (a weight, a priority).
    Int(i64),
    /// Text (a locality's name, a registry's metadata as JSON text).
    Str(Arc<str>),
}

impl From<bool> for AttributeValue {
    fn from(v: bool) -> Self {
        AttributeValue::Bool(v)
    }
}

impl From<i64> for AttributeValue {
    fn from(v: i64) -> Self {
        AttributeValue::Int(v)
    }
}

impl From<u32> for AttributeValue {
    fn from(v: u32) -> Self {
        AttributeValue::Int(i64::from(v))
    }
}

impl From<&str> for AttributeValue {
    fn from(v: &str) -> Self {
        AttributeValue::Str(v.into())
    }
}

impl From<String> for AttributeValue {
    fn from(v: String) -> Self {
        AttributeValue::Str(v.into())
    }
}

impl fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Bool(v) => write!(f, "{v}"),
            AttributeValue::Int(v) => write!(f, "{v}"),
            AttributeValue::Str(v) => write!(f, "{v:?}"),
        }
    }
}

/// An endpoint's attributes: named values, in name order. Cheap to clone when empty (the usual case).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attributes(BTreeMap<Arc<str>, AttributeValue>);

impl Attributes {
    /// The well-known name of an endpoint's weight (an `Int`), as weighted policies read it.
    pub const WEIGHT: &'static str = "weight";
    /// The well-known name of an endpoint's locality (a `Str`).
    pub const LOCALITY: &'static str = "locality";

    /// No attributes.
    pub fn new() -> Attributes {
        Attributes::default()
    }

    /// These attributes with `name` set to `value` (replacing an earlier value).
    #[must_use]
    pub fn with(
        mut self,
        name: impl Into<Arc<str>>,
        value: impl Into<AttributeValue>,
    ) -> Attributes {
        self.0.insert(name.into(), value.into());
        self
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&AttributeValue> {
        self.0.get(name)
    }

    /// The value of `name` if it is a number.
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.0.get(name) {
            Some(AttributeValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// The value of `name` if it is text.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(AttributeValue::Str(v)) => Some(v),
            _ => None,
        }
    }

    /// Every attribute, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttributeValue)> {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One backend: one or more addresses, in the order to try them, and its attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    addresses: Vec<Address>,
    attributes: Attributes,
}

impl Endpoint {
    /// An endpoint with one address and no attributes.
    pub fn new(address: Address) -> Endpoint {
        Endpoint {
            addresses: vec![address],
            attributes: Attributes::default(),
        }
    }

    /// An endpoint of these addresses, in order; `None` if there are none.
    pub fn from_addresses(addresses: impl IntoIterator<Item = Address>) -> Option<Endpoint> {
        let addresses: Vec<Address> = addresses.into_iter().collect();
        (!addresses.is_empty()).then(|| Endpoint {
            addresses,
            attributes: Attributes::default(),
        })
    }

    /// This endpoint with another address, tried after the others.
    #[must_use]
    pub fn with_address(mut self, address: Address) -> Endpoint {
        self.addresses.push(address);
        self
    }

    /// This endpoint with these attributes (replacing the ones it had).
    #[must_use]
    pub fn with_attributes(mut self, attributes: Attributes) -> Endpoint {
        self.attributes = attributes;
        self
    }

    /// This endpoint with attribute `name` set to `value`.
    #[must_use]
    pub fn with_attribute(
        mut self,
        name: impl Into<Arc<str>>,
        value: impl Into<AttributeValue>,
    ) -> Endpoint {
        self.attributes = self.attributes.with(name, value);
        self
    }

    /// Its addresses, never empty.
    pub fn addresses(&self) -> &[Address] {
        &self.addresses
    }

    /// Its first address.
    pub fn first_address(&self) -> &Address {
        // Never empty: every constructor gives at least one address.
        &self.addresses[0]
    }

    /// Its attributes.
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }
}

impl From<Address> for Endpoint {
    fn from(address: Address) -> Endpoint {
        Endpoint::new(address)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.addresses.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn tcp(port: u16) -> Address {
        Address::Tcp(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn an_endpoint_is_never_empty_and_keeps_its_order() {
        assert!(Endpoint::from_addresses(Vec::new()).is_none());
        let e = Endpoint::from_addresses([tcp(2), tcp(1)]).expect("two addresses");
        assert_eq!(e.addresses(), &[tcp(2), tcp(1)]);
        assert_eq!(e.first_address(), &tcp(2));
        assert_eq!(e.to_string(), "127.0.0.1:2,127.0.0.1:1");
        let e = Endpoint::new(tcp(1)).with_address(tcp(3));
        assert_eq!(e.addresses(), &[tcp(1), tcp(3)]);
    }

    #[test]
    fn attributes_compare_with_the_endpoint() {
        let a = Endpoint::new(tcp(1)).with_attribute(Attributes::WEIGHT, 3u32);
        let b = Endpoint::new(tcp(1)).with_attribute(Attributes::WEIGHT, 4u32);
        assert_ne!(a, b);
        assert_eq!(a.attributes().int(Attributes::WEIGHT), Some(3));
        assert_eq!(a.attributes().str(Attributes::WEIGHT), None);
        let c = a.clone().with_attribute("zone", "eu-1");
        assert_eq!(c.attributes().str("zone"), Some("eu-1"));
        assert_eq!(
            c.attributes().iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["weight", "zone"]
        );
    }
}
