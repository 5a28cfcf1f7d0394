//! The connection: one multiplexed, self-reconnecting connection to a server, or a cluster
//! connection that routes each key to its slot's master (following MOVED/ASK).
//!
//! Accepted URLs:
//! * `redis://[user:password@]host:port[/db]` (and `unix:///path`): one server;
//! * `redis+cluster://[user:password@]host1:port1,host2:port2,...`: a Redis Cluster, given
//!   any of its nodes (the rest are discovered).

use crate::Error;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A cheap-to-clone handle; clones share the underlying connection(s).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Single(_) => "Conn::Single",
            Conn::Cluster(_) => "Conn::Cluster",
        })
    }
}

/// The node URLs of a `redis+cluster://` URL, or `None` for any other scheme.
pub(crate) fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>, Error> {
    let Some(rest) = url.strip_prefix("redis+cluster://") else {
        return Ok(None);
    };
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let hosts = hosts.trim_end_matches('/');
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("redis://{auth}{h}"))
        .collect();
    if nodes.is_empty() {
        return Err(Error::Url(format!("{url:?} names no cluster node")));
    }
    Ok(Some(nodes))
}

impl Conn {
    /// Connects within `connect_timeout`.
    pub(crate) async fn connect(url: &str, connect_timeout: Duration) -> Result<Conn, Error> {
        let connect = async {
            if let Some(nodes) = cluster_nodes(url)? {
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(connect_timeout)
                    .retries(2)
                    .build()
                    .map_err(|e| Error::Url(e.to_string()))?;
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(|e| Error::Connect(Box::new(e)))?;
                Ok(Conn::Cluster(conn))
            } else {
                let client = redis::Client::open(url).map_err(|e| Error::Url(e.to_string()))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    // No reply limit of the connection's own: every call runs under its
                    // decision's deadline (`timeout`, or one per 32 keys of a `decide_keys`
                    // call), which may be longer than any fixed limit, and a limit would end it
                    // sooner with another error. (A request abandoned at its deadline stays in
                    // the pipeline until the server answers or the connection drops, with or
                    // without a limit: the breaker stops sending to a server that does not
                    // answer.)
                    .set_response_timeout(None)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_millis(500))
                    .set_number_of_retries(4);
                let conn = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(|e| Error::Connect(Box::new(e)))?;
                Ok(Conn::Single(conn))
            }
        };
        tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| Error::Timeout(connect_timeout))?
    }

    /// Runs the script once on `key` with `args`: one EVALSHA built straight into one command
    /// buffer (the script's text is sent only when the server answers NOSCRIPT; see [`run`]).
    pub(crate) async fn eval(
        &self,
        lua: &Lua,
        key: &str,
        args: &[Arg<'_>],
    ) -> redis::RedisResult<Value> {
        self.eval_keys(lua, &[key], args).await
    }

    /// The script on several keys (on a cluster they must share one slot).
    pub(crate) async fn eval_keys(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[Arg<'_>],
    ) -> redis::RedisResult<Value> {
        let evalsha = command("EVALSHA", &lua.hash, keys, args);
        let eval = || command("EVAL", lua.source, keys, args);
        match self {
            Conn::Single(c) => run(&mut c.clone(), lua, &evalsha, eval, true).await,
            // No SCRIPT LOAD on a cluster: redis-rs sends it to every node and waits for all of
            // them, so one node that hangs (a failing master, a replica) failed every reload,
            // even on healthy nodes (see `run`).
            Conn::Cluster(c) => run(&mut c.clone(), lua, &evalsha, eval, false).await,
        }
    }
}

/// The script: its SHA-1, which EVALSHA names, and its source, which `SCRIPT LOAD` and EVAL
/// send; and the reload that the calls on one connection share (see [`run`]).
#[derive(Debug)]
pub(crate) struct Lua {
    hash: String,
    source: &'static str,
    reload: Reload,
}

impl Lua {
    pub(crate) fn new(source: &'static str) -> Lua {
        Lua {
            hash: redis::Script::new(source).get_hash().to_owned(),
            source,
            reload: Reload::default(),
        }
    }

    /// For a call whose EVALSHA answered NOSCRIPT, `seen` being what [`Reload::answered`] read
    /// before it was sent: waits for the `SCRIPT LOAD` that another call is sending, or sends
    /// one. Returns whether the latest load answered after `seen` was read (by this call or
    /// another) succeeded, so that EVALSHA is worth sending again; `false`: it failed, and the
    /// call falls back to EVAL.
    ///
    /// One load serves every call that found the script missing meanwhile: the lock is held for
    /// the length of one `SCRIPT LOAD`, and a call that gets it after a load was answered since
    /// it read `seen` sends none, whether that load succeeded or failed (a user the server's
    /// ACL forbids `SCRIPT LOAD`, a connection lost: the waiting calls do not each try again in
    /// turn, one round trip after another). A load whose caller is dropped (the guard goes with
    /// it) is not answered: the next call waiting loads.
    async fn reload<C: redis::aio::ConnectionLike>(&self, conn: &mut C, seen: u64) -> bool {
        let _loading = self.reload.lock.lock().await;
        if self.reload.answered.load(Ordering::Relaxed) != seen {
            return self.reload.ok.load(Ordering::Relaxed);
        }
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(self.source);
        let ok = load.query_async::<Value>(conn).await.is_ok();
        self.reload.ok.store(ok, Ordering::Relaxed);
        self.reload.answered.fetch_add(1, Ordering::Relaxed);
        ok
    }
}

#[cfg(feature = "test-support")]
impl Lua {
    /// Whether a call holds the reload lock (its `SCRIPT LOAD` sent or about to be).
    pub(crate) fn load_in_flight(&self) -> bool {
        self.reload.lock.try_lock().is_err()
    }
}

/// The script's reloads on one connection.
#[derive(Debug, Default)]
struct Reload {
    /// `SCRIPT LOAD`s answered so far, succeeded or failed (wrapping; only compared for
    /// equality, and 2^64 loads never happen between two reads of one call). Written only
    /// under `lock`; read without it before every EVALSHA: one relaxed load, so a call whose
    /// EVALSHA succeeds takes no lock and allocates nothing more. A stale read costs at most a
    /// re-run that answers NOSCRIPT (then EVAL) or a load of its own, never a wrong decision:
    /// the script runs at most once per call whatever this counter says.
    answered: AtomicU64,
    /// Whether the latest answered load succeeded. Written and read only under `lock`.
    ok: AtomicBool,
    /// Held by the one call sending `SCRIPT LOAD`, for the length of that load.
    lock: tokio::sync::Mutex<()>,
}

/// `name script 1 key args…` (`name`: EVALSHA with the hash, or EVAL with the source), sized
/// once: an integer takes at most 20 bytes.
fn command(name: &str, script: &str, keys: &[&str], args: &[Arg<'_>]) -> Cmd {
    let key_bytes: usize = keys.iter().map(|k| k.len() + 1).sum();
    let bytes = args
        .iter()
        .fold(name.len() + script.len() + 1 + key_bytes, |n, a| {
            n + match a {
                Arg::Str(s) => s.len(),
                Arg::Int(_) => 20,
            }
        });
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), bytes);
    cmd.arg(name).arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        match a {
            Arg::Str(s) => cmd.arg(*s),
            Arg::Int(n) => cmd.arg(*n),
        };
    }
    cmd
}

/// One script argument: a string, or an integer formatted into the command buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Str(&'a str),
    Int(u64),
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Runs `evalsha`; when the script is not cached (a restart, a failover, `SCRIPT FLUSH`: it
/// did not run), and `load` is set (one server), has it loaded with `SCRIPT LOAD` for the next
/// calls (a script cached so stays until the next flush: recent Redis versions evict, least
/// recently used first, only scripts that EVAL cached) and runs `evalsha` again; when that
/// answers NOSCRIPT too, the load failed, or `load` is not set (a cluster), runs `eval`, which
/// sends the source to the key's node alone (it caches the script there too) and cannot answer
/// NOSCRIPT. At most one of these calls runs the script (one does unless a call fails).
///
/// One `SCRIPT LOAD` serves every call on the connection that found the script missing (see
/// [`Lua::reload`]): the first to get NOSCRIPT sends it, and the calls that got NOSCRIPT
/// meanwhile wait for its answer and run `evalsha` again, so a server that has just lost the
/// script is sent its 29 KB source once, not once per call in flight, and the waiting calls
/// build no copy of it. A call waits for the load within its own deadline (its caller's
/// timeout ends the wait as it ends a call). When the load fails, the calls that waited for
/// it run `eval` (each sends the source, as a cluster's calls do); when its caller drops the
/// call, the next waiting call loads: no call waits on a load that nobody is sending. A
/// cluster gets neither: see below.
///
/// A second NOSCRIPT is not the decision's error: the cache can be flushed again between the
/// load and the re-run (other callers' and other clients' commands run in between), and a
/// server error opens the breaker, so decisions would take the `OnUnavailable` policy until a
/// probe got through. A cluster gets no `SCRIPT LOAD`: redis-rs routes it to every node and
/// waits for all, so one frozen master would make a decision on a healthy one run to its
/// timeout (`tests/cluster.rs`). redis-rs's `Script::load_async` is not
/// used: it `debug_assert`s that the server's hash is its own (true of every conforming server,
/// but a panic in a debug build otherwise).
async fn run<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    lua: &Lua,
    evalsha: &Cmd,
    eval: impl Fn() -> Cmd,
    load: bool,
) -> redis::RedisResult<Value> {
    // Read before EVALSHA is sent: a NOSCRIPT answer then means the script was lost after
    // every load answered before this read, and only a load answered after it may have put
    // the script back.
    let seen = lua.reload.answered.load(Ordering::Relaxed);
    match evalsha.query_async(conn).await {
        Err(e) if is_noscript(&e) => {}
        r => return r,
    }
    if load && lua.reload(conn, seen).await {
        match evalsha.query_async(conn).await {
            Err(e) if is_noscript(&e) => {}
            r => return r,
        }
    }
    eval().query_async(conn).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls() {
        assert_eq!(cluster_nodes("redis://a:1").unwrap(), None);
        assert_eq!(
            cluster_nodes("redis+cluster://a:1,b:2/").unwrap(),
            Some(vec!["redis://a:1".to_string(), "redis://b:2".to_string()])
        );
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@a:1").unwrap(),
            Some(vec!["redis://u:p@a:1".to_string()])
        );
        assert!(cluster_nodes("redis+cluster://").is_err());
    }
}
