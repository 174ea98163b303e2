//! Several files decoded (or hashed) at once: a file's own regions decode
//! in parallel, but its SHA-256 is one serial stream, so a folder of many
//! files keeps the cores busier one file a core than one file at a time
//! (2 cores, the 41 human-tfjs archives: 0.42 s against 0.57 s).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The threads `threads` stands for: itself, or every core for 0.
pub(super) fn thread_budget(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Run `job(item, threads)` on every item with a budget of `threads` (0:
/// every core): up to that many items at once, largest (by `size`) first,
/// each given an equal share of the threads (at least one). The results
/// in the items' order, or the first failure in that order: once a job
/// fails, no further item is started. One item, or one thread, runs them
/// one by one on this thread with the whole budget.
pub fn each_file<T, R, E>(
    items: &[T],
    threads: usize,
    size: impl Fn(&T) -> u64,
    job: impl Fn(&T, usize) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
{
    let budget = thread_budget(threads);
    let at_once = budget.min(items.len()).max(1);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(size(&items[i])));
    let results: Mutex<Vec<Option<Result<R, E>>>> =
        Mutex::new(items.iter().map(|_| None).collect());
    let failed = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    let work = |each: usize| {
        while !failed.load(Ordering::Relaxed) {
            let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                break;
            };
            let r = job(&items[i], each);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
        }
    };
    if at_once < 2 {
        // `threads` as given: 0 lets the codec size its own pool.
        work(threads);
    } else {
        let each = (budget / at_once).max(1);
        std::thread::scope(|s| {
            for _ in 0..at_once {
                s.spawn(|| work(each));
            }
        });
    }
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut done = Vec::with_capacity(results.len());
    let mut missing = false;
    for r in results {
        match r {
            Some(Ok(r)) => done.push(r),
            Some(Err(e)) => return Err(e),
            None => missing = true,
        }
    }
    // Items are left undone only after a failure, which returned above.
    debug_assert!(!missing);
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_in_order_with_a_share_of_the_threads() {
        let items: Vec<u64> = (1..=7).collect();
        let got = each_file(&items, 2, |&x| x, |&x, t| Ok::<_, ()>((x * 10, t))).unwrap();
        assert_eq!(
            got.iter().map(|x| x.0).collect::<Vec<_>>(),
            [10, 20, 30, 40, 50, 60, 70]
        );
        assert!(
            got.iter().all(|x| x.1 == 1),
            "two at once, one thread each: {got:?}"
        );
        // One item keeps the whole budget, 0 included.
        let one = each_file(&[5u64], 0, |&x| x, |_, t| Ok::<_, ()>(t));
        assert_eq!(one, Ok(vec![0]));
    }

    #[test]
    fn nothing_new_starts_after_a_failure() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let items: Vec<u64> = (0..50).collect();
        for threads in [1, 4] {
            let ran = AtomicUsize::new(0);
            // Largest first: 49 .. 41 succeed, 40 fails.
            let r = each_file(
                &items,
                threads,
                |&x| x,
                |&x, _| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    if x == 40 { Err(x) } else { Ok(x) }
                },
            );
            assert_eq!(r, Err(40));
            // At most the jobs already running when 40 failed also ran.
            let ran = ran.into_inner();
            assert!(
                (10..10 + threads).contains(&ran),
                "{threads} threads: {ran} jobs ran"
            );
        }
        // The first failure in the items' order is the one reported.
        let r = each_file(
            &items,
            1,
            |&x| x,
            |&x, _| if x < 45 { Err(x) } else { Ok(x) },
        );
        assert_eq!(r, Err(44));
    }
}
