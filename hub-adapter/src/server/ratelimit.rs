//! Rate limits like the Hub's: a fixed window of `N` requests every `W`
//! seconds for each client address, over the Hub API (`/api/...`, the LFS
//! batch endpoint and `resolve`). A request past the budget gets `429 Too
//! Many Requests` with the IETF draft headers the Hub sends,
//! `RateLimit: "api";r=0;t=<seconds until the window resets>` and
//! `RateLimit-Policy: "fixed window";"api";q=N;w=W`, and no `Retry-After`:
//! clients must read `RateLimit` to know how long to wait. Requests within
//! the budget carry the same two headers with what is left.
//!
//! The window of a client address starts with its first request after the
//! previous window ended (fixed, not sliding: the whole budget is back at
//! once when it resets).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A budget of `requests` every `window`, per client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed in one window.
    pub requests: u32,
    /// The window (whole seconds, at least one).
    pub window: Duration,
}

impl RateLimit {
    /// `requests` every `window_secs` seconds (each at least 1).
    pub fn new(requests: u32, window_secs: u64) -> RateLimit {
        RateLimit {
            requests: requests.max(1),
            window: Duration::from_secs(window_secs.max(1)),
        }
    }

    /// The window in whole seconds.
    pub fn window_secs(&self) -> u64 {
        self.window.as_secs().max(1)
    }

    /// The `RateLimit-Policy` header's value.
    pub fn policy(&self) -> String {
        format!(
            "\"fixed window\";\"api\";q={};w={}",
            self.requests,
            self.window_secs()
        )
    }
}

impl std::str::FromStr for RateLimit {
    type Err = String;

    /// `N/SECS`, e.g. `20/2`: at most 20 requests every 2 seconds.
    fn from_str(s: &str) -> Result<RateLimit, String> {
        let bad = || format!("{s:?}: expected N/SECS, e.g. 500/300 (500 requests every 300 s)");
        let (n, w) = s.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let w: u64 = w.trim().trim_end_matches('s').parse().map_err(|_| bad())?;
        if n == 0 || w == 0 {
            return Err(bad());
        }
        Ok(RateLimit::new(n, w))
    }
}

/// What the limiter says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Served; `remaining` requests are left in the window, which resets in
    /// `reset` seconds.
    Allowed { remaining: u32, reset: u64 },
    /// Refused: the window resets in `reset` seconds.
    Limited { reset: u64 },
}

impl Verdict {
    /// The `RateLimit` header's value.
    pub(super) fn header(&self) -> String {
        match *self {
            Verdict::Allowed { remaining, reset } => format!("\"api\";r={remaining};t={reset}"),
            Verdict::Limited { reset } => format!("\"api\";r=0;t={reset}"),
        }
    }
}

struct Window {
    start: Instant,
    used: u32,
}

/// Client addresses whose windows are kept before ended ones are dropped.
const MAX_TRACKED: usize = 4096;

/// The windows of the client addresses seen.
pub(super) struct Limiter {
    rule: RateLimit,
    windows: Mutex<HashMap<IpAddr, Window>>,
}

impl Limiter {
    pub(super) fn new(rule: RateLimit) -> Limiter {
        Limiter {
            rule,
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn rule(&self) -> &RateLimit {
        &self.rule
    }

    /// Count a request from `ip` at `now`.
    pub(super) fn check(&self, ip: IpAddr, now: Instant) -> Verdict {
        let window = self.rule.window;
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if w.len() >= MAX_TRACKED && !w.contains_key(&ip) {
            w.retain(|_, x| now.saturating_duration_since(x.start) < window);
        }
        let e = w.entry(ip).or_insert(Window {
            start: now,
            used: 0,
        });
        if now.saturating_duration_since(e.start) >= window {
            *e = Window {
                start: now,
                used: 0,
            };
        }
        let left = window.saturating_sub(now.saturating_duration_since(e.start));
        // Whole seconds, rounded up: waiting `t` seconds is always enough.
        let reset = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        if e.used >= self.rule.requests {
            return Verdict::Limited {
                reset: reset.max(1),
            };
        }
        e.used += 1;
        Verdict::Allowed {
            remaining: self.rule.requests - e.used,
            reset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_spends_its_budget_then_resets() {
        let rule: RateLimit = "3/2".parse().unwrap();
        assert_eq!(rule, RateLimit::new(3, 2));
        assert_eq!(rule.policy(), "\"fixed window\";\"api\";q=3;w=2");
        for bad in ["", "3", "0/2", "3/0", "a/2", "3/-1"] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
        }
        let l = Limiter::new(rule);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(
            l.check(a, t0),
            Verdict::Allowed {
                remaining: 2,
                reset: 2
            }
        );
        l.check(a, t0 + ms(100));
        assert_eq!(
            l.check(a, t0 + ms(200)),
            Verdict::Allowed {
                remaining: 0,
                reset: 2
            }
        );
        let v = l.check(a, t0 + ms(1200));
        assert_eq!(v, Verdict::Limited { reset: 1 });
        assert_eq!(v.header(), "\"api\";r=0;t=1");
        // Another address has a budget of its own.
        assert!(matches!(
            l.check(b, t0 + ms(1200)),
            Verdict::Allowed { remaining: 2, .. }
        ));
        // Once the window is over, the whole budget is back.
        assert!(matches!(
            l.check(a, t0 + ms(2000)),
            Verdict::Allowed { remaining: 2, .. }
        ));
    }
}
