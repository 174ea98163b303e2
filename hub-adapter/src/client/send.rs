//! Sending a request: the token only to the own endpoint, retries with backoff on 429/5xx and dropped connections, rate-limit pauses shared by clones, redirects followed by hand, and the status-to-error mapping.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

use crate::error::{HubError, Result};

use super::{HubClient, MAX_STALLS, STALL_TIMEOUT};

/// How often and how patiently requests are retried on 429, 5xx and
/// dropped connections.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts after the first one.
    pub max_retries: u32,
    /// First backoff delay; doubled after each failure, capped at `max_delay`.
    pub base_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
}

/// Retries by default: with the doubling delays from
/// [`DEFAULT_BASE_DELAY`], a server away for about 15 s is waited out.
const DEFAULT_MAX_RETRIES: u32 = 6;
/// First backoff delay by default: short enough that a dropped connection
/// costs little.
const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(250);
/// Longest backoff delay by default: a wait that long is a server down,
/// not a blip.
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(20);
/// Doublings of the backoff delay at most (the factor stays in a `u32`).
const MAX_DOUBLINGS: u32 = 16;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: DEFAULT_MAX_RETRIES,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
        }
    }
}

impl RetryPolicy {
    /// Set the number of retries.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }
    /// Set the first backoff delay.
    pub fn base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }
    pub(super) fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.min(MAX_DOUBLINGS))
            .unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Added to the wait a 429 asks for, so the next request lands in the new
/// window.
pub(super) const RATE_LIMIT_MARGIN: Duration = Duration::from_secs(1);

/// Redirects followed for one request.
pub(super) const MAX_REDIRECTS: usize = 5;

/// Largest JSON answer accepted from a server (tree pages, manifests).
pub const MAX_JSON_LEN: usize = 64 << 20;

/// Bytes of an error answer's body read for its message (an error page
/// says what it has to say in its start).
const MAX_ERROR_BODY: usize = 64 << 10;

/// Bytes of an error message kept (a whole HTML page is not a message).
const MAX_ERROR_MESSAGE: usize = 300;

/// Whether an answer may go away if asked again: 429 and 5xx, but not
/// serve's 500 for a damaged store object (`x-error-code: StoreDamaged`),
/// which retries only delay. (Other codes on a 500 are retried: a proxy or
/// the Hub may name a transient one.)
pub(super) fn is_retryable(resp: &Response) -> bool {
    match resp.status().as_u16() {
        429 | 502 | 503 | 504 => true,
        500 => resp
            .headers()
            .get("x-error-code")
            .is_none_or(|c| c != crate::server::STORE_DAMAGED),
        _ => false,
    }
}

/// Why [`HubClient::execute_following`] gave up without an answer.
pub(super) enum Exec {
    Stalled,
    TooManyRedirects,
}

/// Where a redirect answer points, resolved against the request's URL.
pub(super) fn redirect_target(resp: &Response, url: &reqwest::Url) -> Option<reqwest::Url> {
    if !resp.status().is_redirection() {
        return None;
    }
    let loc = resp.headers().get("location")?.to_str().ok()?;
    url.join(loc).ok()
}

/// `scheme://host:port` of a URL (for messages).
pub(super) fn origin_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_string())
}

/// How long a 429 asks to wait: `Retry-After`, else the `t` of the Hub's
/// `RateLimit: "api";r=0;t=<seconds>` header.
pub(super) fn rate_limit_wait(h: &HeaderMap) -> Option<Duration> {
    retry_after(h).or_else(|| {
        let v = h.get("ratelimit")?.to_str().ok()?;
        v.split([';', ','])
            .find_map(|p| p.trim().strip_prefix("t="))
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    })
}

pub(super) fn retry_after(h: &HeaderMap) -> Option<Duration> {
    h.get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

pub(super) async fn read_limited(
    mut resp: Response,
    limit: usize,
    stall: Duration,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(stall, resp.chunk())
            .await
            .map_err(|_| format!("no bytes for {} s", stall.as_secs_f64().ceil()))?;
        let Some(c) = next.map_err(|e| e.to_string())? else {
            break;
        };
        if out.len() + c.len() > limit {
            return Err(format!("answer longer than {limit} bytes"));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// Turn an error status into a [`HubError`], reading `X-Error-Code`.
pub(super) async fn check(
    resp: Response,
    repo: &str,
    file: Option<&str>,
    revision: Option<&str>,
    what: &'static str,
    client: &HubClient,
) -> Result<Response> {
    let endpoint = client.endpoint.as_str();
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let code = resp
        .headers()
        .get("x-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let header_msg = resp
        .headers()
        .get("x-error-message")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match code.as_deref() {
        Some("RepoNotFound") => {
            return Err(HubError::RepoNotFound {
                repo: repo.into(),
                endpoint: endpoint.into(),
            });
        }
        Some("RevisionNotFound") => {
            return Err(HubError::RevisionNotFound {
                repo: repo.into(),
                revision: revision.unwrap_or("").into(),
            });
        }
        Some("EntryNotFound") => {
            return Err(HubError::EntryNotFound {
                repo: repo.into(),
                file: file.unwrap_or("").into(),
            });
        }
        _ => {}
    }
    if code.as_deref() == Some("GatedRepo") {
        return Err(HubError::Gated {
            repo: repo.into(),
            endpoint: endpoint.into(),
        });
    }
    if status == StatusCode::UNAUTHORIZED && !client.has_token() {
        return Err(HubError::TokenRequired {
            repo: repo.into(),
            status: status.as_u16(),
            hint: client.token_hint.to_string(),
        });
    }
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Err(HubError::Unauthorized {
            repo: repo.into(),
            status: status.as_u16(),
            hint: client.token_hint.to_string(),
        });
    }
    let body = read_limited(resp, MAX_ERROR_BODY, STALL_TIMEOUT)
        .await
        .unwrap_or_default();
    let mut message = header_msg.unwrap_or_else(|| {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned())
    });
    if message.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    if status == StatusCode::NOT_FOUND && file.is_some() && what != "LFS upload" {
        return Err(HubError::EntryNotFound {
            repo: repo.into(),
            file: file.unwrap_or("").into(),
        });
    }
    Err(HubError::Http {
        repo: repo.into(),
        file: file.map(String::from),
        what,
        status: status.as_u16(),
        message,
    })
}

impl HubClient {
    pub(super) fn request(&self, method: Method, url: &str) -> RequestBuilder {
        let rb = self.http.request(method, url);
        match &self.token {
            Some(t) if self.is_ours(url) => rb.bearer_auth(t),
            _ => rb,
        }
    }

    /// Whether `url` is on this client's endpoint (so may carry its token):
    /// `http://h:80` is not a prefix match for `http://h:8080/...`.
    pub(super) fn is_ours(&self, url: &str) -> bool {
        url.strip_prefix(&self.endpoint)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
    }

    /// Send with retries on connection errors, 429 and 5xx.
    pub(super) async fn send<F>(&self, repo: &str, what: &'static str, build: F) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        let mut stalls = 0u32;
        self.send_counting(repo, what, build, &mut stalls).await
    }

    /// [`HubClient::send`], counting stalled attempts in `stalls`, which a
    /// caller making several requests for one job (a download resumed after
    /// its body stalled) shares between them: [`MAX_STALLS`] in all.
    pub(super) async fn send_counting<F>(
        &self,
        repo: &str,
        what: &'static str,
        mut build: F,
        stalls: &mut u32,
    ) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        self.send_with(repo, what, &mut build, stalls, true).await
    }

    /// Send a request built by `build`, following redirects (the token only
    /// to this client's endpoint; a `HEAD` redirected to another host is
    /// answered with the redirect itself, whose headers describe the file).
    ///
    /// A 429 pauses every request of this client for what its `RateLimit`
    /// (or `Retry-After`) header asks, plus a margin, within
    /// [`HubClient::with_max_rate_limit_wait`]; it costs no attempt. A
    /// connection refused before the endpoint ever answered, or a host name
    /// that does not resolve, fails at once. Other dropped connections and
    /// 5xx are retried with backoff when `idempotent`; otherwise only what
    /// never reached the server (a failed connect) is sent again, and the
    /// caller finds out whether the rest took effect.
    pub(super) async fn send_with<F>(
        &self,
        repo: &str,
        what: &'static str,
        build: &mut F,
        stalls: &mut u32,
        idempotent: bool,
    ) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        let mut attempt = 0u32;
        let mut rate_waited = Duration::ZERO;
        loop {
            self.wait_for_pause().await;
            let req = build()?.build().map_err(|e| HubError::Network {
                repo: repo.into(),
                what,
                attempts: 0,
                source: Box::new(e),
            })?;
            let url = req.url().to_string();
            let outcome = match self.execute_following(req).await {
                Ok(o) => o,
                Err(Exec::Stalled) => {
                    *stalls += 1;
                    if *stalls >= MAX_STALLS {
                        return Err(self.stalled(repo, what, *stalls));
                    }
                    self.note_stall(repo, what, *stalls);
                    attempt += 1;
                    continue;
                }
                Err(Exec::TooManyRedirects) => {
                    return Err(HubError::protocol(repo, what, "too many redirects"));
                }
            };
            match outcome {
                // A 429 that says how long (the Hub's `RateLimit`, or
                // `Retry-After`) is waited out without costing an attempt;
                // one that does not is retried like a 5xx.
                Ok(resp)
                    if resp.status() == StatusCode::TOO_MANY_REQUESTS
                        && rate_limit_wait(resp.headers()).is_some() =>
                {
                    self.rate_limited(repo, what, &resp, &mut rate_waited)?;
                }
                Ok(resp)
                    if idempotent && is_retryable(&resp) && attempt < self.retry.max_retries =>
                {
                    let wait = retry_after(resp.headers())
                        .unwrap_or(self.retry.delay(attempt))
                        .min(self.retry.max_delay);
                    self.note(&format!(
                        "{repo}: {what}: the server answered {}; trying again in {:.1} s ({} of {})",
                        resp.status(),
                        wait.as_secs_f64(),
                        attempt + 1,
                        self.retry.max_retries
                    ));
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    self.back_off(repo, what, e, &url, attempt, idempotent)
                        .await?;
                    attempt += 1;
                }
            }
        }
    }

    /// Pause every request for what the 429 `resp` asks, plus
    /// [`RATE_LIMIT_MARGIN`]; the error once one call's waits would pass
    /// [`HubClient::with_max_rate_limit_wait`] (`waited` counts them).
    fn rate_limited(
        &self,
        repo: &str,
        what: &'static str,
        resp: &Response,
        waited: &mut Duration,
    ) -> Result<()> {
        let wait = rate_limit_wait(resp.headers()).unwrap_or_default() + RATE_LIMIT_MARGIN;
        if *waited + wait > self.max_rate_wait {
            return Err(HubError::RateLimited {
                repo: repo.into(),
                what,
                waited_secs: (*waited + wait).as_secs(),
                limit_secs: self.max_rate_wait.as_secs(),
            });
        }
        *waited += wait;
        self.pause_for(wait);
        self.note(&format!(
            "{repo}: {what}: rate limited by the server; every request waits {:.0} s",
            wait.as_secs_f64().ceil()
        ));
        Ok(())
    }

    /// After attempt `attempt` to `url` failed with `e`: wait before the
    /// next one when it may be sent again (see [`HubClient::send_with`]),
    /// else the error.
    async fn back_off(
        &self,
        repo: &str,
        what: &'static str,
        e: reqwest::Error,
        url: &str,
        attempt: u32,
        idempotent: bool,
    ) -> Result<()> {
        if let Some(reason) = self.unhealable(&e, url) {
            return Err(HubError::Unreachable {
                endpoint: origin_of(url),
                reason,
            });
        }
        if (idempotent || e.is_connect()) && attempt < self.retry.max_retries && !e.is_builder() {
            let wait = self.retry.delay(attempt);
            self.note(&format!(
                "{repo}: {what}: {e}; trying again in {:.1} s ({} of {})",
                wait.as_secs_f64(),
                attempt + 1,
                self.retry.max_retries
            ));
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        Err(HubError::Network {
            repo: repo.into(),
            what,
            attempts: attempt + 1,
            source: Box::new(e),
        })
    }

    /// Wait until a pause a 429 set is over.
    pub(super) async fn wait_for_pause(&self) {
        loop {
            let until = *self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
            match until {
                Some(t) if t > tokio::time::Instant::now() => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }

    /// Pause every request of this client (and its clones) for `d`.
    pub(super) fn pause_for(&self, d: Duration) {
        let t = tokio::time::Instant::now() + d;
        let mut p = self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_none_or(|old| old < t) {
            *p = Some(t);
        }
    }

    /// Execute `req`, following up to [`MAX_REDIRECTS`] redirects of a
    /// `GET` or `HEAD`; the token goes only to this client's endpoint. A
    /// request without a body that gets no headers within the stall
    /// timeout is a stalled attempt.
    pub(super) async fn execute_following(
        &self,
        mut req: reqwest::Request,
    ) -> std::result::Result<std::result::Result<Response, reqwest::Error>, Exec> {
        for _ in 0..=MAX_REDIRECTS {
            let next = req.try_clone();
            let method = req.method().clone();
            let url = req.url().clone();
            // A request without a body is answered at once or not at all:
            // no headers within the stall timeout is a stalled attempt. (An
            // upload may take long before the server answers.)
            let r = if req.body().is_none() {
                tokio::time::timeout(self.stall, self.http.execute(req))
                    .await
                    .map_err(|_| Exec::Stalled)?
            } else {
                self.http.execute(req).await
            };
            let resp = match r {
                Ok(resp) => resp,
                Err(e) => return Ok(Err(e)),
            };
            if self.is_ours(url.as_str()) {
                self.reached
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let Some(to) = redirect_target(&resp, &url) else {
                return Ok(Ok(resp));
            };
            let cross = to.origin() != url.origin();
            let follow = method == Method::GET || (method == Method::HEAD && !cross);
            let Some(mut n) = next.filter(|_| follow) else {
                return Ok(Ok(resp));
            };
            if !self.is_ours(to.as_str()) {
                n.headers_mut().remove(reqwest::header::AUTHORIZATION);
            }
            *n.url_mut() = to;
            req = n;
        }
        Err(Exec::TooManyRedirects)
    }

    /// Why a failed request will not succeed if sent again, if it will not:
    /// the host name does not resolve, or the endpoint refused the
    /// connection before it ever answered.
    pub(super) fn unhealable(&self, e: &reqwest::Error, url: &str) -> Option<String> {
        if !e.is_connect() {
            return None;
        }
        let mut dns = false;
        let mut refused = false;
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = src {
            let text = s.to_string();
            dns |= text.contains("dns error") || text.contains("failed to lookup address");
            refused |= s
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            src = s.source();
        }
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(String::from))
            .unwrap_or_default();
        if dns {
            return Some(format!(
                "cannot resolve the host name {host:?}: check the endpoint and the network"
            ));
        }
        let ours = self.is_ours(url);
        if refused && ours && !self.reached.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(
                "the connection was refused: is the server running, and is the endpoint right?"
                    .into(),
            );
        }
        None
    }

    pub(super) async fn json(
        &self,
        resp: Response,
        repo: &str,
        what: &'static str,
    ) -> Result<Value> {
        let bytes = read_limited(resp, MAX_JSON_LEN, self.stall)
            .await
            .map_err(|r| HubError::protocol(repo, what, r))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| HubError::protocol(repo, what, format!("bad JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_only_for_own_endpoint() {
        let c = HubClient::new("http://127.0.0.1:80", Some("t".into())).unwrap();
        assert!(c.is_ours("http://127.0.0.1:80/api/models/a/b"));
        assert!(c.is_ours("http://127.0.0.1:80"));
        assert!(!c.is_ours("http://127.0.0.1:8080/api/models/a/b"));
        assert!(!c.is_ours("http://127.0.0.1:80.evil.example/x"));
    }
}
