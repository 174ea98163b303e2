//! The worker pools that compressing and decompressing run on.

/// Where parallel work runs: a pool of the threads asked for, shared by
/// every call that asks for as many (or rayon's global pool, should a
/// thread fail to start).
pub(crate) enum Workers {
    Global,
    Own(std::sync::Arc<rayon::ThreadPool>),
}

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
