//! The text of a caught panic, for the errors a panicking policy or picker becomes (`policy.rs`,
//! `picker.rs`).

/// The text of a panic's payload (a `&str` or `String` message, else a placeholder).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}
