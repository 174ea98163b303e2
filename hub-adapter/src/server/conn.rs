//! Listeners and connections: binding, the per-address and total connection caps, and the router each listener serves.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Uri};

use super::limits::{MAX_HEAD_BUF, SHUTDOWN_GRACE};
use super::{State, cdn, handle, s3};
use crate::error::{HubError, Result};

/// Open connections, in all and per client address.
#[derive(Default)]
pub(super) struct ConnCount {
    total: usize,
    by_addr: HashMap<IpAddr, usize>,
}

/// Gives a connection's place back when it ends.
pub(super) struct ConnGuard {
    count: Arc<Mutex<ConnCount>>,
    ip: IpAddr,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut c = self.count.lock().unwrap_or_else(|p| p.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_addr.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_addr.remove(&self.ip);
            }
        }
    }
}

/// Answered, without reading anything, on a connection over a cap.
pub(super) const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n\
content-length: 0\r\nconnection: close\r\n\r\n";

/// How long the accept loop waits after a failed accept (out of file
/// descriptors, say) before it tries again, so it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Which listener a connection came in on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Listener {
    /// The Hub's API and `resolve`.
    Hub,
    /// Strict mode's CDN.
    Cdn,
    /// Strict mode's S3.
    S3,
}

pub(super) async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HubError::io(PathBuf::from(addr.to_string()), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| HubError::io(PathBuf::from(addr.to_string()), e))?;
    Ok((listener, bound))
}

/// The app answering a connection from `ip` on listener `kind`.
pub(super) fn app(kind: Listener, st: Arc<State>, ip: IpAddr) -> axum::Router {
    axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Body| {
            let st = st.clone();
            async move {
                match kind {
                    Listener::Hub => handle(st, ip, method, uri, headers, body).await,
                    Listener::Cdn => cdn::handle(st, method, uri, headers).await,
                    Listener::S3 => s3::handle(st, method, uri, headers, body).await,
                }
            }
        },
    )
}

/// Accept connections on `listener` until `stop` changes, then let the
/// requests in flight finish (a moment at most).
pub(super) async fn accept_loop(
    listener: tokio::net::TcpListener,
    kind: Listener,
    st: Arc<State>,
    count: Arc<Mutex<ConnCount>>,
    mut stop_rx: tokio::sync::watch::Receiver<bool>,
) {
    let header_timeout = st.opts.header_read_timeout;
    let limits = st.opts.limits.clone();
    let mut conns = tokio::task::JoinSet::new();
    // hyper's own loop rather than `axum::serve`, which sets no timer and so
    // no header-read timeout: a client that opens connections and never
    // finishes its headers (slowloris) would hold them forever.
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // E.g. out of file descriptors: wait, then go on.
                Err(_) => {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            _ = stop_rx.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        // IPv6 clients are counted by their /64: one host holds many
        // addresses of its prefix.
        let ip = match peer.ip() {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
                let o = v6.octets();
                let mut p = [0u8; 16];
                p[..8].copy_from_slice(&o[..8]);
                IpAddr::V6(std::net::Ipv6Addr::from(p))
            }
            IpAddr::V6(v6) => IpAddr::V4(
                v6.to_ipv4_mapped()
                    .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            ),
            v4 => v4,
        };
        let admitted = {
            let mut c = count.lock().unwrap_or_else(|p| p.into_inner());
            let mine = c.by_addr.get(&ip).copied().unwrap_or(0);
            let ok = c.total < limits.max_connections && mine < limits.max_connections_per_addr;
            if ok {
                c.total += 1;
                *c.by_addr.entry(ip).or_insert(0) += 1;
            }
            ok
        };
        if !admitted {
            // Over a cap: a 503 if the socket takes it at once, and close.
            let _ = stream.try_write(BUSY);
            continue;
        }
        let guard = ConnGuard {
            count: count.clone(),
            ip,
        };
        let svc = hyper_util::service::TowerToHyperService::new(app(kind, st.clone(), ip));
        let mut stop = stop_rx.clone();
        conns.spawn(async move {
            let _guard = guard;
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEAD_BUF);
            let conn = b
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.changed() => {}
            }
            // Stopping: an idle connection closes now, a request in
            // flight is answered first.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    drop(st);
    // Stop: requests in flight get a moment to finish.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
}
