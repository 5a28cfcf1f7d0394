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
use redis::{ErrorKind, Script, ServerErrorKind, Value};
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
                    // Decisions carry their own (shorter) timeout; this one only bounds how long
                    // a request abandoned by a timed-out decision occupies the pipeline.
                    .set_response_timeout(Some(Duration::from_secs(2)))
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
    /// buffer (the script's text is sent only when the server answers NOSCRIPT, then the same
    /// command again).
    pub(crate) async fn eval(
        &self,
        script: &Script,
        key: &str,
        args: &[Arg<'_>],
    ) -> redis::RedisResult<Value> {
        // Sized once: the name, the hash, the key count, the key and the arguments (an
        // integer takes at most 20 bytes).
        let bytes = args.iter().fold(7 + 40 + 1 + key.len(), |n, a| {
            n + match a {
                Arg::Str(s) => s.len(),
                Arg::Int(_) => 20,
            }
        });
        let mut cmd = redis::Cmd::with_capacity(4 + args.len(), bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(1).arg(key);
        for a in args {
            match a {
                Arg::Str(s) => cmd.arg(*s),
                Arg::Int(n) => cmd.arg(*n),
            };
        }
        match self {
            Conn::Single(c) => run(&mut c.clone(), script, &cmd).await,
            Conn::Cluster(c) => run(&mut c.clone(), script, &cmd).await,
        }
    }
}

/// One script argument: a string, or an integer formatted into the command buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Str(&'a str),
    Int(u64),
}

async fn run<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    script: &Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        r => r,
    }
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
