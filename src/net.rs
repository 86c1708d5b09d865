//! Outbound addresses: which ones are internal (this machine, private networks, link-local
//! and other non-public ranges), for the SSRF policy of everything a request can point the
//! server at (webhooks, model provider base URLs).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Addresses not reached by default: this machine, private networks, link-local (cloud
/// metadata services live there), and ranges that are not public unicast.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || v6 == Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0)
        }
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (carrier NAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240 // reserved
}

/// Whether a URL's host is internal as written: an internal IP literal, or `localhost` (and
/// its subdomains). Other names are not resolved here: provider URLs are the operator's, and a
/// name is checked by whoever resolves it.
pub fn names_internal_host(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(ip) => is_internal(ip),
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names_internal_host;

    #[test]
    fn internal_hosts_are_recognised_as_written() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://[::1]:8000",
            "http://169.254.169.254/latest",
            "http://10.0.0.5/v1",
            "http://api.localhost/v1",
        ] {
            assert!(names_internal_host(url), "{url}");
        }
        for url in ["https://api.openai.com/v1", "https://8.8.8.8/", "not a url"] {
            assert!(!names_internal_host(url), "{url}");
        }
    }
}
