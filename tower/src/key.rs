//! Which limit a request counts against: [`KeyExtractor`] and the built-in keys, the IPv6
//! prefix grouping, and the [`MissingKey`] policy.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::{HeaderName, Request, StatusCode};
use ipnet::IpNet;

use crate::error::Error;
use crate::proxy::{canonical, client_ip, ProxyHeader};

/// Finds the rate-limit key of a request (`None`: no key; the layer's [`MissingKey`] policy
/// decides).
///
/// Built in: [`Global`], [`PeerIp`], [`ClientIp`] (behind trusted proxies), [`HeaderKey`], and
/// any closure through [`key_fn`].
pub trait KeyExtractor<B>: KeyType {
    /// The key of `req`, or `None` if it has none.
    fn extract(&self, req: &Request<B>) -> Option<Self::Key>;

    /// The status of the response to a request without a key under [`MissingKey::Reject`]:
    /// `400 Bad Request` unless the extractor knows better (a missing peer address is a server
    /// configuration error: `500`).
    fn missing_status(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }

    /// The body of that response: what was missing and how to fix it.
    fn missing_message(&self) -> &'static str {
        "rate limiting: the request carries no rate-limit key\n"
    }
}

/// The key type an extractor produces: apart from [`KeyExtractor`] so that it does not depend on
/// the request body type (the layer stores a [`MissingKey::Shared`] key before it sees a body).
pub trait KeyType {
    /// The key type (what the backend is keyed by).
    type Key;
}

/// What the layer does with a request its extractor finds no key for.
///
/// The default is [`MissingKey::Reject`]: a limit that silently stops applying is the worst
/// failure of a rate limiter. The rejection's status and body come from the extractor
/// ([`KeyExtractor::missing_status`]): `500` with the fix spelled out when the peer address is
/// missing (the server was started without `into_make_service_with_connect_info`), `400`
/// when a header key is missing.
///
/// ```
/// use tollgate_tower::MissingKey;
/// assert_eq!(MissingKey::<String>::default(), MissingKey::Reject);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MissingKey<K> {
    /// Answer at once with the extractor's missing-key status and message (the default).
    #[default]
    Reject,
    /// Count the request against this one shared key.
    Shared(K),
    /// Let the request through unlimited.
    Allow,
}

/// One limit for all requests: the key is always [`Global`] (displayed as `global`).
///
/// ```
/// use http::Request;
/// use tollgate_tower::{Global, KeyExtractor};
/// assert_eq!(Global.extract(&Request::new(())), Some(Global));
/// assert_eq!(Global.to_string(), "global");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Global;

impl KeyType for Global {
    type Key = Global;
}

impl<B> KeyExtractor<B> for Global {
    #[inline]
    fn extract(&self, _req: &Request<B>) -> Option<Global> {
        Some(Global)
    }
}

impl fmt::Display for Global {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("global")
    }
}

/// How client addresses are grouped into keys: IPv4 by a prefix of `v4` bits (default 32, one
/// key per address), IPv6 by a prefix of `v6` bits (default 64: one host usually owns a whole
/// /64, so per-address keys would let it rotate through 2^64 fresh limits). IPv4-mapped IPv6
/// addresses (`::ffff:0:0/96`) and addresses of the NAT64 well-known prefix (`64:ff9b::/96`,
/// RFC 6052: IPv4 clients as a stateless translator in front of an IPv6-only server shows them)
/// count as the IPv4 address they carry: grouped by /64, every IPv4 client behind a translator
/// would share one key. A network-specific translation prefix is not recognised: group such
/// addresses with a [`key_fn`](crate::key_fn).
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_tower::IpGrouping;
/// let g = IpGrouping::default();
/// let ip: IpAddr = "2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap();
/// assert_eq!(g.group(ip), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
/// assert_eq!(g.group("::ffff:192.0.2.1".parse().unwrap()), "192.0.2.1".parse::<IpAddr>().unwrap());
/// assert_eq!(g.group("64:ff9b::192.0.2.1".parse().unwrap()), "192.0.2.1".parse::<IpAddr>().unwrap());
/// assert!(IpGrouping::new(33, 64).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpGrouping {
    v4: u8,
    v6: u8,
}

impl Default for IpGrouping {
    fn default() -> Self {
        IpGrouping { v4: 32, v6: 64 }
    }
}

impl IpGrouping {
    /// Prefix lengths for IPv4 (0..=32) and IPv6 (0..=128); [`Error::InvalidPrefix`] otherwise.
    ///
    /// ```
    /// let per_address = tollgate_tower::IpGrouping::new(32, 128).unwrap();
    /// # let _ = per_address;
    /// ```
    pub fn new(v4: u8, v6: u8) -> Result<IpGrouping, Error> {
        if v4 > 32 || v6 > 128 {
            return Err(Error::InvalidPrefix);
        }
        Ok(IpGrouping { v4, v6 })
    }

    /// The key of `ip`: its network address under the configured prefix.
    #[inline]
    pub fn group(&self, ip: IpAddr) -> IpAddr {
        match untranslated(canonical(ip)) {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.v4)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.v6)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }
}

/// The NAT64 well-known prefix, `64:ff9b::/96` (RFC 6052): its last 32 bits are an IPv4 address.
const NAT64_WKP: u128 = 0x0064_ff9b_u128 << 96;

/// `ip`, or the IPv4 address it carries if it lies in the NAT64 well-known prefix.
fn untranslated(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if u128::from(v6) >> 32 == NAT64_WKP >> 32 => {
            IpAddr::V4(Ipv4Addr::from(u128::from(v6) as u32))
        }
        ip => ip,
    }
}

/// The peer's socket address, as the server recorded it: axum's `ConnectInfo<SocketAddr>` (or
/// the `MockConnectInfo<SocketAddr>` of axum tests; with the `axum` feature) or a plain
/// `SocketAddr` request extension (hyper users insert it).
pub(crate) fn peer_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    let extensions = req.extensions();
    #[cfg(feature = "axum")]
    {
        use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
        if let Some(info) = extensions.get::<ConnectInfo<SocketAddr>>() {
            return Some(info.0);
        }
        if let Some(mock) = extensions.get::<MockConnectInfo<SocketAddr>>() {
            return Some(mock.0);
        }
    }
    extensions.get::<SocketAddr>().copied()
}

const NO_PEER: &str = "rate limiting: the peer address is missing. With axum, serve with \
    `app.into_make_service_with_connect_info::<SocketAddr>()`; with hyper, insert the \
    connection's `SocketAddr` as a request extension.\n";

/// The peer's IP address (grouped by [`IpGrouping`]): right when clients connect directly.
/// Behind a proxy every request would share the proxy's key: use [`ClientIp`] there.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use http::Request;
/// use tollgate_tower::{KeyExtractor, PeerIp};
/// let mut req = Request::new(());
/// req.extensions_mut().insert(SocketAddr::from(([192, 0, 2, 1], 5000)));
/// assert_eq!(PeerIp::new().extract(&req), Some(IpAddr::from([192, 0, 2, 1])));
/// assert_eq!(PeerIp::new().extract(&Request::new(())), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerIp {
    grouping: IpGrouping,
}

impl PeerIp {
    /// Per peer address, IPv6 grouped by /64.
    pub fn new() -> PeerIp {
        PeerIp::default()
    }

    /// Another grouping of addresses into keys.
    ///
    /// ```
    /// use tollgate_tower::{IpGrouping, PeerIp};
    /// let by_48 = PeerIp::new().grouping(IpGrouping::new(32, 48).unwrap());
    /// # let _ = by_48;
    /// ```
    pub fn grouping(self, grouping: IpGrouping) -> PeerIp {
        PeerIp { grouping }
    }
}

impl KeyType for PeerIp {
    type Key = IpAddr;
}

impl<B> KeyExtractor<B> for PeerIp {
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        peer_addr(req).map(|addr| self.grouping.group(addr.ip()))
    }

    fn missing_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn missing_message(&self) -> &'static str {
        NO_PEER
    }
}

/// The client's IP address behind a configured set of trusted proxies (grouped by
/// [`IpGrouping`]).
///
/// If the peer is a trusted proxy, the proxy header ([`ProxyHeader`], default
/// `X-Forwarded-For`) is walked **from the right**: each trusted hop is skipped, the first
/// untrusted address is the client. Entries left of it were written by the client and are
/// ignored, so a spoofed `X-Forwarded-For: 1.2.3.4` never changes the key. A peer that is not a
/// trusted proxy is the client itself, whatever headers it sends.
///
/// **Spoofing warning**: trust only proxies you run, and configure only the header they write.
/// A proxy that passes the client's own header through unchanged instead of appending to it
/// makes that header client-controlled.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use http::Request;
/// use tollgate_tower::{ClientIp, KeyExtractor};
/// let key = ClientIp::new(["10.0.0.0/8".parse().unwrap()]);
/// let mut req = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9") // spoofed, then written by our proxy
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(SocketAddr::from(([10, 0, 0, 1], 40000)));
/// assert_eq!(key.extract(&req), Some(IpAddr::from([203, 0, 113, 9])));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    header: ProxyHeader,
    grouping: IpGrouping,
}

impl ClientIp {
    /// Trusts the proxies in these networks (`127.0.0.1/32`, `10.0.0.0/8`, `fd00::/8`). A network
    /// written in IPv4-mapped form (`::ffff:10.0.0.0/104`, as a dual-stack listener shows its
    /// IPv4 peers) is the IPv4 network it maps, since addresses are compared in IPv4 form too.
    pub fn new(trusted: impl IntoIterator<Item = IpNet>) -> ClientIp {
        ClientIp {
            trusted: trusted
                .into_iter()
                .map(crate::proxy::canonical_net)
                .collect(),
            header: ProxyHeader::default(),
            grouping: IpGrouping::default(),
        }
    }

    /// Reads this header instead of `X-Forwarded-For`.
    ///
    /// ```
    /// use tollgate_tower::{ClientIp, ProxyHeader};
    /// let key = ClientIp::new(["10.0.0.0/8".parse().unwrap()]).header(ProxyHeader::Forwarded);
    /// # let _ = key;
    /// ```
    pub fn header(self, header: ProxyHeader) -> ClientIp {
        ClientIp { header, ..self }
    }

    /// Another grouping of addresses into keys.
    pub fn grouping(self, grouping: IpGrouping) -> ClientIp {
        ClientIp { grouping, ..self }
    }

    /// The trusted networks.
    pub fn trusted(&self) -> &[IpNet] {
        &self.trusted
    }
}

impl KeyType for ClientIp {
    type Key = IpAddr;
}

impl<B> KeyExtractor<B> for ClientIp {
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(req)?.ip();
        let client = client_ip(peer, req.headers(), self.header, &self.trusted);
        Some(self.grouping.group(client))
    }

    fn missing_status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn missing_message(&self) -> &'static str {
        NO_PEER
    }
}

/// The value of a request header (an API key, a tenant id), without the spaces and tabs around
/// it (RFC 9110 §5.5: they are not part of a field value; HTTP/2 delivers them as sent, so
/// ` k` and `k` are one key). Missing, sent more than once, holding a comma, empty (or only
/// spaces and tabs), or not visible ASCII: no key. A key header is a single value: of two
/// lines, either choice lets one sender override the other (a gateway that appends its header
/// after the client's would otherwise be overridden by the client's line). A proxy may merge
/// repeated lines into one, joined by commas (RFC 9110 §5.3 allows it for list fields, and some
/// proxies do it for any field): `a, b` (or `a,b`, `,b`, `a,`) is two lines merged, not a key
/// the client picked, so a comma anywhere in the value, quoted or not, is no key either. API
/// keys and tenant ids hold no commas; for a header whose values do and whose every value the
/// client picks anyway (`User-Agent`: `(KHTML, like Gecko)`), see
/// [`allow_commas`](HeaderKey::allow_commas). An empty value names no client: as a key, every
/// client that sends it would share one limit, and one of them could spend it for all the
/// others. Not for `Cookie`: HTTP/2 clients may send it as several lines (RFC 9113 §8.2.3),
/// which is no key here.
///
/// ```
/// use http::Request;
/// use tollgate_tower::{HeaderKey, KeyExtractor};
/// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let req = Request::builder().header("x-api-key", "k-123").body(()).unwrap();
/// assert_eq!(key.extract(&req).as_deref(), Some("k-123"));
/// assert_eq!(key.extract(&Request::new(())), None);
/// let empty = Request::builder().header("x-api-key", "").body(()).unwrap();
/// assert_eq!(key.extract(&empty), None);
/// let padded = Request::builder().header("x-api-key", " k-123\t").body(()).unwrap();
/// assert_eq!(key.extract(&padded).as_deref(), Some("k-123"));
/// let merged = Request::builder().header("x-api-key", "k-123, k-456").body(()).unwrap();
/// assert_eq!(key.extract(&merged), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderKey {
    name: HeaderName,
    /// Whether a value holding a comma is a key (default: no, two lines merged).
    commas: bool,
}

impl HeaderKey {
    /// Keys by the value of header `name`; a value holding a comma is no key.
    pub fn new(name: HeaderName) -> HeaderKey {
        HeaderKey {
            name,
            commas: false,
        }
    }

    /// Whether a value holding a comma is a key (default `false`: it is read as two lines that
    /// a proxy merged, and is no key). Turn it on only for a header whose values hold commas
    /// and whose every value the client picks anyway, so that a merged line gives it nothing
    /// it could not send itself (`User-Agent`), never for a key that a gateway of yours sets
    /// or authenticates. A header sent on two lines is still no key.
    ///
    /// ```
    /// use http::{header::USER_AGENT, Request};
    /// use tollgate_tower::{HeaderKey, KeyExtractor};
    /// let ua = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko)";
    /// let req = Request::builder().header(USER_AGENT, ua).body(()).unwrap();
    /// assert_eq!(HeaderKey::new(USER_AGENT).extract(&req), None);
    /// let key = HeaderKey::new(USER_AGENT).allow_commas(true);
    /// assert_eq!(key.extract(&req).as_deref(), Some(ua));
    /// ```
    pub fn allow_commas(self, on: bool) -> HeaderKey {
        HeaderKey { commas: on, ..self }
    }
}

impl KeyType for HeaderKey {
    type Key = String;
}

impl<B> KeyExtractor<B> for HeaderKey {
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<String> {
        let mut values = req.headers().get_all(&self.name).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        // RFC 9110 §5.5: a field value excludes leading and trailing whitespace (SP, HTAB).
        // HTTP/1 parsers strip it on the wire; HTTP/2 (`h2`) and values built in process keep
        // it, so it is stripped here: otherwise ` k`, `k\t`, `  k`, … would each be a fresh
        // limit for one key. A value of only whitespace is empty, and an empty value is no key.
        let value = value.to_str().ok()?.trim_matches(|c| c == ' ' || c == '\t');
        // A comma is where a proxy joins repeated lines (RFC 9110 §5.3): `a, b` is two lines.
        // No parse of quoted strings: a client's `"a` and a gateway's `b"` merge into `"a, b"`.
        if value.is_empty() || (!self.commas && value.contains(',')) {
            return None;
        }
        Some(value.to_owned())
    }

    fn missing_message(&self) -> &'static str {
        // What this key refuses: a comma only when it is no key here.
        if self.commas {
            "rate limiting: the header that carries the rate-limit key is missing, empty, \
             repeated (on two lines) or not ASCII\n"
        } else {
            "rate limiting: the header that carries the rate-limit key is missing, empty, repeated \
             (on two lines, or merged into one by a comma) or not ASCII\n"
        }
    }
}

/// A closure as a [`KeyExtractor`]; see [`key_fn`].
pub struct FnKey<F, K> {
    f: F,
    key: PhantomData<fn() -> K>,
}

impl<F: Clone, K> Clone for FnKey<F, K> {
    fn clone(&self) -> Self {
        FnKey {
            f: self.f.clone(),
            key: PhantomData,
        }
    }
}

impl<F, K> fmt::Debug for FnKey<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnKey").finish_non_exhaustive()
    }
}

/// Any function of the request as the key extractor.
///
/// ```
/// use http::Request;
/// use tollgate_tower::{key_fn, KeyExtractor};
/// // One limit per first path segment.
/// let key = key_fn(|req: &Request<()>| req.uri().path().split('/').nth(1).map(str::to_owned));
/// let req = Request::builder().uri("/users/7").body(()).unwrap();
/// assert_eq!(key.extract(&req).as_deref(), Some("users"));
/// ```
pub fn key_fn<F, B, K>(f: F) -> FnKey<F, K>
where
    F: Fn(&Request<B>) -> Option<K>,
{
    FnKey {
        f,
        key: PhantomData,
    }
}

impl<F, K> KeyType for FnKey<F, K> {
    type Key = K;
}

impl<F, B, K> KeyExtractor<B> for FnKey<F, K>
where
    F: Fn(&Request<B>) -> Option<K>,
{
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<K> {
        (self.f)(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_edges() {
        let all = IpGrouping::new(0, 0).unwrap();
        assert_eq!(
            all.group("192.0.2.1".parse().unwrap()),
            IpAddr::from([0, 0, 0, 0])
        );
        assert_eq!(
            all.group("2001:db8::1".parse().unwrap()),
            "::".parse::<IpAddr>().unwrap()
        );
        let exact = IpGrouping::new(32, 128).unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(exact.group(v6), v6);
        let g = IpGrouping::new(24, 48).unwrap();
        assert_eq!(
            g.group("192.0.2.77".parse().unwrap()),
            IpAddr::from([192, 0, 2, 0])
        );
        assert_eq!(
            g.group("2001:db8:aa:bb::1".parse().unwrap()),
            "2001:db8:aa::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(IpGrouping::new(32, 129), Err(Error::InvalidPrefix));
    }

    /// Two IPv4 clients behind a NAT64 translator keep two keys (grouped by the IPv4 prefix);
    /// an address just outside `64:ff9b::/96` is an IPv6 address like any other.
    #[test]
    fn nat64_addresses_group_as_the_ipv4_address_they_carry() {
        let g = IpGrouping::default();
        let a: IpAddr = "64:ff9b::c000:201".parse().unwrap();
        let b: IpAddr = "64:ff9b::c633:6407".parse().unwrap();
        assert_eq!(g.group(a), IpAddr::from([192, 0, 2, 1]));
        assert_eq!(g.group(b), IpAddr::from([198, 51, 100, 7]));
        assert_eq!(
            IpGrouping::new(24, 64)
                .unwrap()
                .group("64:ff9b::192.0.2.77".parse().unwrap()),
            IpAddr::from([192, 0, 2, 0])
        );
        for outside in ["64:ff9b::1:c000:201", "64:ff9a:ffff:ffff::c000:201"] {
            let ip: IpAddr = outside.parse().unwrap();
            assert!(g.group(ip).is_ipv6(), "{outside}");
        }
        assert_eq!(
            g.group("64:ff9b::1:c000:201".parse().unwrap()),
            "64:ff9b::".parse::<IpAddr>().unwrap()
        );
    }
}
