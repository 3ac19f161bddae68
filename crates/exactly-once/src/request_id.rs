//! The request id, as `proto/exactly_once/request_id.proto` defines it, and the metadata key that carries it.

use bytes::Bytes;
use prost::Message;

/// The binary metadata key of the request id (the value is the serialized [`RequestId`]).
pub const HEADER: &str = "exactly-once-request-id-bin";

/// The length of a client id, in bytes: grpc-channel sends 16 random bytes per channel, and the result
/// tracker refuses any other length (INVALID_ARGUMENT) rather than store what a client chose.
pub const CLIENT_ID_LEN: usize = 16;

/// Identifies one call of one client across its attempts (`grpc_channel.exactly_once.RequestId`).
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct RequestId {
    /// The client: [`CLIENT_ID_LEN`] (16) random bytes, one value per channel.
    #[prost(bytes = "bytes", tag = "1")]
    pub client_id: Bytes,
    /// The call's sequence number, the same on every attempt; unique per client, from 1.
    #[prost(uint64, tag = "2")]
    pub seq_no: u64,
    /// The lowest sequence number of the client's calls still in flight: every lower one has ended.
    #[prost(uint64, tag = "3")]
    pub first_incomplete_seq_no: u64,
    /// The attempt, from 1.
    #[prost(uint32, tag = "4")]
    pub attempt_no: u32,
}

impl RequestId {
    /// The serialized id, the value of [`HEADER`].
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(self.encode_to_vec())
    }

    /// Parses a [`HEADER`] value; `None` if it is not a request id (not the message, or no sequence
    /// number).
    ///
    /// A client id of another length than [`CLIENT_ID_LEN`], an empty one included, still parses: the
    /// tracker then refuses the request with INVALID_ARGUMENT, where a `None` here would let a server run it
    /// untracked.
    pub fn from_bytes(bytes: &[u8]) -> Option<RequestId> {
        let id = RequestId::decode(bytes).ok()?;
        (id.seq_no > 0).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_an_id() {
        let id = RequestId {
            client_id: Bytes::from_static(&[7; 16]),
            seq_no: 42,
            first_incomplete_seq_no: 40,
            attempt_no: 3,
        };
        assert_eq!(RequestId::from_bytes(&id.to_bytes()), Some(id));
        assert_eq!(RequestId::from_bytes(b"\xff"), None);
        assert_eq!(RequestId::from_bytes(&[]), None, "no sequence number");
    }

    /// The hand-written prost type matches the .proto file, field by field.
    #[test]
    fn matches_the_proto_file() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
        let fds = protox::compile(["exactly_once/request_id.proto"], [root]).expect("compiles");
        let file = fds
            .file
            .iter()
            .find(|f| f.name() == "exactly_once/request_id.proto")
            .expect("the file");
        assert_eq!(file.package(), "grpc_channel.exactly_once");
        let message = &file.message_type[0];
        assert_eq!(message.name(), "RequestId");
        let fields: Vec<(&str, i32, i32)> = message
            .field
            .iter()
            .map(|f| (f.name(), f.number(), f.r#type() as i32))
            .collect();
        use prost_types_check::*;
        assert_eq!(
            fields,
            vec![
                ("client_id", 1, BYTES),
                ("seq_no", 2, UINT64),
                ("first_incomplete_seq_no", 3, UINT64),
                ("attempt_no", 4, UINT32),
            ]
        );
    }

    /// `google.protobuf.FieldDescriptorProto.Type` numbers.
    mod prost_types_check {
        pub(super) const UINT64: i32 = 4;
        pub(super) const UINT32: i32 = 13;
        pub(super) const BYTES: i32 = 12;
    }
}
