//! The message deframer never panics and never hands out more than was pushed, whatever the bytes and
//! however they are split into chunks. The first byte chooses the chunk size, the second the limit.
#![no_main]

use bytes::Bytes;
use grpc_channel::framing::Deframer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (chunk, limit, rest) = match data {
        [c, l, rest @ ..] => (usize::from(*c).max(1), usize::from(*l) * 64, rest),
        _ => return,
    };
    let mut d = Deframer::new(limit);
    let mut out = 0usize;
    for piece in rest.chunks(chunk) {
        d.push(Bytes::copy_from_slice(piece));
        loop {
            match d.next_frame() {
                Ok(Some(frame)) => {
                    assert!(frame.payload.len() <= limit);
                    out += frame.payload.len() + 5;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    assert!(out + d.buffered() <= rest.len());
    let _ = d.finish();
});
