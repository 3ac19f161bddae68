//! The text of a caught panic, for the errors a panicking policy or picker becomes (`policy.rs`,
//! `picker.rs`), and the guarded drop of what the application wrote (a policy, a picker, a pick guard),
//! whose `Drop` may panic.

use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// Drops `value` with a panic in its `Drop` caught and forgotten: the application's `Drop` never unwinds
/// into the channel's event loop nor into a call. Already unwinding, the drop runs all the same (a second
/// panic then aborts, as Rust does for any panic while panicking).
pub(crate) fn drop_caught<T>(value: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

/// A value dropped with [`drop_caught`]: the application's picker or pick guard, held by the channel's
/// pickers and by calls (a clone holds a clone).
#[derive(Clone)]
pub(crate) struct DropCaught<T>(Option<T>);

impl<T> DropCaught<T> {
    pub(crate) fn new(value: T) -> DropCaught<T> {
        DropCaught(Some(value))
    }
}

impl<T> std::ops::Deref for DropCaught<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Only `drop` takes the value out.
        match &self.0 {
            Some(value) => value,
            None => unreachable!("a DropCaught is read after its drop"),
        }
    }
}

impl<T> Drop for DropCaught<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            drop_caught(value);
        }
    }
}
