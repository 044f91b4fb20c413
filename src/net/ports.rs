//! Ports for the nodes soak starts.

/// Where the kernel picks the source ports of outgoing connections
/// (`ip_local_port_range`), inclusive.
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|w| w.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// Ports a node may be given: outside the ephemeral range, so that no
/// outgoing connection on this host (a load generator's, another test's)
/// takes one between soak's choosing it and the node's binding it, and
/// above the well-known services.
fn candidates((low, high): (u16, u16)) -> Vec<std::ops::RangeInclusive<u16>> {
    const FLOOR: u16 = 16384;
    let mut ranges = vec![];
    if low > FLOOR {
        ranges.push(FLOOR..=low - 1);
    }
    if high < u16::MAX {
        ranges.push(high.max(FLOOR - 1) + 1..=u16::MAX);
    }
    ranges
}

/// Free TCP ports on the loopback for one cell's node, distinct, picked at
/// random outside the ephemeral range (see [`candidates`]) and checked free
/// by binding them. A port the kernel handed out with `bind(0)` came from
/// the ephemeral range, and a busy host's outgoing connections took it
/// before the node bound it (the node then failed with "Address already
/// in use"); only a host whose ephemeral range covers every port falls back
/// to that.
pub fn free<const N: usize>() -> std::io::Result<[u16; N]> {
    use rand::Rng;
    let ranges = candidates(ephemeral_range());
    let mut rng = rand::rng();
    let tries = if ranges.is_empty() { 0 } else { 256 };
    let mut ports = [0u16; N];
    for i in 0..N {
        let taken = &ports[..i];
        let mut found = None;
        for _ in 0..tries {
            let range = &ranges[rng.random_range(0..ranges.len())];
            let port = rng.random_range(range.clone());
            if !taken.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                found = Some(port);
                break;
            }
        }
        ports[i] = match found {
            Some(p) => p,
            None => kernel_port(taken)?,
        };
    }
    Ok(ports)
}

/// A free port as the kernel hands them out (from the ephemeral range).
fn kernel_port(taken: &[u16]) -> std::io::Result<u16> {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())?;
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ports_stay_out_of_the_range_outgoing_connections_use() {
        assert_eq!(
            candidates((32768, 60999)),
            vec![16384..=32767, 61000..=65535]
        );
        assert_eq!(candidates((1024, 65535)), vec![]);
        assert_eq!(candidates((40000, 65535)), vec![16384..=39999]);
        assert_eq!(candidates((1024, 50000)), vec![50001..=65535]);
    }

    #[test]
    fn a_cells_ports_are_distinct_free_and_not_ephemeral() {
        let (low, high) = ephemeral_range();
        let ports = free::<16>().unwrap();
        let mut seen = ports.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 16, "{ports:?}");
        for p in ports {
            assert!(!(low..=high).contains(&p), "{p} is in {low}-{high}");
            // Free: the node can bind it.
            std::net::TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }
}
