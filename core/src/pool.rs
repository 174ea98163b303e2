//! The worker pools that compressing and decompressing run on.
//!
//! With the `parallel` feature (the default) they are rayon pools; without
//! it, the same calls run one after another on the calling thread, and
//! [`prelude`] gives `par_iter` the meaning of `iter`, so the code that
//! uses them is the same in both builds.

#[cfg(all(feature = "parallel", feature = "search"))]
pub(crate) use rayon::join;

/// Both closures, one after the other (the `parallel` feature runs them
/// side by side).
#[cfg(all(not(feature = "parallel"), feature = "search"))]
pub(crate) fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA,
    B: FnOnce() -> RB,
{
    (a(), b())
}

/// `par_iter` and friends: rayon's, or plain iterators without `parallel`.
pub(crate) mod prelude {
    #[cfg(feature = "parallel")]
    pub(crate) use rayon::prelude::*;

    /// `par_iter` on a slice, one item after another.
    #[cfg(not(feature = "parallel"))]
    pub(crate) trait SeqParIter<T> {
        fn par_iter(&self) -> std::slice::Iter<'_, T>;
    }

    #[cfg(not(feature = "parallel"))]
    impl<T> SeqParIter<T> for [T] {
        fn par_iter(&self) -> std::slice::Iter<'_, T> {
            self.iter()
        }
    }
}

/// Where parallel work runs: a pool of the threads asked for, shared by
/// every call that asks for as many (or rayon's global pool, should a
/// thread fail to start).
#[cfg(feature = "parallel")]
pub(crate) enum Workers {
    Global,
    Own(std::sync::Arc<rayon::ThreadPool>),
}

#[cfg(feature = "parallel")]
impl Workers {
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Workers::Global => f(),
            Workers::Own(p) => p.install(f),
        }
    }

    /// A rayon scope whose body runs on the calling thread while its
    /// spawned jobs run on the workers.
    #[cfg(feature = "search")]
    pub fn in_place_scope<'scope, R>(&self, op: impl FnOnce(&rayon::Scope<'scope>) -> R) -> R {
        match self {
            Workers::Global => rayon::in_place_scope(op),
            Workers::Own(p) => p.in_place_scope(op),
        }
    }

    pub fn current_num_threads(&self) -> usize {
        match self {
            Workers::Global => rayon::current_num_threads(),
            Workers::Own(p) => p.current_num_threads(),
        }
    }
}

/// Workers for `n` threads (0 = all cores): one pool per number of threads
/// for the life of the process. A pool per file would start threads per
/// file, and a thread outside the pool handing each batch of regions over
/// and sleeping until it is done spends much of a small file's time waking
/// threads.
#[cfg(feature = "parallel")]
pub(crate) fn pool(n: usize) -> Workers {
    static POOLS: std::sync::Mutex<Vec<(usize, std::sync::Arc<rayon::ThreadPool>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(k, _)| *k == n) {
        return Workers::Own(p.clone());
    }
    match rayon::ThreadPoolBuilder::new().num_threads(n).build() {
        Ok(p) => {
            let p = std::sync::Arc::new(p);
            pools.push((n, p.clone()));
            Workers::Own(p)
        }
        Err(_) => Workers::Global,
    }
}

/// The threads of the pool the caller runs on (1 without `parallel`).
#[cfg(feature = "search")]
pub(crate) fn current_num_threads() -> usize {
    #[cfg(feature = "parallel")]
    return rayon::current_num_threads();
    #[cfg(not(feature = "parallel"))]
    1
}

/// Without `parallel`: the calling thread, whatever the number asked for.
#[cfg(not(feature = "parallel"))]
pub(crate) struct Workers;

/// A scope whose jobs run at once, on the calling thread.
#[cfg(all(not(feature = "parallel"), feature = "search"))]
pub(crate) struct Scope;

#[cfg(all(not(feature = "parallel"), feature = "search"))]
impl Scope {
    pub fn spawn(&self, job: impl FnOnce(&Scope)) {
        job(self)
    }
}

#[cfg(not(feature = "parallel"))]
impl Workers {
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    #[cfg(feature = "search")]
    pub fn in_place_scope<R>(&self, op: impl FnOnce(&Scope) -> R) -> R {
        op(&Scope)
    }

    pub fn current_num_threads(&self) -> usize {
        1
    }
}

/// Without `parallel`: the calling thread.
#[cfg(not(feature = "parallel"))]
pub(crate) fn pool(_n: usize) -> Workers {
    Workers
}
