//! A count of the work the policies do, for the complexity tests (`scale_tests.rs`): every subchannel,
//! endpoint or address-list entry a policy looks at while it handles an event counts one ([`visit`]; a map
//! lookup counts one), and every entry of a picker it builds counts one in a count of its own
//! ([`rebuilt`]), since a new picker is rebuilt whole on every real change. Only test builds count (per
//! thread, so tests running side by side do not mix); elsewhere these functions do nothing.

#[cfg(test)]
use std::cell::Cell;

#[cfg(test)]
thread_local! {
    static VISITS: Cell<u64> = const { Cell::new(0) };
    static REBUILT: Cell<u64> = const { Cell::new(0) };
}

/// `n` entries looked at.
#[inline]
pub(crate) fn visit(n: usize) {
    #[cfg(test)]
    VISITS.with(|v| v.set(v.get() + n as u64));
    #[cfg(not(test))]
    let _ = n;
}

/// `n` entries of a new picker built.
#[inline]
pub(crate) fn rebuilt(n: usize) {
    #[cfg(test)]
    REBUILT.with(|v| v.set(v.get() + n as u64));
    #[cfg(not(test))]
    let _ = n;
}

/// The counts so far on this thread (visits, picker entries built), set back to zero.
#[cfg(test)]
pub(crate) fn take() -> (u64, u64) {
    (
        VISITS.with(|v| v.replace(0)),
        REBUILT.with(|v| v.replace(0)),
    )
}
