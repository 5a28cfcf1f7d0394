//! [`Cost`]: how many tokens a request takes.

use http::Request;

/// The number of tokens a request takes: [`UnitCost`] (1, the default) or any
/// `Fn(&Request<B>) -> u64` (by method, route, body size, …). Cost 0 is always admitted; a cost
/// above the burst is refused without a `Retry-After` (no wait would admit it).
///
/// `tollgate::Smooth` has no burst to refuse against: it follows Guava and admits a request of
/// any cost whenever it is free, and the requests after it wait until that cost is paid
/// (`cost / rate`; one request of cost `u64::MAX` shuts it for the 285 years its clock
/// saturates at). Behind a `Smooth`, cap any cost a client can raise (a body size, a header)
/// in the closure.
///
/// ```
/// use http::{Method, Request};
/// use tollgate_tower::{Cost, UnitCost};
/// let by_method = |req: &Request<()>| if req.method() == Method::GET { 1 } else { 5 };
/// let post = Request::post("/").body(()).unwrap();
/// assert_eq!(by_method.cost(&post), 5);
/// assert_eq!(UnitCost.cost(&post), 1);
/// ```
pub trait Cost<B> {
    /// The tokens `req` takes.
    fn cost(&self, req: &Request<B>) -> u64;
}

/// Every request costs one token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitCost;

impl<B> Cost<B> for UnitCost {
    #[inline]
    fn cost(&self, _req: &Request<B>) -> u64 {
        1
    }
}

impl<B, F: Fn(&Request<B>) -> u64> Cost<B> for F {
    #[inline]
    fn cost(&self, req: &Request<B>) -> u64 {
        self(req)
    }
}
