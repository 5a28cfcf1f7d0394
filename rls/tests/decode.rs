//! What a `ShouldRateLimit` message costs the server before the service sees it: a message over
//! the request limits is refused without being built (two million empty descriptors fit in
//! 4 MiB, and decoded they are many times that), one at the limits is decided, and
//! malformed wire data gets an error status, never a panic.
//!
//! The messages are written here byte by byte and sent as they are, so the client builds
//! nothing but their bytes; a counting allocator measures what the process allocates during
//! a call. The tests of this binary take turns (`SERIAL`): the peak is process-wide.

mod support;

use support::{Rls, OK, OVER};
use tollgate_rls::http::MAX_JSON_WEIGHT;
use tollgate_testkit::alloc;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Status;
use tonic_prost::prost::bytes::BufMut;
use tonic_prost::prost::Message;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CONFIG: &str = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Sends the bytes of a message as they are; decodes the response with prost.
#[derive(Clone, Copy)]
struct Raw;

struct RawEncoder;
struct ResponseDecoder;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = RateLimitResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

impl Decoder for ResponseDecoder {
    type Item = RateLimitResponse;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RateLimitResponse>, Status> {
        RateLimitResponse::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// A tonic client of raw message bytes on a new connection to `s`'s gRPC port, ready.
async fn raw_client(s: &Rls) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.ready.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc
}

/// Calls `ShouldRateLimit` with `bytes` as the message: the answer, and the most bytes the
/// process held during the call beyond what it held before (the message's own bytes, already
/// built, not counted).
async fn call(s: &Rls, bytes: Vec<u8>) -> (Result<RateLimitResponse, Status>, usize) {
    let mut grpc = raw_client(s).await;
    let before = alloc::reset_peak();
    let r = grpc
        .unary(
            tonic::Request::new(bytes),
            PathAndQuery::from_static(METHOD),
            Raw,
        )
        .await
        .map(tonic::Response::into_inner);
    (r, alloc::peak().saturating_sub(before))
}

/// A length-delimited field.
fn field(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag << 3 | 2);
    let mut n = body.len();
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(body);
}

/// A descriptor of `entries` entries (`key`, `value`).
fn descriptor(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut d = Vec::new();
    for (k, v) in entries {
        let mut e = Vec::new();
        field(&mut e, 1, k.as_bytes());
        field(&mut e, 2, v.as_bytes());
        field(&mut d, 1, &e);
    }
    d
}

/// A request of `domain` and the descriptors' bodies.
fn request(domain: &str, descriptors: &[Vec<u8>]) -> Vec<u8> {
    let mut r = Vec::new();
    field(&mut r, 1, domain.as_bytes());
    for d in descriptors {
        field(&mut r, 2, d);
    }
    r
}

/// 4 MiB (the most a message may hold) of empty descriptors after `domain`: 2 bytes each.
fn empty_descriptors(domain: &str) -> (Vec<u8>, usize) {
    let mut r = request(domain, &[]);
    let n = ((4 << 20) - r.len()) / 2;
    r.reserve_exact(2 * n);
    for _ in 0..n {
        r.extend_from_slice(&[2 << 3 | 2, 0]);
    }
    (r, n)
}

fn invalid(r: Result<RateLimitResponse, Status>) -> String {
    match r {
        Err(s) if s.code() == tonic::Code::InvalidArgument => s.message().to_owned(),
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

/// The most a refused 4 MiB message may make the process hold beyond its bytes: the client's
/// copy in its send buffer and the server's receive buffer, each at most twice the message
/// as it grows, and a little for the connection (decoded, the message would hold several
/// times this).
const BOUND: usize = 24 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_million_empty_descriptors_are_refused_unbuilt() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let (bytes, n) = empty_descriptors("d");
    assert!(n > 2_000_000);
    let (r, peak) = call(&s, bytes).await;
    assert_eq!(
        invalid(r),
        format!("{n} descriptors: at most 1024"),
        "the service's own answer"
    );
    eprintln!("{n} empty descriptors (4 MiB): peak {peak} bytes beyond the message");
    assert!(peak < BOUND, "peak {peak} bytes during the call");

    // An empty domain is named first, as the service names it.
    let (bytes, _) = empty_descriptors("");
    let (r, peak) = call(&s, bytes).await;
    assert_eq!(invalid(r), "the domain is empty");
    assert!(peak < BOUND, "peak {peak} bytes during the call");

    // One descriptor of two million empty entries.
    let mut d = Vec::with_capacity(4 << 20);
    for _ in 0..((4 << 20) - 64) / 2 {
        d.extend_from_slice(&[1 << 3 | 2, 0]);
    }
    let entries = d.len() / 2;
    let bytes = request("d", &[descriptor(&[("user", "a")]), d]);
    let (r, peak) = call(&s, bytes).await;
    assert_eq!(
        invalid(r),
        format!("descriptor 1: {entries} entries, at most 64")
    );
    eprintln!("{entries} empty entries in one descriptor: peak {peak} bytes beyond the message");
    assert!(peak < BOUND, "peak {peak} bytes during the call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_at_the_limits_is_decided() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    // 1,023 descriptors of 64 (empty) entries, deeper than any config path (no limit), and
    // one user: 1,024 descriptors.
    let deep = descriptor(&[("", ""); 64]);
    let mut ds = vec![deep.clone(); 1023];
    ds.push(descriptor(&[("user", "x")]));
    let at_limits = request("d", &ds);
    for remaining in [2, 1, 0] {
        let (r, peak) = call(&s, at_limits.clone()).await;
        let r = r.expect("an answer");
        eprintln!(
            "1,024 descriptors, 65,473 entries ({} bytes): peak {peak} bytes beyond the message",
            at_limits.len()
        );
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses.len(), 1024);
        assert!(r.statuses[..1023]
            .iter()
            .all(|st| st.code == OK && st.current_limit.is_none()));
        assert_eq!(r.statuses[1023].limit_remaining, remaining);
    }
    let (r, _) = call(&s, at_limits.clone()).await;
    let r = r.expect("an answer");
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[1023].code, OVER);

    // One more descriptor, or one more entry in one: the service's answers.
    let mut more = ds.clone();
    more.push(descriptor(&[("user", "y")]));
    assert_eq!(
        invalid(call(&s, request("d", &more)).await.0),
        "1025 descriptors: at most 1024"
    );
    let mut wide = ds.clone();
    wide[5] = descriptor(&[("", ""); 65]);
    assert_eq!(
        invalid(call(&s, request("d", &wide)).await.0),
        "descriptor 5: 65 entries, at most 64"
    );
    // An earlier descriptor's own refusal comes first, as the service checks them in order:
    // the per-descriptor limit override is field 2 of a descriptor.
    let mut with_override = descriptor(&[("user", "z")]);
    field(&mut with_override, 2, &[]);
    wide[2] = with_override;
    assert_eq!(
        invalid(call(&s, request("d", &wide)).await.0),
        "descriptor 2: the per-descriptor limit override is not supported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_wire_data_gets_an_error_status() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let good = request("d", &[descriptor(&[("user", "m")])]);
    let (bytes, _) = empty_descriptors("d");
    let over_then_truncated = {
        let mut b = bytes;
        b.truncate(b.len() - 3);
        b.extend_from_slice(&[2 << 3 | 2, 5]);
        b
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a truncated varint", vec![0x0a, 0x80]),
        ("a length past the buffer", vec![0x0a, 0x05, b'd']),
        ("a key of tag 0", vec![0x02, 0x00]),
        ("wire type 7", vec![0x0f]),
        ("domain as a varint", vec![0x08, 0x01]),
        ("descriptors as fixed32", vec![0x15, 0, 0, 0, 0]),
        ("an entry's key not UTF-8", {
            let mut e = Vec::new();
            field(&mut e, 1, &[0xff]);
            let mut d = Vec::new();
            field(&mut d, 1, &e);
            request("d", &[d])
        }),
        ("a varint of eleven bytes", {
            let mut b = good.clone();
            b.extend_from_slice(&[
                0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ]);
            b.extend_from_slice(&[0x01]);
            b
        }),
        ("an unclosed group", {
            let mut b = good.clone();
            b.extend_from_slice(&[0x7b, 0x08, 0x01]);
            b
        }),
        ("a stray end group", {
            let mut b = good.clone();
            b.push(0x7c);
            b
        }),
        ("over the limits, then truncated", over_then_truncated),
    ];
    for (what, bytes) in cases {
        let (r, peak) = call(&s, bytes).await;
        match r {
            Err(st) => assert_eq!(st.code(), tonic::Code::Internal, "{what}: {st:?}"),
            Ok(r) => panic!("{what}: answered {r:?}"),
        }
        assert!(peak < BOUND, "{what}: peak {peak} bytes during the call");
    }
    // Unknown fields of every wire type, a closed group among them, are skipped.
    let mut b = good.clone();
    b.extend_from_slice(&[0x78, 0x01, 0x79, 0, 0, 0, 0, 0, 0, 0, 0, 0x7d, 0, 0, 0, 0]);
    b.extend_from_slice(&[0x7b, 0x08, 0x01, 0x7c]);
    field(&mut b, 15, b"x");
    let (r, _) = call(&s, b).await;
    assert_eq!(r.expect("an answer").overall_code, OK);
    let (r, _) = call(&s, good).await;
    assert_eq!(r.expect("an answer").statuses[0].limit_remaining, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_bodies_cost_a_bound_of_their_size() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let cases: Vec<(&str, String)> = vec![
        ("empty descriptors", {
            let n = ((4 << 20) - 64) / 3;
            format!(
                r#"{{"domain":"d","descriptors":[{}{{}}]}}"#,
                "{},".repeat(n)
            )
        }),
        ("empty entries", {
            let n = ((4 << 20) - 64) / 3;
            format!(
                r#"{{"domain":"d","descriptors":[{{"entries":[{}{{}}]}}]}}"#,
                "{},".repeat(n)
            )
        }),
        ("one-member objects in an unknown field", {
            let n = ((4 << 20) - 64) / 8;
            format!(r#"{{"domain":"d","x":[{}0]}}"#, r#"{"a":0},"#.repeat(n))
        }),
        // Just under the weight bound, so parsed: the shapes that cost the most a token.
        ("one-member objects under the bound", {
            let n = (MAX_JSON_WEIGHT - 64) / 10;
            format!(r#"{{"domain":"d","x":[{}0]}}"#, r#"{"a":0},"#.repeat(n))
        }),
        ("empty descriptors under the bound", {
            let n = (MAX_JSON_WEIGHT - 64) / 9;
            format!(
                r#"{{"domain":"d","descriptors":[{}{{}}]}}"#,
                "{},".repeat(n)
            )
        }),
        ("members under the bound", {
            // As many distinct members as fit in the body limit.
            let n = ((MAX_JSON_WEIGHT - 64) / 2).min(380_000);
            let members: String = (0..n).map(|i| format!(r#""{i:x}":0,"#)).collect();
            format!(r#"{{"domain":"d","x":{{{members}"e":0}}}}"#)
        }),
        ("zeros under the bound", {
            let n = MAX_JSON_WEIGHT - 64;
            format!(r#"{{"domain":"d","x":[{}0]}}"#, "0,".repeat(n))
        }),
        ("zeros in an unknown field", {
            let n = ((4 << 20) - 64) / 2;
            format!(r#"{{"domain":"d","x":[{}0]}}"#, "0,".repeat(n))
        }),
    ];
    // At the limits: 1,023 descriptors of 64 entries (deeper than any config path) and one
    // user, each field under both of its names.
    let entry = r#"{"key":"","value":""}"#;
    let deep = format!(
        r#"{{"entries":[{}],"hitsAddend":1,"hits_addend":1,"isNegativeHits":false,"is_negative_hits":false,"limit":null}}"#,
        vec![entry; 64].join(",")
    );
    let user = r#"{"entries":[{"key":"user","value":"j"}]}"#;
    let body = format!(
        r#"{{"domain":"d","descriptors":[{},{user}],"hitsAddend":1,"hits_addend":1}}"#,
        vec![deep.as_str(); 1023].join(",")
    );
    let (code, text, at_limits) = post_json(&s, "at the limits", &body).await;
    assert_eq!(code, 200, "{}", &text[..text.len().min(200)]);
    assert!(
        text.contains(r#""limitRemaining":2"#),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    for (what, body) in cases {
        let (code, text, peak) = post_json(&s, what, &body).await;
        assert_eq!(code, 400, "{what}: {}", &text[..text.len().min(200)]);
        // Those under the bound are parsed (and refused by the validation), the others
        // refused by their weight before any parse.
        let parsed = what.ends_with("under the bound");
        assert_eq!(
            !text.contains("too many JSON objects"),
            parsed,
            "{what}: {}",
            &text[..text.len().min(200)]
        );
        // A body costs at most a small multiple of what a request at the limits does.
        assert!(
            peak < 2 * at_limits,
            "{what}: peak {peak} bytes during the call, {at_limits} at the limits"
        );
    }
}

/// Posts `body` to `/json`: the status, the body of the answer, and the most bytes the process
/// held during the call beyond what it held before.
async fn post_json(s: &Rls, what: &str, body: &str) -> (u16, String, usize) {
    let before = alloc::reset_peak();
    let (code, text) = support::http(s.ready.http, "POST", "/json", body).await;
    let peak = alloc::peak().saturating_sub(before);
    eprintln!(
        "/json, {what} ({} bytes): {code}, peak {peak} bytes beyond the body",
        body.len()
    );
    (code, text, peak)
}

/// A method the service does not have is answered `UNIMPLEMENTED`, as tonic's generated
/// servers answer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_is_unimplemented() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let mut grpc = raw_client(&s).await;
    let r = grpc
        .unary(
            tonic::Request::new(request("d", &[descriptor(&[("user", "u")])])),
            PathAndQuery::from_static(
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldNotRateLimit",
            ),
            Raw,
        )
        .await;
    assert_eq!(
        r.map(|_| ()).unwrap_err().code(),
        tonic::Code::Unimplemented
    );
}

/// Streams on one HTTP/2 connection that each announce a message of 4 MiB (the 5-byte gRPC
/// prefix of a message) and send `sent` bytes of it, left open: what the process then holds
/// beyond what it held before, and the connection (kept open until dropped).
async fn announced(
    s: &Rls,
    streams: usize,
    sent: usize,
) -> (
    usize,
    h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>,
    Vec<h2::SendStream<tonic_prost::prost::bytes::Bytes>>,
) {
    announced_then(s, streams, sent, std::time::Duration::from_millis(500)).await
}

/// [`announced`], waiting `settle` for the server to read what was sent.
async fn announced_then(
    s: &Rls,
    streams: usize,
    sent: usize,
    settle: std::time::Duration,
) -> (
    usize,
    h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>,
    Vec<h2::SendStream<tonic_prost::prost::bytes::Bytes>>,
) {
    use tonic_prost::prost::bytes::Bytes;
    let tcp = tokio::net::TcpStream::connect(s.ready.grpc).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let before = alloc::reset_peak();
    let mut open = Vec::new();
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&(4u32 << 20).to_be_bytes());
    prefix.resize(5 + sent, 0x0a);
    let prefix = Bytes::from(prefix);
    for _ in 0..streams {
        client = client.ready().await.unwrap();
        let req = grpc_post(s);
        let (_resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(prefix.clone(), false).unwrap();
        open.push(send);
    }
    // Let the server read what was sent.
    tokio::time::sleep(settle).await;
    (alloc::peak().saturating_sub(before), client, open)
}

/// A message's bytes are buffered before it is decoded, and the decoder reserves the length a
/// message's prefix announces as soon as it reads it: unbounded, 200 streams of one connection
/// each announcing 4 MiB would reserve 800 MiB for a few kilobytes sent, resident once filled. What one connection's unfinished messages hold is bounded
/// (`MAX_CONNECTION_MESSAGE_BYTES`), and so is what every connection's hold together
/// (`MAX_PORT_MESSAGE_BYTES`): the streams past the bound wait, unread, until their body
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_announced_on_many_streams_hold_a_bounded_memory() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let (peak, _c, _open) = announced(&s, 200, 0).await;
    eprintln!("200 streams announcing 4 MiB each: peak {peak} bytes");
    assert!(peak < 32 << 20, "peak {peak} bytes");
    // With 64 KiB of each sent (the stream's flow-control window allows it).
    let (peak, _c2, _open2) = announced(&s, 200, 64 << 10).await;
    eprintln!("200 streams sending 64 KiB of 4 MiB each: peak {peak} bytes");
    assert!(peak < 32 << 20, "peak {peak} bytes");
    // An ordinary call on another connection meanwhile is decided.
    let mut grpc = raw_client(&s).await;
    let r = grpc
        .unary(
            tonic::Request::new(request("d", &[descriptor(&[("user", "a")])])),
            PathAndQuery::from_static(METHOD),
            Raw,
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
}

/// The head of a `ShouldRateLimit` call on `s`'s gRPC port, for a raw HTTP/2 client.
fn grpc_post(s: &Rls) -> tonic::codegen::http::Request<()> {
    tonic::codegen::http::Request::post(format!("http://{}{METHOD}", s.ready.grpc))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// Calls `ShouldRateLimit` on `client`'s connection as Envoy sends a call: the message and the
/// end of the stream in one DATA frame. The answer, if it comes within 3 s.
async fn call_at_once(
    s: &Rls,
    client: h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>,
    message: &[u8],
) -> Option<RateLimitResponse> {
    use tonic_prost::prost::bytes::Bytes;
    let mut client = client.ready().await.unwrap();
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    let req = grpc_post(s);
    let (resp, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::from(body), true).unwrap();
    let (data, trailers) = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        let mut body = resp.await.unwrap().into_body();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.unwrap().expect("trailers");
        (data, trailers)
    })
    .await
    .ok()?;
    assert_eq!(trailers["grpc-status"], "0");
    Some(RateLimitResponse::decode(&data[5..]).unwrap())
}

/// A connection to the gRPC port.
async fn connect(s: &Rls) -> h2::client::SendRequest<tonic_prost::prost::bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(s.ready.grpc).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client
}

/// Streams reset by the client (RST_STREAM) mid-message give back what they took of the
/// connection's budget: after 200 streams announcing 4 MiB each are reset, a call on the same
/// connection is read and decided at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_streams_give_their_budget_back() {
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let (_, client, open) = announced(&s, 200, 16).await;
    for mut send in open {
        send.send_reset(h2::Reason::CANCEL);
    }
    let message = request("d", &[descriptor(&[("user", "a")])]);
    let r = call_at_once(&s, client, &message)
        .await
        .expect("the call is answered while the reset streams' budget is free");
    assert_eq!(r.overall_code, OK);
}

/// Streams that hold the port's whole budget (33 connections, two 4 MiB messages granted on
/// each and a third waiting) do not hold up calls sent at once: a call whose message arrives
/// whole, with its prefix and the end of the stream (as Envoy sends a call), takes no budget
/// and is decided at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sent_at_once_do_not_wait_for_a_held_budget() {
    let _turn = SERIAL.lock().await;
    // Body deadlines far beyond the test, so that no held message expires meanwhile.
    let s = Rls::start_with(CONFIG, |o| {
        o.body_timeout = std::time::Duration::from_secs(60)
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..33 {
        held.push(announced_then(&s, 3, 0, std::time::Duration::ZERO).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let message = request("d", &[descriptor(&[("user", "a")])]);
    let r = call_at_once(&s, connect(&s).await, &message)
        .await
        .expect("decided while the budget is held");
    assert_eq!(r.overall_code, OK);
    drop(held);
}

/// Whole messages whose streams withhold their end: tonic decodes each message, then waits
/// for the end of its stream before handing it over, so each such stream holds its decoded
/// request, up to some 50 times its wire size: each such stream takes what its decoded
/// request may hold from the budgets, so 200 streams of one connection, each a whole 46 KB
/// message of 7,680 empty entries, hold what one connection's budget allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_withholding_their_end_hold_a_bounded_memory() {
    use tonic_prost::prost::bytes::Bytes;
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let d = descriptor(&vec![("", ""); 64]);
    let message = request("d", &vec![d; 120]);
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    let body = Bytes::from(body);
    let mut client = connect(&s).await;
    let before = alloc::reset_peak();
    let mut open = Vec::new();
    for _ in 0..200 {
        client = client.ready().await.unwrap();
        let req = grpc_post(&s);
        let (_resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(body.clone(), false).unwrap();
        open.push(send);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    let peak = alloc::peak().saturating_sub(before);
    eprintln!("200 whole messages of 46 KB, each stream's end withheld: peak {peak} bytes");
    assert!(peak < 32 << 20, "peak {peak} bytes");
}

/// `/json` bodies are collected (up to 4 MiB) before they are read, so 300 connections each
/// sending 3 MiB of a body that never ends would hold 900 MiB unbounded. What unfinished bodies
/// hold on the HTTP port is bounded by the port's budget (`MAX_PORT_MESSAGE_BYTES`, 256 MiB), plus the
/// frame each waiting body has read; the bodies past it wait, unread, until their deadline.
/// An ordinary `/json` request meanwhile (its body with its headers) is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_bodies_on_many_connections_hold_a_bounded_memory() {
    use tokio::io::AsyncWriteExt;
    let _turn = SERIAL.lock().await;
    let s = Rls::start(CONFIG).await;
    let before = alloc::reset_peak();
    let sent: std::sync::Arc<[u8]> = vec![b' '; 3 << 20].into();
    let writers: Vec<_> = (0..300)
        .map(|_| {
            let (addr, sent) = (s.ready.http, sent.clone());
            tokio::spawn(async move {
                let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
                let head = "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                            Content-Length: 4000000\r\n\r\n";
                c.write_all(head.as_bytes()).await.unwrap();
                // Blocks once the server stops reading; the connection stays open.
                let _ = c.write_all(&sent).await;
                std::future::pending::<()>().await;
                drop(c);
            })
        })
        .collect();
    // Until what the process holds stops growing (it reads what it may within a few seconds).
    let (mut last, mut still) = (0, 0);
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = alloc::peak().saturating_sub(before);
        still = if now == last { still + 1 } else { 0 };
        if still == 10 {
            break;
        }
        last = now;
    }
    let peak = alloc::peak().saturating_sub(before);
    eprintln!("300 connections sending 3 MiB of a 4 MB /json body each: peak {peak} bytes");
    let body =
        r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "json"}]}]}"#;
    let (code, text) = support::http(s.ready.http, "POST", "/json", body).await;
    for w in writers {
        w.abort();
    }
    assert_eq!(code, 200, "{text}");
    assert!(peak < 512 << 20, "peak {peak} bytes");
}
