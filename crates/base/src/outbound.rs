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
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| embedded_v4(v6)) {
                return is_internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated, still routed inside)
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || (v6.segments()[0..3] == [0x64, 0xff9b, 1]) // NAT64 for local use
        }
    }
}

/// The IPv4 address an IPv6 one stands for on the way: NAT64's well-known prefix
/// `64:ff9b::/96` (`64:ff9b::7f00:1` is 127.0.0.1 behind the gateway), 6to4 `2002::/16`, and
/// the old IPv4-compatible `::a.b.c.d`. The address is as internal as the IPv4 one.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let octets = v6.octets();
    let last = Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return Some(last);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    // `::` and `::1` are the unspecified and loopback addresses, checked as such.
    if s[0..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
        return Some(last);
    }
    // IPv4-translated `::ffff:0:a.b.c.d` (SIIT).
    if s[0..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(last);
    }
    None
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
        || (a == 192 && b == 88 && ip.octets()[2] == 99) // 6to4 relay anycast (deprecated)
        || a >= 240 // reserved
}

/// A builder for every outgoing HTTP client, with the one TLS provider (ring) installed first:
/// reqwest and rmcp are built without a provider of their own, so both use this one.
pub fn client_builder() -> reqwest::ClientBuilder {
    static TLS: std::sync::Once = std::sync::Once::new();
    TLS.call_once(|| {
        // Err means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

/// A builder for clients whose destinations a request chose (webhooks, MCP servers a run
/// names): no proxy, whatever `HTTP(S)_PROXY` says, since a proxy resolves and connects to the
/// host itself and the checks on the addresses this process resolves would be bypassed.
pub fn guarded_client_builder() -> reqwest::ClientBuilder {
    client_builder().no_proxy()
}

/// A resolver that answers only with public addresses: a client built with it cannot be sent to
/// a loopback, private or link-local service by a host name, even one that resolves differently
/// the next time (DNS rebinding), because the addresses it connects to are the ones checked.
/// IP literals in URLs skip resolution; check those with `names_internal_host` first, and turn
/// redirects off.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !is_internal(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!("'{host}' has no public address").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
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
    use super::{PublicOnly, names_internal_host};
    use reqwest::dns::Resolve;
    use std::str::FromStr;

    #[tokio::test]
    async fn the_public_resolver_never_answers_with_an_internal_address() {
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        let Err(e) = PublicOnly.resolve(name).await else {
            panic!("localhost resolved to a public address");
        };
        assert!(e.to_string().contains("no public address"), "{e}");
    }

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

    #[test]
    fn ipv4_behind_ipv6_prefixes_is_as_internal_as_itself() {
        use super::is_internal;
        for internal in [
            "64:ff9b::7f00:1",    // NAT64 of 127.0.0.1
            "64:ff9b::a9fe:a9fe", // NAT64 of 169.254.169.254
            "64:ff9b::",          // NAT64 of 0.0.0.0
            "64:ff9b:1::8.8.8.8", // local-use NAT64: whatever it maps to
            "2002:7f00:1::",      // 6to4 of 127.0.0.1
            "2002:c0a8:101::1",   // 6to4 of 192.168.1.1
            "::10.0.0.1",         // IPv4-compatible
            "::ffff:127.0.0.1",   // IPv4-mapped
            "::ffff:0:7f00:1",    // IPv4-translated 127.0.0.1
            "::ffff:0:a00:1",     // IPv4-translated 10.0.0.1
            "fec0::1",            // site-local
            "192.88.99.1",        // 6to4 relay anycast
            "2002:c058:6301::",   // 6to4 of the relay anycast
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["64:ff9b::808:808", "2002:808:808::", "2606:4700::1111"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
