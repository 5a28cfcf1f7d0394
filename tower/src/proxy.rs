//! The client address behind trusted proxies: `X-Forwarded-For` and RFC 7239 `Forwarded`,
//! walked from the right.
//!
//! Every proxy appends the address it received the request from, so the entries on the right
//! were written by our own proxies and the leftmost ones by whoever sent the request — possibly
//! the client itself, inventing any address it likes. The only trustworthy answer is therefore
//! the rightmost address that is *not* one of our trusted proxies: start at the peer, and while
//! the current hop is trusted, step one entry to the left.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

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

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static FORWARDED_NAME: HeaderName = FORWARDED;

impl ProxyHeader {
    fn name(self) -> &'static HeaderName {
        match self {
            ProxyHeader::XForwardedFor => &X_FORWARDED_FOR,
            ProxyHeader::Forwarded => &FORWARDED_NAME,
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
    // Header lines from the last (rightmost) to the first, each from its last element. Split
    // as bytes, each element decoded on its own: a byte that is not visible ASCII makes only
    // its element unparseable (which stops the walk when it gets there), not the whole line —
    // a proxy appending to the client's line (`\x80, 203.0.113.7`) would otherwise hand the
    // client the proxy's own key, one more bucket per client.
    for line in headers.get_all(header.name()).iter().rev() {
        let bytes = line.as_bytes();
        match header {
            ProxyHeader::XForwardedFor => {
                // No quoting in X-Forwarded-For: split from the right without allocating.
                for element in rsplit_commas(bytes) {
                    let hop = visible_ascii(element).and_then(parse_node);
                    if let Some(client) = walk.step(hop) {
                        return client;
                    }
                }
            }
            ProxyHeader::Forwarded => {
                for element in rsplit_list(bytes) {
                    let hop = visible_ascii(element)
                        .and_then(|e| forwarded_for(e.trim()))
                        .and_then(|node| parse_node(&node));
                    if let Some(client) = walk.step(hop) {
                        return client;
                    }
                }
            }
        }
    }
    walk.current
}

/// `bytes` as text if every byte is visible ASCII, a space or a tab (what
/// [`HeaderValue::to_str`](http::HeaderValue::to_str) accepts).
fn visible_ascii(bytes: &[u8]) -> Option<&str> {
    if bytes
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// The walk from the peer leftwards: `current` is the nearest hop so far, always trusted.
struct Walk<'a> {
    current: IpAddr,
    trusted: &'a [IpNet],
}

impl Walk<'_> {
    #[inline]
    fn is_trusted(&self) -> bool {
        let ip = canonical(self.current);
        self.trusted.iter().any(|net| match (net, ip) {
            (IpNet::V4(net), IpAddr::V4(ip)) => net.contains(&ip),
            (IpNet::V6(net), IpAddr::V6(ip)) => net.contains(&ip),
            _ => false,
        })
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

/// The comma-separated elements of `text`, last first (a byte loop: the elements are short, so
/// this is several times cheaper than `str::rsplit`'s searcher).
fn rsplit_commas(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = Some(bytes.len());
    std::iter::from_fn(move || {
        let stop = end?;
        let mut start = stop;
        while start > 0 && bytes[start - 1] != b',' {
            start -= 1;
        }
        end = start.checked_sub(1);
        bytes.get(start..stop)
    })
}

/// IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`) as the IPv4 address they carry.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) as the IPv4 network it maps
/// (`10.0.0.0/8`): the walk compares addresses in IPv4 form ([`canonical`]), so a mapped network
/// would never match. A mapped network wider than the mapped
/// range (a prefix below 96) stays as written.
pub(crate) fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        net => net,
    }
}

/// The comma-separated elements of a `Forwarded` line, last first; a comma inside a quoted
/// string does not split.
///
/// Scanned from the right, as the walk reads: the elements on the right were appended by our
/// own proxies, so they are well formed, and they are split correctly whatever the client put
/// on the left of the line. (A left-to-right split lets the client decide: `for=6.6.6.6;x="`,
/// to which a proxy appends `, for=203.0.113.7`, reads as one element whose quoted string
/// swallows the proxy's comma, and the client's `for=` becomes the key.) A quote closes or
/// opens a quoted string unless an odd number of backslashes precede it (`\"` is an escaped
/// backslash before a real quote), which is how a left-to-right reader of a well-formed line
/// sees it too.
fn rsplit_list(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = Some(bytes.len());
    std::iter::from_fn(move || {
        let stop = end?;
        let mut start = stop;
        let mut quoted = false;
        while start > 0 {
            let b = bytes[start - 1];
            if b == b',' && !quoted {
                break;
            }
            if b == b'"' {
                let backslashes = bytes[..start - 1]
                    .iter()
                    .rev()
                    .take_while(|&&c| c == b'\\')
                    .count();
                if backslashes % 2 == 0 {
                    quoted = !quoted;
                }
            }
            start -= 1;
        }
        end = start.checked_sub(1);
        bytes.get(start..stop)
    })
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
/// `[2001:db8::1]`, `[2001:db8::1]:80`, or with an obfuscated port (RFC 7239 §6.3:
/// `192.0.2.1:_abc`, `[2001:db8::1]:_abc`), which hides the port, not the address; an IPv6
/// address may carry a zone ID ([`zoned`]). `None` for anything else (`unknown`, `_hidden`).
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim();
    // Tried only where the forms without a zone fail: they are the common case.
    plain_node(node).or_else(|| zoned(node))
}

/// [`parse_node`] without zone IDs (but for `std`'s numeric one in brackets with a port).
fn plain_node(node: &str) -> Option<IpAddr> {
    if let Some(v4) = dotted_quad(node.as_bytes()) {
        return Some(IpAddr::V4(v4));
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sock) = node.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    // An obfuscated port needs the host written as for a numeric one: IPv4, or IPv6 in
    // brackets (`2001:db8::1:_p` is not an address).
    let host = match node.rsplit_once(':') {
        Some((host, port)) if is_obfuscated_port(port) => {
            if let Ok(v4) = host.parse::<Ipv4Addr>() {
                return Some(IpAddr::V4(v4));
            }
            host
        }
        _ => node,
    };
    let inner = host.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

/// The longest zone ID [`zoned`] accepts. Interface names are at most 15 bytes on Linux and
/// the BSDs, zone indexes 10 digits; this leaves room for percent-encoding them.
const MAX_ZONE: usize = 64;

/// An IPv6 address with a zone ID, written as a proxy that saw a link-local client writes it:
/// `fe80::1%eth0` (Go's `net/http/httputil` in `X-Forwarded-For`), `[fe80::1%eth0]`, with a
/// port (`[fe80::1%eth0]:443`, obfuscated or not), or percent-encoded as in a URI (RFC 6874,
/// `[fe80::1%25eth0]`, in `Forwarded`). The zone names an interface of the proxy, not anything
/// of the client's, so it is dropped: the client is the address, and two link-local clients
/// behind one proxy keep a key each (the proxy's own, for every one of them, if the entry were
/// refused). A zone is 1 to [`MAX_ZONE`] bytes of RFC 3986 unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) and percent-encoded bytes (`%` and two hex digits); anything else,
/// and a zone on an IPv4 address, is not an address.
fn zoned(node: &str) -> Option<IpAddr> {
    let (addr, rest) = node.split_once('%')?;
    let (addr, zone) = match addr.strip_prefix('[') {
        Some(addr) => {
            let (zone, port) = rest.split_once(']')?;
            match port.strip_prefix(':') {
                None if port.is_empty() => {}
                Some(port) if is_port(port) || is_obfuscated_port(port) => {}
                _ => return None,
            }
            (addr, zone)
        }
        None => (addr, rest),
    };
    if !is_zone(zone) {
        return None;
    }
    addr.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

/// A zone ID as [`zoned`] accepts it.
fn is_zone(zone: &str) -> bool {
    let bytes = zone.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_ZONE {
        return false;
    }
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        at += match b {
            b'%' if bytes
                .get(at + 1..at + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
            {
                3
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') => 1,
            _ => return false,
        };
    }
    true
}

/// A numeric port: 1 to 5 digits, at most 65535.
fn is_port(port: &str) -> bool {
    port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
}

/// RFC 7239 `obfport`: `_` and one or more of ALPHA, DIGIT, `.`, `_`, `-`.
fn is_obfuscated_port(port: &str) -> bool {
    port.strip_prefix('_').is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    })
}

/// A plain dotted-quad IPv4 address (`192.0.2.1`; no leading zeros, as `std` requires): the
/// common case of every proxy header, parsed in a few dozen instructions instead of `std`'s
/// general address parser's few hundred. `None` for anything else (which `std` then tries).
fn dotted_quad(text: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut at = 0;
    for (i, octet) in octets.iter_mut().enumerate() {
        if i > 0 {
            if text.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let start = at;
        let mut value: u16 = 0;
        while let Some(&d @ b'0'..=b'9') = text.get(at) {
            if at - start == 3 {
                return None;
            }
            value = value * 10 + u16::from(d - b'0');
            at += 1;
        }
        let digits = at - start;
        if digits == 0 || (digits > 1 && text[start] == b'0') {
            return None;
        }
        *octet = u8::try_from(value).ok()?;
    }
    (at == text.len()).then_some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const XFF: ProxyHeader = ProxyHeader::XForwardedFor;
    const FWD: ProxyHeader = ProxyHeader::Forwarded;

    /// The client seen through `lines` of `name` from `peer`, trusting `trusted`.
    fn walk(mode: ProxyHeader, trusted: &[&str], peer: &str, name: &str, lines: &[&str]) -> IpAddr {
        let trusted: Vec<IpNet> = trusted.iter().map(|s| s.parse().unwrap()).collect();
        let mut map = HeaderMap::new();
        for line in lines {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            map.append(name, HeaderValue::from_str(line).unwrap());
        }
        client_ip(peer.parse().unwrap(), &map, mode, &trusted)
    }

    #[test]
    fn x_forwarded_for_walks_from_the_right() {
        let ten = &["10.0.0.0/8"][..];
        let loopback = &["127.0.0.1/32", "::1/128"][..];
        #[rustfmt::skip]
        let cases: &[(&[&str], &str, &[&str], &str)] = &[
            // an untrusted peer is the client, whatever the header says
            (ten, "9.9.9.9", &["1.1.1.1"], "9.9.9.9"),
            // spoofed leftmost entry, the real client, then two of our proxies (two lines)
            (ten, "10.0.0.1", &["6.6.6.6, 203.0.113.7", "10.0.0.2"], "203.0.113.7"),
            // every hop trusted: the leftmost
            (ten, "10.0.0.1", &["10.1.1.1, 10.2.2.2"], "10.1.1.1"),
            // garbage stops the walk at the last trusted hop
            (ten, "10.0.0.1", &["6.6.6.6, unknown, 10.2.2.2"], "10.2.2.2"),
            (ten, "10.0.0.1", &["6.6.6.6,, 10.2.2.2"], "10.2.2.2"),
            // no header: the proxy itself
            (ten, "10.0.0.1", &[], "10.0.0.1"),
            // ports, brackets, IPv4-mapped peers
            (loopback, "::1", &["[2001:db8::5]:443"], "2001:db8::5"),
            (loopback, "::ffff:127.0.0.1", &["192.0.2.9:8080"], "192.0.2.9"),
            (loopback, "::1", &[" 2001:db8::6 "], "2001:db8::6"),
        ];
        for (trusted, peer, lines, client) in cases {
            let got = walk(XFF, trusted, peer, "x-forwarded-for", lines);
            assert_eq!(got, client.parse::<IpAddr>().unwrap(), "{peer} {lines:?}");
        }
    }

    #[test]
    fn forwarded_rfc7239() {
        let ten = &["10.0.0.0/8"][..];
        let lines = [
            r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https;by="a,b""#,
            "For=10.0.0.9;proto=http",
        ];
        #[rustfmt::skip]
        let cases: &[(&str, &[&str], &str)] = &[
            ("forwarded", &lines, "2001:db8:cafe::17"),
            // an X-Forwarded-For the proxies do not write is ignored in Forwarded mode
            ("x-forwarded-for", &["6.6.6.6"], "10.0.0.1"),
            // obfuscated and unknown nodes, elements without for=, broken quoting: stop
            ("forwarded", &["for=6.6.6.6, for=_hidden, for=10.0.0.5"], "10.0.0.5"),
            ("forwarded", &["proto=http"], "10.0.0.1"),
            ("forwarded", &[r#"for="[2001:db8::1"#], "10.0.0.1"),
            // a client's unbalanced quote on the left cannot swallow what our proxies appended
            ("forwarded", &[r#"for=6.6.6.6;x=", for=203.0.113.7"#], "203.0.113.7"),
            ("forwarded", &[r#"for=6.6.6.6;x="\", for=203.0.113.7, for=10.0.0.3"#], "203.0.113.7"),
            // an address with an obfuscated port (RFC 7239 §6.3 `obfport`) is an address
            ("forwarded", &[r#"for=6.6.6.6, for="203.0.113.7:_a8b2", for=10.0.0.3"#], "203.0.113.7"),
            ("forwarded", &[r#"for=6.6.6.6, for="[2001:db8::9]:_x.y-z_1", for=10.0.0.3"#], "2001:db8::9"),
            ("forwarded", &[r#"for=6.6.6.6, for="10.0.0.4:_p", for=10.0.0.3"#], "6.6.6.6"),
            // an obfuscated port that breaks the grammar is not
            ("forwarded", &[r#"for=6.6.6.6, for="203.0.113.7:_", for=10.0.0.3"#], "10.0.0.3"),
            ("forwarded", &[r#"for=6.6.6.6, for="203.0.113.7:_a b", for=10.0.0.3"#], "10.0.0.3"),
            ("forwarded", &[r#"for=6.6.6.6, for="[2001:db8::9]_x", for=10.0.0.3"#], "10.0.0.3"),
            ("forwarded", &[r#"for=6.6.6.6, for="2001:db8::9:_x", for=10.0.0.3"#], "10.0.0.3"),
            // escaped quotes and commas inside a proxy's quoted strings
            ("forwarded", &[r#"for=6.6.6.6, for="[2001:db8::2]";by="x\",y", for=10.0.0.3"#], "2001:db8::2"),
            ("forwarded", &[r#"for=6.6.6.6, for="[2001:db8::3]";by="a\\", for=10.0.0.3"#], "2001:db8::3"),
        ];
        for (name, lines, client) in cases {
            let got = walk(FWD, ten, "10.0.0.1", name, lines);
            assert_eq!(got, client.parse::<IpAddr>().unwrap(), "{lines:?}");
        }
    }

    /// A zone ID names an interface of the proxy: it is dropped and the address is the client,
    /// in both headers, so each link-local client behind a proxy keeps a key of its own. A
    /// zone that breaks the grammar, or is too long, is no address: the walk stops.
    #[test]
    fn an_ipv6_zone_id_is_dropped_from_the_client_address() {
        let ten = &["10.0.0.0/8"][..];
        let peer = "10.0.0.1";
        let longest = format!("fe80::a%{}", "z".repeat(MAX_ZONE));
        let too_long = format!("fe80::a%{}", "z".repeat(MAX_ZONE + 1));
        #[rustfmt::skip]
        let xff: &[(&str, &str)] = &[
            ("fe80::1%eth0", "fe80::1"),
            ("6.6.6.6, fe80::2%enp3s0", "fe80::2"),
            ("[fe80::3%eth0]:443", "fe80::3"),
            ("[fe80::4%25en0]", "fe80::4"),
            ("[fe80::5%2]:8080", "fe80::5"),
            ("fe80::6%7", "fe80::6"),
            ("fe80::7%br-1a2b.100_x~", "fe80::7"),
            ("fe80::8%25eth%2F0", "fe80::8"),
            ("::ffff:192.0.2.1%eth0", "::ffff:192.0.2.1"),
            (&longest, "fe80::a"),
            // not addresses: the walk stops at the peer
            (&too_long, peer),
            ("fe80::1%", peer),
            ("fe80::1%eth 0", peer),
            ("fe80::1%eth0%zz", peer),
            ("fe80::1%eth0%4", peer),
            ("fe80::1%eth0:80", peer),
            ("fe80::1%eth0]", peer),
            ("[fe80::1%eth0", peer),
            ("[fe80::1%eth0]:", peer),
            ("[fe80::1%eth0]:65536", peer),
            ("[fe80::1%eth0]:+80", peer),
            ("[fe80::1%eth0]x", peer),
            ("[fe80::1%]", peer),
            ("192.0.2.1%eth0", peer),
            ("[192.0.2.1%eth0]:80", peer),
            ("%eth0", peer),
            ("fe80::1%a/b", peer),
        ];
        for (line, client) in xff {
            let got = walk(XFF, ten, peer, "x-forwarded-for", &[line]);
            assert_eq!(got, client.parse::<IpAddr>().unwrap(), "{line:?}");
        }
        #[rustfmt::skip]
        let forwarded: &[(&str, &str)] = &[
            (r#"for="[fe80::1%25eth0]""#, "fe80::1"),
            (r#"for="[fe80::2%25eth0]:4711";proto=https"#, "fe80::2"),
            (r#"for="[fe80::3%eth0]:_hidden""#, "fe80::3"),
            (r#"for=6.6.6.6, for="[fe80::4%25wlan0]", for=10.0.0.3"#, "fe80::4"),
            (r#"for="[fe80::5%25eth0]:_""#, peer),
            (r#"for="[fe80::6%25eth0;x]""#, peer),
        ];
        for (line, client) in forwarded {
            let got = walk(FWD, ten, peer, "forwarded", &[line]);
            assert_eq!(got, client.parse::<IpAddr>().unwrap(), "{line:?}");
        }
        // The trust rules are the address's: a trusted link-local hop is walked past.
        let linked = &["10.0.0.0/8", "fe80::/10"][..];
        let line = "6.6.6.6, 2001:db8::7, fe80::9%eth0";
        let got = walk(XFF, linked, peer, "x-forwarded-for", &[line]);
        assert_eq!(got, "2001:db8::7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn forwarded_elements_split_from_the_right() {
        #[rustfmt::skip]
        let cases: &[(&str, &[&str])] = &[
            ("a, b,c", &["c", "b", "a"]),
            (r#"for="x,y";by=z, for=w"#, &["for=w", r#"for="x,y";by=z"#]),
            (r#"by="q\"uote,", for=w"#, &["for=w", r#"by="q\"uote,""#]),
            (r#"by="back\\", for=w"#, &["for=w", r#"by="back\\""#]),
            (r#"x=", for=w"#, &["for=w", r#"x=""#]),
            ("", &[""]),
            (",", &["", ""]),
        ];
        for (line, elements) in cases {
            let got: Vec<&str> = rsplit_list(line.as_bytes())
                .map(|e| std::str::from_utf8(e).unwrap().trim())
                .collect();
            assert_eq!(&got, elements, "{line}");
        }
    }

    #[test]
    fn dotted_quad_agrees_with_std() {
        let mut inputs: Vec<String> = [
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.",
            "1.2.3.4.5",
            "01.2.3.4",
            "1.2.3.04",
            "1..2.3",
            ".1.2.3",
            "1.2.3.4 ",
            "1000.1.1.1",
            "1.2.3.-4",
            "+1.2.3.4",
            "1.2.3.4:80",
            "",
            "a.b.c.d",
            "192.168.001.1",
            "0.0.0.00",
            "9.99.199.255",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Fixed pseudo-random candidates (the test kit's generator, seed 1): 3 to 5 parts of
        // 0 to 4 digits.
        let mut rng = tollgate_testkit::rng::Rng(1);
        let mut next = move || rng.next();
        for _ in 0..20_000 {
            let parts = 3 + next() % 3;
            let part = |r: u64| {
                let digits = (r % 5) as usize;
                let mut n = (r >> 8) % 10u64.pow(digits as u32);
                if r & 0x80 == 0 {
                    n %= 256; // mostly octets in range
                }
                if digits == 0 {
                    String::new()
                } else {
                    format!("{n:0digits$}")
                }
            };
            let s: Vec<String> = (0..parts).map(|_| part(next())).collect();
            inputs.push(s.join("."));
        }
        let valid = inputs
            .iter()
            .filter(|s| s.parse::<Ipv4Addr>().is_ok())
            .count();
        assert!(
            valid > 200,
            "the walk must reach valid addresses too ({valid})"
        );
        for input in &inputs {
            let ours = dotted_quad(input.as_bytes());
            let std = input.parse::<Ipv4Addr>().ok();
            assert_eq!(ours, std, "{input:?}");
        }
    }

    /// A byte that is not visible ASCII on the client's side of a line our proxy appended to
    /// makes only the client's element unparseable: the proxy's element on its right still names
    /// the client (if the whole line failed, the key would be the proxy's own, one more bucket
    /// for every client).
    #[test]
    fn a_bad_byte_on_the_clients_side_of_a_line_spoils_only_its_element() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer = IpAddr::from([10, 0, 0, 1]);
        let client = IpAddr::from([203, 0, 113, 7]);
        for (header, line) in [
            (ProxyHeader::XForwardedFor, &b"\xff, 203.0.113.7"[..]),
            (ProxyHeader::XForwardedFor, &b"caf\xe9,203.0.113.7"[..]),
            (ProxyHeader::Forwarded, &b"for=\xff, for=203.0.113.7"[..]),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header.name(), http::HeaderValue::from_bytes(line).unwrap());
            assert_eq!(
                client_ip(peer, &headers, header, &trusted),
                client,
                "{line:?}"
            );
        }
        // Reached by the walk, the bad element stops it at the last trusted hop.
        let mut headers = HeaderMap::new();
        let line = http::HeaderValue::from_bytes(b"203.0.113.7, \xff, 10.0.0.2").unwrap();
        headers.insert(ProxyHeader::XForwardedFor.name(), line);
        assert_eq!(
            client_ip(peer, &headers, ProxyHeader::XForwardedFor, &trusted),
            IpAddr::from([10, 0, 0, 2])
        );
    }

    /// A trusted network in IPv4-mapped form matches the IPv4 peers it maps.
    #[test]
    fn a_mapped_network_is_its_ipv4_network() {
        let net: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(canonical_net(net), "10.0.0.0/8".parse::<IpNet>().unwrap());
        let wide: IpNet = "::/64".parse().unwrap();
        assert_eq!(canonical_net(wide), wide);
        let trusted = vec![canonical_net(net)];
        let peer: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            ProxyHeader::XForwardedFor.name(),
            http::HeaderValue::from_static("203.0.113.7"),
        );
        assert_eq!(
            client_ip(peer, &headers, ProxyHeader::XForwardedFor, &trusted),
            IpAddr::from([203, 0, 113, 7])
        );
    }

    #[test]
    fn rsplit_commas_matches_rsplit() {
        for text in ["", ",", "a", "a,b", ",a,,b,", "1.2.3.4, 5.6.7.8"] {
            let ours: Vec<&str> = rsplit_commas(text.as_bytes())
                .map(|e| std::str::from_utf8(e).unwrap())
                .collect();
            let std: Vec<&str> = text.rsplit(',').collect();
            assert_eq!(ours, std, "{text:?}");
        }
    }

    #[test]
    fn non_ascii_header_line_stops_the_walk() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"6.6.6.6, \xff").unwrap(),
        );
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.3"));
        let peer = IpAddr::from([10, 0, 0, 1]);
        assert_eq!(
            client_ip(peer, &h, XFF, &trusted),
            IpAddr::from([10, 0, 0, 3])
        );
    }
}
