//! The client address behind trusted proxies: `X-Forwarded-For` and RFC 7239 `Forwarded`,
//! walked from the right.
//!
//! Every proxy appends the address it received the request from, so the entries on the right
//! were written by our own proxies and the leftmost ones by whoever sent the request — possibly
//! the client itself, inventing any address it likes. The only trustworthy answer is therefore
//! the rightmost address that is *not* one of our trusted proxies: start at the peer, and while
//! the current hop is trusted, step one entry to the left.

use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName, FORWARDED};
use ipnet::IpNet;

/// Which header the trusted proxies write the client address into.
///
/// Configure the one your proxies set: a header they do not set is passed through from the
/// client unchanged, so reading it would let the client pick its own key.
///
/// ```
/// use tollgate_tower::ProxyHeader;
/// assert_eq!(ProxyHeader::default(), ProxyHeader::XForwardedFor);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the de-facto standard; the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711";proto=https`.
    Forwarded,
}

impl ProxyHeader {
    fn name(self) -> HeaderName {
        match self {
            ProxyHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ProxyHeader::Forwarded => FORWARDED,
        }
    }
}

/// The client address: `peer` if it is not trusted, else the rightmost untrusted hop of
/// `header`. An entry that is not an address (`unknown`, an obfuscated `_name`, garbage) stops
/// the walk at the last trusted hop, which is then the key (it cannot be spoofed; it groups the
/// clients behind that proxy). If every hop is trusted, the leftmost one is the client.
pub(crate) fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    header: ProxyHeader,
    trusted: &[IpNet],
) -> IpAddr {
    let mut walk = Walk {
        current: peer,
        trusted,
    };
    if !walk.is_trusted() {
        return peer;
    }
    let mut elements: Vec<&str> = Vec::new();
    // Header lines from the last (rightmost) to the first, each from its last element.
    for line in headers.get_all(header.name()).iter().rev() {
        let Ok(text) = line.to_str() else {
            return walk.current; // not visible ASCII: unparseable, stops the walk
        };
        match header {
            ProxyHeader::XForwardedFor => {
                // No quoting in X-Forwarded-For: split from the right without allocating.
                for element in text.rsplit(',') {
                    if let Some(client) = walk.step(parse_node(element)) {
                        return client;
                    }
                }
            }
            ProxyHeader::Forwarded => {
                elements.clear();
                split_list(text, &mut elements);
                for element in elements.iter().rev() {
                    let hop = forwarded_for(element).and_then(|node| parse_node(&node));
                    if let Some(client) = walk.step(hop) {
                        return client;
                    }
                }
            }
        }
    }
    walk.current
}

/// The walk from the peer leftwards: `current` is the nearest hop so far, always trusted.
struct Walk<'a> {
    current: IpAddr,
    trusted: &'a [IpNet],
}

impl Walk<'_> {
    fn is_trusted(&self) -> bool {
        let ip = canonical(self.current);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// One hop to the left: `Some(client)` ends the walk (an untrusted address, or an
    /// unparseable entry, which leaves the last trusted hop as the client).
    fn step(&mut self, hop: Option<IpAddr>) -> Option<IpAddr> {
        match hop {
            Some(ip) => {
                self.current = ip;
                (!self.is_trusted()).then_some(ip)
            }
            None => Some(self.current),
        }
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`) as the IPv4 address they carry.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Appends the comma-separated elements of `text` (commas inside quoted strings do not split).
fn split_list<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, b) in text.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(text[start..].trim());
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.1;proto=http`), unquoted.
fn forwarded_for(element: &str) -> Option<String> {
    for pair in split_params(element) {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        let value = value.trim();
        return Some(match value.strip_prefix('"') {
            Some(rest) => {
                let mut out = String::with_capacity(rest.len());
                let mut chars = rest.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => return Some(out),
                        '\\' => out.push(chars.next()?),
                        c => out.push(c),
                    }
                }
                return None; // unterminated quoted string
            }
            None => value.to_owned(),
        });
    }
    None
}

/// The `;`-separated parameters of one element (semicolons inside quotes do not split).
fn split_params(element: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut escaped = false;
    element
        .split(move |c: char| {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                ';' if !quoted => return true,
                _ => {}
            }
            false
        })
        .filter(|p| !p.trim().is_empty())
}

/// An address with or without a port: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:80`. `None` for anything else (`unknown`, `_hidden`).
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim();
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sock) = node.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: &str, lines: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(line).unwrap(),
            );
        }
        map
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        let h = headers("x-forwarded-for", &["1.1.1.1"]);
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(ip("9.9.9.9"), &h, ProxyHeader::XForwardedFor, &t),
            ip("9.9.9.9")
        );
    }

    #[test]
    fn walks_from_the_right_past_trusted_hops() {
        // spoofed leftmost entry, then the real client, then two of our proxies
        let h = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.7", "10.0.0.2"]);
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn all_trusted_gives_the_leftmost_and_garbage_stops_at_the_last_trusted_hop() {
        let t = nets(&["10.0.0.0/8"]);
        let h = headers("x-forwarded-for", &["10.1.1.1, 10.2.2.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("10.1.1.1")
        );
        let h = headers("x-forwarded-for", &["6.6.6.6, unknown, 10.2.2.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("10.2.2.2")
        );
        let h = HeaderMap::new();
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses() {
        let t = nets(&["127.0.0.1/32", "::1/128"]);
        let h = headers("x-forwarded-for", &["[2001:db8::5]:443"]);
        assert_eq!(
            client_ip(ip("::1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("2001:db8::5")
        );
        let h = headers("x-forwarded-for", &["192.0.2.9:8080"]);
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("192.0.2.9")
        );
    }

    #[test]
    fn forwarded_rfc7239() {
        let t = nets(&["10.0.0.0/8"]);
        let h = headers(
            "forwarded",
            &[
                r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https;by="a,b""#,
                "For=10.0.0.9;proto=http",
            ],
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::Forwarded, &t),
            ip("2001:db8:cafe::17")
        );
        // An X-Forwarded-For the proxies do not write is ignored in Forwarded mode.
        let h = headers("x-forwarded-for", &["6.6.6.6"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::Forwarded, &t),
            ip("10.0.0.1")
        );
        // Obfuscated and unknown nodes stop the walk at the trusted hop.
        let h = headers("forwarded", &["for=6.6.6.6, for=_hidden, for=10.0.0.5"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::Forwarded, &t),
            ip("10.0.0.5")
        );
        let h = headers("forwarded", &["proto=http"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::Forwarded, &t),
            ip("10.0.0.1")
        );
        let h = headers("forwarded", &[r#"for="[2001:db8::1"#]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::Forwarded, &t),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn non_ascii_header_line_stops_the_walk() {
        let t = nets(&["10.0.0.0/8"]);
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"6.6.6.6, \xff").unwrap(),
        );
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.3"));
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, ProxyHeader::XForwardedFor, &t),
            ip("10.0.0.3")
        );
    }
}
