//! Message size limits: which limit a call runs under in each direction, where it came from, and the
//! RESOURCE_EXHAUSTED statuses that name it.
//!
//! The model is grpc-go's (`getMaxSize`): the application's limit for a call is the call's own (set on the
//! request, or by a generated client's `max_decoding_message_size` / `max_encoding_message_size`), else the
//! channel's (`ChannelBuilder::max_receive_message_size` / `max_send_message_size`); it may be larger than the
//! built-in default, which applies only when neither is set (4 MiB received, 2 GiB − 1 sent). The service
//! config's `maxResponseMessageBytes` / `maxRequestMessageBytes` for the method caps it: with both, the
//! smaller wins; with the service config's alone, it applies.
//!
//! A call through the tower adapter (`ChannelService`) has no built-in receive default: the tonic client
//! decodes and enforces its own `max_decoding_message_size`, so only a limit set on the channel, the call or
//! by the service config applies there. Without one, the adapter still bounds what it buffers before handing
//! a whole message to the tonic client: [`ADAPTER_RECEIVE_BOUND`] (64 MiB), above any limit a tonic client
//! usually sets; a larger message needs a channel limit.
//!
//! Every error names the limit that was hit, its value, and where to change it; for a received message
//! whether it was over as it came or once decompressed, and that it came compressed because the call
//! advertised the encoding.

use grpc_service_config::MethodConfig;

use crate::wire::compression::Encoding;
use crate::wire::status::{Code, Status};

/// The default limit on a received message: 4 MiB.
pub const DEFAULT_MAX_RECEIVE_MESSAGE_SIZE: usize = 4 << 20;
/// The default limit on a sent message: 2 GiB − 1, the most a message prefix can describe portably.
pub const DEFAULT_MAX_SEND_MESSAGE_SIZE: usize = i32::MAX as usize;

/// The largest response message the tower adapter takes when nothing on the channel's side limits it: 64
/// MiB. The adapter hands the tonic client whole messages, so this bounds what it buffers before the tonic
/// client's own `max_decoding_message_size` can refuse one.
pub(crate) const ADAPTER_RECEIVE_BOUND: usize = 64 << 20;

/// Which way a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Request messages, sent.
    Send,
    /// Response messages, received.
    Receive,
}

/// Where a call's limit came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The built-in default: nothing set it.
    Default,
    /// `ChannelBuilder::max_{receive,send}_message_size`.
    Channel,
    /// The call's own option (`Request::with_max_*_message_size`, a generated client's
    /// `max_{decoding,encoding}_message_size`, an interceptor).
    Call,
    /// The service config's `max{Response,Request}MessageBytes` for the method.
    ServiceConfig,
    /// Nothing on the channel's side (a tower adapter call's receive limit when nothing set one: the tonic
    /// client's own limit governs); the bound is [`ADAPTER_RECEIVE_BOUND`], on what the adapter buffers.
    AdapterBound,
}

/// A call's limit in one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The most bytes a message may have.
    pub(crate) bytes: usize,
    pub(crate) source: Source,
    pub(crate) direction: Direction,
}

impl Limit {
    /// A limit of `bytes` set by the call (for code that has no call, such as unit tests).
    #[cfg(test)]
    pub(crate) fn call(direction: Direction, bytes: usize) -> Limit {
        Limit {
            bytes,
            source: Source::Call,
            direction,
        }
    }

    /// The limits of a call: `method` is the method's service config, `channel` the channel's limits
    /// (send, receive), `call` the call's own; `adapter` for a tower adapter call (no built-in receive
    /// default).
    pub(crate) fn effective(
        method: Option<&MethodConfig>,
        channel: (Option<usize>, Option<usize>),
        call: (Option<usize>, Option<usize>),
        adapter: bool,
    ) -> (Limit, Limit) {
        let send = Limit::pick(
            Direction::Send,
            method.and_then(|m| m.max_request_message_bytes),
            channel.0,
            call.0,
            Some(DEFAULT_MAX_SEND_MESSAGE_SIZE),
        );
        let receive = Limit::pick(
            Direction::Receive,
            method.and_then(|m| m.max_response_message_bytes),
            channel.1,
            call.1,
            (!adapter).then_some(DEFAULT_MAX_RECEIVE_MESSAGE_SIZE),
        );
        (send, receive)
    }

    fn pick(
        direction: Direction,
        config: Option<u32>,
        channel: Option<usize>,
        call: Option<usize>,
        default: Option<usize>,
    ) -> Limit {
        let limit = |bytes, source| Limit {
            bytes,
            source,
            direction,
        };
        let api = match (call, channel) {
            (Some(c), _) => Some(limit(c, Source::Call)),
            (None, Some(c)) => Some(limit(c, Source::Channel)),
            (None, None) => None,
        };
        let config = config.map(|c| limit(c as usize, Source::ServiceConfig));
        match (config, api) {
            // Equal: the application's limit is named, as it is the one the application can change.
            (Some(c), Some(a)) if c.bytes < a.bytes => c,
            (_, Some(a)) => a,
            (Some(c), None) => c,
            (None, None) => match default {
                Some(d) => limit(d, Source::Default),
                None => limit(ADAPTER_RECEIVE_BOUND, Source::AdapterBound),
            },
        }
    }

    /// Whether the limit was set by someone (the channel, the call, the service config), not the
    /// built-in default or none.
    pub(crate) fn is_set(&self) -> bool {
        !matches!(self.source, Source::Default | Source::AdapterBound)
    }

    /// What this limit is and how to change it, for error messages.
    fn origin(&self) -> &'static str {
        match (self.direction, self.source) {
            (Direction::Receive, Source::Default) => {
                "the channel's default max_receive_message_size; raise it with \
                 ChannelBuilder::max_receive_message_size, Request::with_max_receive_message_size or a \
                 generated client's max_decoding_message_size"
            }
            (Direction::Receive, Source::Channel) => {
                "the channel's max_receive_message_size, set with ChannelBuilder::max_receive_message_size \
                 (a call's Request::with_max_receive_message_size or a generated client's \
                 max_decoding_message_size replaces it)"
            }
            (Direction::Receive, Source::Call) => {
                "the call's max_receive_message_size, set with Request::with_max_receive_message_size or a \
                 generated client's max_decoding_message_size"
            }
            (Direction::Receive, Source::ServiceConfig) => {
                "the service config's maxResponseMessageBytes for this method, which the client's own \
                 limits cannot raise"
            }
            (Direction::Receive, Source::AdapterBound) => {
                "the tower adapter's bound on what it buffers for a tonic client when the channel sets no \
                 receive limit (the tonic client's max_decoding_message_size applies below it); raise it \
                 with ChannelBuilder::max_receive_message_size"
            }
            (Direction::Send, Source::Default) => {
                "the channel's default max_send_message_size; raise it with \
                 ChannelBuilder::max_send_message_size, Request::with_max_send_message_size or a \
                 generated client's max_encoding_message_size"
            }
            (Direction::Send, Source::Channel) => {
                "the channel's max_send_message_size, set with ChannelBuilder::max_send_message_size (a \
                 call's Request::with_max_send_message_size or a generated client's \
                 max_encoding_message_size replaces it)"
            }
            (Direction::Send, Source::Call) => {
                "the call's max_send_message_size, set with Request::with_max_send_message_size or a \
                 generated client's max_encoding_message_size"
            }
            (Direction::Send, Source::ServiceConfig) => {
                "the service config's maxRequestMessageBytes for this method, which the client's own \
                 limits cannot raise"
            }
            (Direction::Send, Source::AdapterBound) => {
                "the tower adapter's bound; set ChannelBuilder::max_send_message_size"
            }
        }
    }

    fn noun(&self) -> &'static str {
        match self.direction {
            Direction::Send => "request message",
            Direction::Receive => "response message",
        }
    }

    /// A message of `len` bytes as sent (compressed or not) is over the limit.
    pub(crate) fn exceeded(&self, len: usize, compressed: bool) -> Status {
        Status::new(
            Code::ResourceExhausted,
            format!(
                "{}{} larger than the limit ({len} vs. {} bytes: {})",
                if compressed { "compressed " } else { "" },
                self.noun(),
                self.bytes,
                self.origin(),
            ),
        )
    }

    /// A message of `compressed_len` bytes compressed with `encoding` is over the limit once
    /// decompressed. For a received message, `advertised` says it came compressed because the call
    /// advertised the encoding.
    pub(crate) fn exceeded_decompressed(
        &self,
        compressed_len: usize,
        encoding: Encoding,
        advertised: bool,
    ) -> Status {
        let why = if advertised {
            format!(
                "; it came compressed because the call advertised {encoding} in grpc-accept-encoding"
            )
        } else {
            String::new()
        };
        Status::new(
            Code::ResourceExhausted,
            format!(
                "{} larger than the limit once decompressed (more than {} bytes from {compressed_len} \
                 bytes of {encoding}: {}){why}",
                self.noun(),
                self.bytes,
                self.origin(),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(config: Option<u32>, channel: Option<usize>, call: Option<usize>) -> Limit {
        Limit::pick(
            Direction::Receive,
            config,
            channel,
            call,
            Some(DEFAULT_MAX_RECEIVE_MESSAGE_SIZE),
        )
    }

    /// grpc-go's model: the call's limit replaces the channel's (and may raise it); the service config caps
    /// both; the default applies only when nothing is set.
    #[test]
    fn the_call_replaces_the_channel_and_the_service_config_caps() {
        let l = receive(None, None, None);
        assert_eq!((l.bytes, l.source), (4 << 20, Source::Default));
        let l = receive(None, Some(1000), None);
        assert_eq!((l.bytes, l.source), (1000, Source::Channel));
        let l = receive(None, Some(1000), Some(16 << 20));
        assert_eq!((l.bytes, l.source), (16 << 20, Source::Call));
        let l = receive(Some(500), Some(1000), Some(16 << 20));
        assert_eq!((l.bytes, l.source), (500, Source::ServiceConfig));
        let l = receive(Some(8 << 20), None, None);
        assert_eq!((l.bytes, l.source), (8 << 20, Source::ServiceConfig));
        let l = receive(Some(8 << 20), None, Some(100));
        assert_eq!((l.bytes, l.source), (100, Source::Call));
        let l = receive(Some(100), None, Some(100));
        assert_eq!(l.source, Source::Call);
        let adapter = Limit::pick(Direction::Receive, None, None, None, None);
        assert_eq!(
            (adapter.bytes, adapter.source),
            (ADAPTER_RECEIVE_BOUND, Source::AdapterBound)
        );
        assert!(!adapter.is_set() && l.is_set() && !receive(None, None, None).is_set());
    }

    #[test]
    fn errors_name_the_limit_and_where_to_set_it() {
        let status = receive(None, None, None).exceeded(8 << 20, false);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "response message larger than the limit (8388608 vs. 4194304 bytes: the channel's default \
             max_receive_message_size; raise it with ChannelBuilder::max_receive_message_size, \
             Request::with_max_receive_message_size or a generated client's max_decoding_message_size)"
        );
        let status = receive(Some(100), None, None).exceeded_decompressed(50, Encoding::Gzip, true);
        assert!(
            status
                .message()
                .starts_with("response message larger than the limit once decompressed (more than 100 \
                              bytes from 50 bytes of gzip: the service config's maxResponseMessageBytes"),
            "{status:?}"
        );
        assert!(status
            .message()
            .ends_with("advertised gzip in grpc-accept-encoding"));
        let send = Limit::call(Direction::Send, 10).exceeded(11, true);
        assert!(send.message().starts_with(
            "compressed request message larger than the limit (11 vs. 10 bytes: the call's"
        ));
    }
}
