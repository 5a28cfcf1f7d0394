//! Generated hostile header sets against `ClientIp`, compared with the rule tower/README.md
//! documents ("Spoofing warning"), and against `HeaderKey` (its "No key" rule): a peer that is
//! not a trusted proxy is the client whatever it sends; behind a trusted peer the proxy header
//! is walked from the right, trusted hops are skipped, the first untrusted address is the
//! client, an entry that is not an address stops the walk at the last trusted hop, and if
//! every hop is trusted the leftmost one is the key.
//! Keys are grouped (IPv4 per address, IPv6 per /64, IPv4-mapped as IPv4).
//!
//! Every case is built from hops whose meaning is known by construction (an address in some
//! spelling, or an entry that is not an address), so the expected key comes from the rule, not
//! from a second parser. The client's own part of a header is arbitrary bytes (unbalanced
//! quotes, backslashes, bytes that are not ASCII, megabytes) wherever the walk cannot reach it,
//! and known hops where it can. A key header's lines are a client's part and a gateway's key,
//! sent as lines of their own or merged by a proxy into one comma-separated line. Fixed seed,
//! bounded count: a few seconds in a debug build.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::{HeaderName, HeaderValue, Request};
use ipnet::IpNet;
use tollgate_testkit::rng::Rng;
use tollgate_tower::{ClientIp, HeaderKey, KeyExtractor, ProxyHeader};

const CASES: usize = 4_000;

/// The trusted networks as the extractor is configured (one in IPv4-mapped form), and the
/// same networks as the model checks them (IPv4 form).
const TRUSTED: [&str; 6] = [
    "10.0.0.0/8",
    "192.168.0.0/16",
    "::ffff:172.16.0.0/108",
    "127.0.0.1/32",
    "fd00::/8",
    "::1/128",
];
const TRUSTED_V4_FORM: [&str; 6] = [
    "10.0.0.0/8",
    "192.168.0.0/16",
    "172.16.0.0/12",
    "127.0.0.1/32",
    "fd00::/8",
    "::1/128",
];

/// One hop as a proxy wrote it: an address, or an entry that is not one.
#[derive(Clone, Debug)]
enum Hop {
    Addr(IpAddr),
    NotAnAddress,
}

struct Gen {
    rng: Rng,
    trusted: Vec<IpNet>,
}

impl Gen {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    /// The model's trust test: IPv4-mapped addresses compared in IPv4 form.
    fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = v4_form(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    fn trusted_ip(&mut self) -> IpAddr {
        let r = self.rng.next();
        match self.rng.below(6) {
            0 => IpAddr::from([10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8]),
            1 => IpAddr::from([192, 168, (r >> 8) as u8, (r >> 16) as u8]),
            2 => IpAddr::from([172, 16 | ((r >> 8) as u8 & 15), (r >> 16) as u8, r as u8]),
            3 => IpAddr::from([127, 0, 0, 1]),
            4 => IpAddr::V6(Ipv6Addr::from((0xfd_u128 << 120) | u128::from(r))),
            _ => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    fn untrusted_ip(&mut self) -> IpAddr {
        loop {
            let r = self.rng.next();
            let ip = match self.rng.below(3) {
                0 => IpAddr::V4(Ipv4Addr::from(r as u32)),
                1 => IpAddr::V6(Ipv6Addr::from(
                    (0x2001_0db8_u128 << 96) | u128::from(r) << 32 | u128::from(r >> 7),
                )),
                // Near the trusted networks' edges.
                _ => self.pick(&[
                    IpAddr::from([11, 0, 0, 1]),
                    IpAddr::from([9, 255, 255, 255]),
                    IpAddr::from([172, 32, 0, 1]),
                    IpAddr::from([172, 15, 255, 255]),
                    IpAddr::from([127, 0, 0, 2]),
                    IpAddr::from([192, 169, 0, 0]),
                    "fc00::1".parse().unwrap(),
                    "fe00::1".parse().unwrap(),
                    "::2".parse().unwrap(),
                    "::".parse().unwrap(),
                    "::10.0.0.1".parse().unwrap(), // IPv4-compatible, not mapped
                    "64:ff9b::c000:201".parse().unwrap(), // NAT64: 192.0.2.1
                    "64:ff9b::1:c000:201".parse().unwrap(), // just outside 64:ff9b::/96
                ]),
            };
            if !self.is_trusted(ip) {
                return ip;
            }
        }
    }

    fn hop(&mut self, trusted: bool) -> Hop {
        Hop::Addr(if trusted {
            self.trusted_ip()
        } else {
            self.untrusted_ip()
        })
    }

    fn ows(&mut self) -> &'static str {
        self.pick(&["", "", "", " ", "\t", "  ", " \t "])
    }

    /// An IPv4 address as `a.b.c.d` or, sometimes, its IPv4-mapped IPv6 spelling.
    fn address_text(&mut self, ip: IpAddr) -> (String, bool) {
        match ip {
            IpAddr::V4(v4) if self.chance(15) => (format!("::ffff:{v4}"), true),
            IpAddr::V4(v4) => (v4.to_string(), false),
            IpAddr::V6(v6) => {
                let text = v6.to_string();
                (
                    if self.chance(20) {
                        text.to_uppercase()
                    } else {
                        text
                    },
                    true,
                )
            }
        }
    }

    /// `text` (the spelling of `ip`) with, now and then where `ip` is IPv6, a zone ID after
    /// `percent` (`%`, or `%25` as in a URI): an interface of the proxy, not part of the client.
    fn zoned(&mut self, ip: IpAddr, text: String, percent: &str) -> String {
        if !ip.is_ipv6() || !self.chance(15) {
            return text;
        }
        let zone = self.pick(&["eth0", "enp3s0", "2", "br-1a2b.100_x~", "en%2F0"]);
        format!("{text}{percent}{zone}")
    }

    /// An address in one of the spellings a proxy may write into `X-Forwarded-For`.
    fn xff_address(&mut self, ip: IpAddr) -> String {
        let (text, v6) = self.address_text(ip);
        let text = self.zoned(ip, text, "%");
        let port = self.rng.below(65_536);
        let body = match (v6, self.rng.below(3)) {
            (true, 0) => format!("[{text}]"),
            (true, 1) => format!("[{text}]:{port}"),
            (false, 1) => format!("{text}:{port}"),
            _ => text,
        };
        format!("{}{body}{}", self.ows(), self.ows())
    }

    /// An `X-Forwarded-For` entry that is not an address (no comma in it).
    fn xff_not_an_address(&mut self) -> Vec<u8> {
        let text: &[u8] = self.pick(&[
            &b"unknown"[..],
            b"_hidden",
            b"",
            b" ",
            b"fe80::1%",
            b"fe80::1%eth0:80",
            b"[fe80::1%eth0]:99999",
            b"1.2.3.4%eth0",
            b"1.2.3.4:99999",
            b"1.2.3.4:",
            b"010.0.0.1",
            b"0x7f.0.0.1",
            b"2130706433",
            b"1.2.3",
            b"\"1.2.3.4\"",
            b"[1.2.3.4]",
            b"[::1",
            b"::1]",
            b"caf\xe9",
            b"1.2.3.4\xff",
            b"for=1.2.3.4",
        ]);
        text.to_vec()
    }

    /// An address in one of the spellings a proxy may write into a `Forwarded` element, with
    /// other parameters, parameter names in any case, quoted-pairs and whitespace.
    fn forwarded_address(&mut self, ip: IpAddr) -> String {
        let (text, v6) = self.address_text(ip);
        let percent = self.pick(&["%25", "%"]);
        let text = self.zoned(ip, text, percent);
        let port = self.rng.below(65_536);
        // RFC 7239 §6.3: a port may be obfuscated (`_` and ALPHA, DIGIT, `.`, `_`, `-`).
        let port = if self.chance(25) {
            self.pick(&["_a8b2", "_x.y-z_1", "__", "_9"]).to_owned()
        } else {
            port.to_string()
        };
        let node = match (v6, self.rng.below(2)) {
            (true, 0) => format!("[{text}]"),
            (true, _) => format!("[{text}]:{port}"),
            (false, 0) => text,
            (false, _) => format!("{text}:{port}"),
        };
        // A token needs no quotes (a bare IPv4 address); anything with ':' or '[' must be a
        // quoted-string, where any character may be written as a quoted-pair.
        let quote = node.contains([':', '[']) || self.chance(30);
        let value = if quote {
            let mut q = String::from("\"");
            for c in node.chars() {
                if self.chance(10) {
                    q.push('\\');
                }
                q.push(c);
            }
            q.push('"');
            q
        } else {
            node
        };
        let name = self.pick(&["for", "For", "FOR", "fOr"]);
        let pair = format!("{name}={value}");
        self.element_with(pair)
    }

    /// `pair` among other parameters of one element (quoted commas and semicolons included).
    fn element_with(&mut self, pair: String) -> String {
        let others = [
            "proto=https",
            "by=\"[fd00::1]:443\"",
            "host=\"a,b;c\"",
            "by=_proxy",
            "ext=\"q\\\"uote,\"",
        ];
        let mut params = vec![pair];
        for _ in 0..self.rng.below(3) {
            let other = self.pick(&others).to_owned();
            let at = self.rng.below(params.len() as u64 + 1) as usize;
            params.insert(at, other);
        }
        let mut out = String::new();
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                out.push_str(self.ows());
                out.push(';');
                out.push_str(self.ows());
            }
            out.push_str(p);
        }
        format!("{}{out}{}", self.ows(), self.ows())
    }

    /// A well-formed `Forwarded` element that names no address.
    fn forwarded_not_an_address(&mut self) -> String {
        let pair: &str = self.pick(&[
            "for=unknown",
            "for=\"unknown\"",
            "for=_hidden",
            "for=\"_hidden:80\"",
            "for=\"[fe80::1%]\"",
            "for=\"[fe80::1%25eth0]:99999\"",
            "for=\"[1.2.3.4%25eth0]\"",
            "for=\"1.2.3.4:99999\"",
            "for=\"\"",
            "for=\"[1.2.3.4]\"",
            "for=\"1.2.3.4:_\"",
            "for=\"1.2.3.4:_a b\"",
            "for=\"2001:db8::1:_p\"",
        ]);
        if self.chance(15) {
            // No `for` at all.
            return self.element_with("proto=http".to_owned());
        }
        self.element_with(pair.to_owned())
    }

    /// Arbitrary bytes a client may put in a header value: unbalanced quotes, backslashes,
    /// commas, semicolons, bytes that are not ASCII; now and then a very long value.
    fn junk(&mut self) -> Vec<u8> {
        const ALPHABET: &[u8] = b"\"\\,;=[]:.% \tfor0123456789abcdef_FORunknown\x80\xff\xe9";
        let len = match self.rng.below(400) {
            0 => 1 << 20,
            1..=16 => 10_000,
            _ => self.rng.below(40) as usize,
        };
        (0..len).map(|_| self.pick(ALPHABET)).collect()
    }

    /// The header lines for `entries` (left to right), joined by commas into one or several
    /// lines, after the client's own `prefix` (its own line or the start of the first one).
    fn lines(&mut self, prefix: Option<Vec<u8>>, entries: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        let mut current: Option<Vec<u8>> = None;
        if let Some(prefix) = prefix {
            if self.chance(50) {
                lines.push(prefix);
            } else {
                current = Some(prefix);
            }
        }
        for entry in entries {
            match current.as_mut() {
                Some(line) if !self.chance(30) => {
                    line.push(b',');
                    line.extend_from_slice(self.ows().as_bytes());
                    line.extend_from_slice(entry);
                }
                _ => {
                    if let Some(line) = current.take() {
                        lines.push(line);
                    }
                    current = Some(entry.clone());
                }
            }
        }
        lines.extend(current);
        lines
    }
}

/// IPv4-mapped addresses in IPv4 form.
fn v4_form(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The documented key of a client address: IPv4 per address (NAT64's `64:ff9b::/96` carrying
/// one), IPv6 per /64.
fn grouped(ip: IpAddr) -> IpAddr {
    match v4_form(ip) {
        IpAddr::V6(v6) if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            let [.., a, b, c, d] = v6.octets();
            IpAddr::from([a, b, c, d])
        }
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
        v4 => v4,
    }
}

/// The rule: from `peer`, over `hops` (left to right) from the right.
fn expected(g: &Gen, peer: IpAddr, hops: &[Hop]) -> IpAddr {
    let mut current = peer;
    if !g.is_trusted(current) {
        return current;
    }
    for hop in hops.iter().rev() {
        match hop {
            Hop::Addr(ip) => {
                current = *ip;
                if !g.is_trusted(current) {
                    return current;
                }
            }
            Hop::NotAnAddress => return current,
        }
    }
    current
}

fn request(peer: IpAddr, headers: &[(HeaderName, Vec<Vec<u8>>)]) -> Request<()> {
    let mut req = Request::new(());
    for (name, lines) in headers {
        for line in lines {
            let value = HeaderValue::from_bytes(line).expect("generated bytes are a header value");
            req.headers_mut().append(name.clone(), value);
        }
    }
    req.extensions_mut().insert(SocketAddr::new(peer, 40_000));
    req
}

#[test]
fn generated_hostile_headers_follow_the_documented_rule() {
    let trusted: Vec<IpNet> = TRUSTED.iter().map(|s| s.parse().unwrap()).collect();
    let xff_key = ClientIp::new(trusted.clone());
    let fwd_key = ClientIp::new(trusted).header(ProxyHeader::Forwarded);
    let xff = HeaderName::from_static("x-forwarded-for");
    let fwd = HeaderName::from_static("forwarded");
    let mut g = Gen {
        rng: Rng(0x7011_6a7e),
        trusted: TRUSTED_V4_FORM.iter().map(|s| s.parse().unwrap()).collect(),
    };
    let (mut untrusted_peers, mut walked, mut reached_client_part) = (0, 0, 0);
    for case in 0..CASES {
        let forwarded = g.chance(50);
        let peer_trusted = g.chance(80);
        let peer = if peer_trusted {
            g.trusted_ip()
        } else {
            g.untrusted_ip()
        };
        // The peer as a dual-stack listener may show it.
        let peer_seen = match peer {
            IpAddr::V4(v4) if g.chance(20) => IpAddr::V6(v4.to_ipv6_mapped()),
            other => other,
        };

        // What our proxies appended, left to right: the client's address (or an entry that is
        // not an address), then the trusted hops between it and the peer.
        let mut appended: Vec<Hop> = Vec::new();
        let client = match g.rng.below(10) {
            0 => Hop::NotAnAddress,
            1 | 2 => g.hop(true), // a client inside the trusted networks
            _ => g.hop(false),
        };
        appended.push(client);
        for _ in 0..g.rng.below(4) {
            appended.push(g.hop(true));
        }
        if g.chance(1) {
            // A long chain of trusted hops.
            for _ in 0..10_000 {
                appended.push(g.hop(true));
            }
        }
        let walk_stops_in_appended = appended.iter().any(|hop| {
            matches!(hop, Hop::NotAnAddress) || matches!(hop, Hop::Addr(ip) if !g.is_trusted(*ip))
        });

        // The client's own part, left of what the proxies appended: known hops where the walk
        // can reach it, anything at all where it cannot.
        let mut client_hops: Vec<Hop> = Vec::new();
        let prefix: Option<Vec<u8>> = if walk_stops_in_appended && g.chance(70) {
            Some(g.junk())
        } else {
            for _ in 0..g.rng.below(4) {
                let hop = match g.rng.below(4) {
                    0 => Hop::NotAnAddress,
                    1 => g.hop(true),
                    _ => g.hop(false),
                };
                client_hops.push(hop);
            }
            None
        };

        let hops: Vec<Hop> = client_hops.iter().chain(&appended).cloned().collect();
        let entries: Vec<Vec<u8>> = hops
            .iter()
            .map(|hop| match (hop, forwarded) {
                (Hop::Addr(ip), false) => g.xff_address(*ip).into_bytes(),
                (Hop::Addr(ip), true) => g.forwarded_address(*ip).into_bytes(),
                (Hop::NotAnAddress, false) => g.xff_not_an_address(),
                (Hop::NotAnAddress, true) => g.forwarded_not_an_address().into_bytes(),
            })
            .collect();
        let lines = g.lines(prefix, &entries);
        // The header the proxies do not write is entirely the client's.
        let decoy = vec![g.junk(), b"6.6.6.6, for=6.6.6.6".to_vec()];
        let (name, other) = if forwarded {
            (&fwd, &xff)
        } else {
            (&xff, &fwd)
        };
        let req = request(
            peer_seen,
            &[(other.clone(), decoy), (name.clone(), lines.clone())],
        );

        let key = if forwarded { &fwd_key } else { &xff_key };
        let got = KeyExtractor::<()>::extract(key, &req);
        let want = grouped(expected(&g, peer, &hops));
        let shown: Vec<String> = lines
            .iter()
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(300)]).into_owned())
            .collect();
        assert_eq!(
            got,
            Some(want),
            "case {case}: peer {peer_seen}, {name}: {shown:?}, hops {hops:?}"
        );
        if !g.is_trusted(peer) {
            untrusted_peers += 1;
        } else if walk_stops_in_appended {
            walked += 1;
        } else {
            reached_client_part += 1;
        }
    }
    // The generator reaches every branch of the rule.
    assert!(untrusted_peers > CASES / 10, "{untrusted_peers}");
    assert!(walked > CASES / 2, "{walked}");
    assert!(reached_client_part > CASES / 20, "{reached_client_part}");
}

/// A key header's part as its sender wrote it, and what it is by construction.
enum KeyPart {
    /// A key as API keys and tenant ids look (no comma), with blanks around it.
    Key(String),
    /// Any bytes (commas, quotes, blanks, bytes that are not ASCII): keyed only with
    /// `allow_commas`, and then only when visible ASCII and not blank.
    Junk(Vec<u8>),
}

impl Gen {
    /// A key without commas: letters, digits and the punctuation of API keys and tenant ids,
    /// sometimes with a space inside.
    fn key(&mut self) -> String {
        const ALPHABET: &[u8] = b"abcXYZ0189-_.+/=:~";
        let len = 1 + self.rng.below(24) as usize;
        let mut key: Vec<u8> = (0..len).map(|_| self.pick(ALPHABET)).collect();
        if len > 2 && self.chance(10) {
            key[1] = b' ';
        }
        String::from_utf8(key).unwrap()
    }

    fn key_part(&mut self) -> KeyPart {
        match self.rng.below(4) {
            0 => KeyPart::Junk(self.junk()),
            1 => {
                // The shapes a merge leaves: `a,b`, `a ,b`, `a,`, `,a`, a quoted pair.
                let (a, b) = (self.key(), self.key());
                let sep = self.pick(&[",", ", ", " ,", " , ", ",,", ",\t"]);
                let text = match self.rng.below(4) {
                    0 => format!("{a}{sep}"),
                    1 => format!("{sep}{a}"),
                    2 => format!("\"{a}{sep}{b}\""),
                    _ => format!("{a}{sep}{b}"),
                };
                KeyPart::Junk(text.into_bytes())
            }
            _ => KeyPart::Key(self.key()),
        }
    }
}

/// What `HeaderKey` (with `allow_commas` as given) keys a single line by: visible ASCII, spaces
/// and tabs only; trimmed of spaces and tabs; not empty; no comma unless allowed.
fn one_line_key(line: &[u8], commas: bool) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    if !text
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return None;
    }
    let text = text.trim_matches(|c| c == ' ' || c == '\t');
    (!text.is_empty() && (commas || !text.contains(','))).then(|| text.to_owned())
}

/// A client's key header part, then maybe a gateway's key, each on its own line or merged by a
/// proxy into one line (`, ` or `,`, RFC 9110 §5.3). Without `allow_commas`: two lines, or one
/// that merges two, are no key; a single part is its key when it is one (a comma-free key,
/// blanks around it dropped), else no key. With `allow_commas`, a single line is its trimmed
/// value whenever it is visible ASCII and not blank, merged or not.
#[test]
fn generated_key_header_lines_follow_the_documented_rule() {
    let name = HeaderName::from_static("x-tenant");
    let strict = HeaderKey::new(name.clone());
    let lenient = HeaderKey::new(name.clone()).allow_commas(true);
    let mut g = Gen {
        rng: Rng(0x6e7a_0c0a),
        trusted: Vec::new(),
    };
    let (mut keyed, mut merged, mut split) = (0, 0, 0);
    for case in 0..CASES {
        let client = g.key_part();
        let (client_bytes, client_key) = match &client {
            KeyPart::Key(key) => {
                let (l, r) = (g.ows(), g.ows());
                (format!("{l}{key}{r}").into_bytes(), Some(key.clone()))
            }
            KeyPart::Junk(bytes) => (bytes.clone(), None),
        };
        let mut lines = vec![client_bytes];
        let mut was_merged = false;
        if g.chance(60) {
            let gateway = g.key();
            if g.chance(50) {
                let sep: &[u8] = g.pick(&[b", ", b","]);
                lines[0].extend_from_slice(sep);
                lines[0].extend_from_slice(gateway.as_bytes());
                was_merged = true;
                merged += 1;
            } else {
                lines.push(gateway.into_bytes());
                split += 1;
            }
        }
        let req = request(
            IpAddr::from([192, 0, 2, 1]),
            &[(name.clone(), lines.clone())],
        );
        let shown: Vec<String> = lines
            .iter()
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(300)]).into_owned())
            .collect();
        let single = lines.len() == 1;
        let got = KeyExtractor::<()>::extract(&strict, &req);
        // By construction: two lines, or two merged into one, are no key; a key part alone is
        // its key; junk alone is keyed by the rule (junk may happen to be a clean key).
        let want = match (&client, single && !was_merged) {
            (_, false) => None,
            (KeyPart::Key(_), true) => client_key,
            (KeyPart::Junk(bytes), true) => one_line_key(bytes, false),
        };
        assert_eq!(got, want, "case {case}: {shown:?}");
        keyed += u32::from(got.is_some());
        let want = if single {
            one_line_key(&lines[0], true)
        } else {
            None
        };
        let got = KeyExtractor::<()>::extract(&lenient, &req);
        assert_eq!(got, want, "case {case}, allow_commas: {shown:?}");
    }
    // The generator reaches every branch of the rule.
    let cases = CASES as u32;
    assert!(keyed > cases / 10, "{keyed}");
    assert!(
        merged > cases / 5 && split > cases / 5,
        "{merged} merged, {split} split"
    );
}
