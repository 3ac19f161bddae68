//! What the process costs: CPU time (all threads, from `/proc/self/task/*/schedstat`, Linux), write
//! system calls from `/proc/self/io`, and the
//! heap (live bytes, allocation count) from a counting global allocator (stats_alloc over the system
//! allocator: a few relaxed atomic adds per allocation, the same for every client measured). The client runs
//! alone in the bench process (servers run in their own processes), so these are the client's.

use std::time::Duration;

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated on the heap and not yet freed.
pub(crate) fn heap_live() -> i64 {
    let s = GLOBAL.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

/// Allocations (and reallocations) so far.
pub(crate) fn allocations() -> u64 {
    let s = GLOBAL.stats();
    (s.allocations + s.reallocations) as u64
}

/// Write system calls of the whole process so far (`syscw` of `/proc/self/io`: write, writev and the like,
/// sockets included); 0 where the file is missing.
pub(crate) fn write_syscalls() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("syscw:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Clock ticks per second of `/proc/self/stat` (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time of the whole process so far: the sum of its threads' time on a CPU from
/// `/proc/self/task/*/schedstat` (nanoseconds; threads that have exited are not counted, which only
/// matters across a measurement for short-lived blocking threads), or user + system time from
/// `/proc/self/stat` (10 ms resolution) where schedstat is missing.
pub(crate) fn cpu_time() -> Duration {
    schedstat_cpu_time().unwrap_or_else(stat_cpu_time)
}

fn schedstat_cpu_time() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread may exit between listing and reading: it then counts nothing.
        let Ok(stat) = std::fs::read_to_string(path) else {
            continue;
        };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

fn stat_cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name is in parentheses and may hold spaces: fields count from after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After ')': state is field 0, utime field 11, stime field 12.
    let total = ticks(11) + ticks(12);
    Duration::from_millis(total * 1000 / TICKS_PER_SECOND)
}
