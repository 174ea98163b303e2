//! Work on a file's regions by several threads, handed out in order: how
//! both compression and decompression share their threads.
//!
//! `threads - 1` helpers and the thread that hands results out take items
//! in order as they come free, at most so many bytes and items ahead of
//! the next one handed out (always at least one item). The handing thread
//! hands each item out (to hash and write it) as soon as it is ready and
//! works on another while the next is not: as many threads busy as asked
//! for, none waiting on a batch's slowest item, and the writing on a core
//! of its own only as long as it takes. The first error, in order, ends it.

use std::sync::{Condvar, Mutex, MutexGuard};

/// How far work may run ahead of the item handed out last.
pub(crate) struct Ahead {
    /// Bytes (of the items' sizes) claimed and not yet handed out.
    pub bytes: u64,
    /// Items claimed and not yet handed out.
    pub items: usize,
}

/// What the threads share: item `i` is worked on with the resource
/// `next(size)` gave it when claimed (a decoded region's buffer, in order),
/// giving a `T` or an `E`.
pub(crate) struct InOrder<'a, B, N, T, E> {
    sizes: &'a [u64],
    ahead: Ahead,
    state: Mutex<Claims<B, N, T, E>>,
    changed: Condvar,
}

struct Claims<B, N, T, E> {
    /// Gives each item its resource, in order of claims.
    next: N,
    /// Items claimed (the next one to claim).
    claimed: usize,
    /// Items handed out.
    handed: usize,
    /// Bytes of items claimed and not yet handed out.
    in_flight: u64,
    /// An item failed (or handing one out did): claim no more.
    failed: bool,
    /// Each item's result, until handed out.
    done: Vec<Option<Result<T, E>>>,
    _resource: std::marker::PhantomData<fn() -> B>,
}

impl<'a, B, N, T, E> InOrder<'a, B, N, T, E>
where
    N: FnMut(usize) -> B,
{
    pub(crate) fn new(sizes: &'a [u64], ahead: Ahead, next: N) -> Self {
        InOrder {
            sizes,
            ahead,
            state: Mutex::new(Claims {
                next,
                claimed: 0,
                handed: 0,
                in_flight: 0,
                failed: false,
                done: (0..sizes.len()).map(|_| None).collect(),
                _resource: std::marker::PhantomData,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Claims<B, N, T, E>> {
        // A thread that panicked holding the lock left nothing half-done
        // that matters: its scope re-raises the panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'g>(
        &self,
        g: MutexGuard<'g, Claims<B, N, T, E>>,
    ) -> MutexGuard<'g, Claims<B, N, T, E>> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// The next item to work on and its resource, if the window allows one
    /// more (always one, however large, when none is in flight).
    fn claim(&self, st: &mut Claims<B, N, T, E>) -> Option<(usize, B)> {
        let i = st.claimed;
        let len = *self.sizes.get(i)?;
        let full = st.in_flight + len > self.ahead.bytes || i - st.handed >= self.ahead.items;
        if st.failed || (st.in_flight > 0 && full) {
            return None;
        }
        st.claimed += 1;
        st.in_flight += len;
        Some((i, (st.next)(len as usize)))
    }

    /// Work on item `i` and say so. Should the work panic, the item fails
    /// first with `panicked()`, so that no thread waits for it forever,
    /// and the panic goes on (the threads' scope raises it).
    fn work_one(
        &self,
        i: usize,
        r: B,
        work: &impl Fn(usize, B) -> Result<T, E>,
        panicked: fn() -> E,
    ) {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(i, r)));
        let mut st = self.lock();
        let (out, panic) = match out {
            Ok(out) => (out, None),
            Err(p) => (Err(panicked()), Some(p)),
        };
        st.failed |= out.is_err();
        st.done[i] = Some(out);
        self.changed.notify_all();
        drop(st);
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
    }

    /// A helper's loop: claim items and work on them until none is left or
    /// one failed.
    pub(crate) fn help(&self, work: &impl Fn(usize, B) -> Result<T, E>, panicked: fn() -> E) {
        loop {
            let mut st = self.lock();
            let (i, r) = loop {
                if st.failed || st.claimed == self.sizes.len() {
                    return;
                }
                if let Some(c) = self.claim(&mut st) {
                    break c;
                }
                st = self.wait(st);
            };
            drop(st);
            self.work_one(i, r, work, panicked);
        }
    }

    /// The handing thread's loop: hand every item's result to `hand` in
    /// order, working on others while the next is not ready. On any
    /// return, the helpers stop at their next claim.
    pub(crate) fn hand_out(
        &self,
        work: &impl Fn(usize, B) -> Result<T, E>,
        panicked: fn() -> E,
        mut hand: impl FnMut(usize, T) -> Result<(), E>,
    ) -> Result<(), E> {
        let _stop = Stop(self);
        for (i, &len) in self.sizes.iter().enumerate() {
            let out = loop {
                let mut st = self.lock();
                if let Some(out) = st.done[i].take() {
                    break out;
                }
                match self.claim(&mut st) {
                    Some((j, r)) => {
                        drop(st);
                        self.work_one(j, r, work, panicked);
                    }
                    None => drop(self.wait(st)),
                }
            };
            hand(i, out?)?;
            let mut st = self.lock();
            st.handed = i + 1;
            st.in_flight -= len;
            self.changed.notify_all();
        }
        Ok(())
    }
}

/// Marks the work failed when dropped (the handing thread's return, early
/// or not), so the helpers stop.
struct Stop<'s, 'a, B, N: FnMut(usize) -> B, T, E>(&'s InOrder<'a, B, N, T, E>);

impl<B, N: FnMut(usize) -> B, T, E> Drop for Stop<'_, '_, B, N, T, E> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.failed = true;
        self.0.changed.notify_all();
    }
}
