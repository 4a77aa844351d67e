//! Machine-wide TCP counters from `/proc/net/netstat` (Linux), read around
//! the blast. A listener whose accept queue is full drops new handshakes,
//! and each of those clients waits a second before it tries again: a blast
//! p99 near one second with overflows counted is an accept queue, not the
//! agent's work (docs/BENCHMARKS.md, "the one-second tail of the blast").

/// Where the kernel keeps the counters of this network namespace.
const NETSTAT: &str = "/proc/net/netstat";

/// `TcpExt: ListenOverflows` now, or `None` where the file cannot be read
/// or does not have it.
pub fn read_listen_overflows() -> Option<u64> {
    std::fs::read_to_string(NETSTAT)
        .ok()
        .as_deref()
        .and_then(listen_overflows)
}

/// The `ListenOverflows` counter in the text of `/proc/net/netstat`.
pub fn listen_overflows(netstat: &str) -> Option<u64> {
    tcp_ext(netstat, "ListenOverflows")
}

/// A `TcpExt` counter: the file gives each group as a line of names and,
/// right after it, a line of values in the same order.
fn tcp_ext(netstat: &str, name: &str) -> Option<u64> {
    let mut lines = netstat.lines().filter(|line| line.starts_with("TcpExt:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let index = names.split_whitespace().skip(1).position(|n| n == name)?;
    values.split_whitespace().skip(1).nth(index)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
TcpExt: SyncookiesSent TW ListenOverflows ListenDrops
TcpExt: 0 78753 1171 1172
IpExt: InNoRoutes ListenOverflows
IpExt: 5 9
";

    #[test]
    fn the_counter_is_read_from_the_tcp_ext_pair() {
        assert_eq!(listen_overflows(SAMPLE), Some(1171));
        assert_eq!(tcp_ext(SAMPLE, "ListenDrops"), Some(1172));
        assert_eq!(tcp_ext(SAMPLE, "SyncookiesSent"), Some(0));
    }

    #[test]
    fn a_missing_counter_or_value_line_is_none() {
        assert_eq!(tcp_ext(SAMPLE, "NoSuchCounter"), None);
        assert_eq!(listen_overflows("TcpExt: ListenOverflows\n"), None);
        assert_eq!(
            listen_overflows("TcpExt: ListenOverflows\nTcpExt: many\n"),
            None
        );
        assert_eq!(listen_overflows(""), None);
    }

    #[test]
    fn this_machine_has_the_counter_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(read_listen_overflows().is_some());
        }
    }
}
