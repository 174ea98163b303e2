//! Learning a prior: a stratified sample of the tensors of some files,
//! searched with a large budget, the winning programs' productions counted.

use std::path::Path;

use super::segments::{read_sample, segments_of};
use crate::container::{DEFAULT_REGION_WORDS, SegmentDesc, SegmentKind};
use crate::error::EncodeError;
use crate::search::{HoleContext, Prior, Target, leaves_of, prior, productions_of, synthesize};

/// Tensors a prior is learned from when their groups are few (see
/// [`LearnOptions::max_tensors`]).
const MIN_LEARN_TENSORS: usize = 96;

/// Options for learning a prior.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LearnOptions {
    /// Search budget used on each sampled tensor (larger than the default).
    pub budget: u32,
    /// Most tensors sampled: two a group of tensors, at least 96 (or this
    /// maximum). A model of many groups needs more than 96 to tell its
    /// kinds of tensor apart; a larger sample sees more near-ties (the
    /// prior is less sure) and takes longer to learn.
    pub max_tensors: usize,
    /// Worker threads (0 = all).
    pub threads: usize,
    /// Descriptions of files whose tensors other files describe.
    pub sidecars: crate::Sidecars,
}

impl Default for LearnOptions {
    fn default() -> Self {
        LearnOptions {
            budget: 64,
            max_tensors: 192,
            threads: 0,
            sidecars: crate::Sidecars::default(),
        }
    }
}

impl LearnOptions {
    /// Set the search budget per sampled tensor.
    pub fn budget(mut self, b: u32) -> Self {
        self.budget = b;
        self
    }
    /// Set the most tensors sampled.
    pub fn max_tensors(mut self, n: usize) -> Self {
        self.max_tensors = n;
        self
    }
    /// Set the worker threads (0 = all).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the descriptions of files other files describe (found among
    /// the same files by [`Sidecars::find`](crate::Sidecars::find)).
    pub fn sidecars(mut self, s: crate::Sidecars) -> Self {
        self.sidecars = s;
        self
    }
}

impl Prior {
    /// Learn a prior from a stratified sample of the tensors of these files
    /// (every container a format reader knows; files with no tensors are
    /// skipped): tensors are grouped by dtype,
    /// role and size class, each group gets a share of the sample (see
    /// `quotas`) taken across its whole length (see `spread`), and the
    /// sample is searched with a large budget under the uniform prior, the
    /// winning programs' productions counted.
    pub fn learn(files: &[&Path], opts: &LearnOptions) -> Result<Prior, EncodeError> {
        use crate::pool::prelude::*;
        let mut groups: std::collections::BTreeMap<String, Vec<(usize, SegmentDesc)>> =
            Default::default();
        let mut opened = Vec::new();
        for (fi, path) in files.iter().enumerate() {
            let f = std::fs::File::open(path).map_err(|e| EncodeError::io(*path, e))?;
            // A file named safetensors must be one; any other is read by
            // whichever format reader knows it (or has no tensors).
            let strict = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
            let sidecar = opts.sidecars.get(path).map(|s| &**s);
            let segs = segments_of(&f, path, strict, sidecar)?;
            for s in segs {
                if s.kind == SegmentKind::Tensor {
                    let key = format!(
                        "{}|{}|{}",
                        s.dtype.name(),
                        prior::role(&s.name, s.shape.len()),
                        prior::bucket(s.len)
                    );
                    groups.entry(key).or_default().push((fi, s));
                }
            }
            opened.push(f);
        }
        let sizes: Vec<(usize, u64)> = groups
            .values()
            .map(|g| (g.len(), g.iter().map(|(_, s)| s.len).sum()))
            .collect();
        // Two tensors a group, at least MIN_LEARN_TENSORS and at most the
        // maximum: many kinds of tensor need more of them to be told apart.
        let sample =
            (2 * sizes.len()).clamp(MIN_LEARN_TENSORS.min(opts.max_tensors), opts.max_tensors);
        let quota = quotas(&sizes, sample);
        // Each group's share, spread over its whole length (and so over
        // every file), not its first tensors.
        let picked: Vec<(usize, SegmentDesc)> = groups
            .into_values()
            .zip(quota)
            .flat_map(|(g, q)| spread(g).into_iter().take(q))
            .collect();
        let uniform = Prior::uniform();
        let pool = crate::pool::pool(opts.threads);
        type Found = (
            Vec<(HoleContext, &'static str)>,
            Vec<(HoleContext, crate::entropy::Codec)>,
        );
        let found: Vec<Result<Found, EncodeError>> = pool.install(|| {
            picked
                .par_iter()
                .map(|(fi, s)| {
                    let (bytes, words) =
                        read_sample(&opened[*fi], s).map_err(|e| EncodeError::io(files[*fi], e))?;
                    let t = Target::of_segment(s, &bytes, &words, DEFAULT_REGION_WORDS);
                    let syn = synthesize(&t, &uniform, opts.budget);
                    Ok((productions_of(&t, &syn.shape), leaves_of(&t, &syn.shape)))
                })
                .collect()
        });
        let mut p = Prior::uniform();
        for f in found {
            let (prods, leaves) = f?;
            for (ctx, prod) in prods {
                p.observe(&ctx, prod);
            }
            for (ctx, codec) in leaves {
                p.observe_leaf(&ctx, codec);
            }
            p.tensors += 1;
        }
        p.source = files
            .iter()
            .map(|f| {
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        Ok(p)
    }
}

/// Tensors to sample from each group of (tensors, bytes), at most `max`
/// in all: one for each of the largest half of `max` groups by bytes,
/// and the rest in proportion to bytes (D'Hondt: each next one to the
/// group with the most bytes per tensor taken so far). Groups of small
/// tensors are many but hold few of the bytes, and take little of the
/// search's time: taken round-robin, a model of many groups leaves its
/// largest group as few samples as a group of two flags, and its last
/// groups none.
fn quotas(groups: &[(usize, u64)], max: usize) -> Vec<usize> {
    let mut q = vec![0usize; groups.len()];
    let mut by_bytes: Vec<usize> = (0..groups.len()).collect();
    by_bytes.sort_by_key(|&i| std::cmp::Reverse(groups[i].1));
    for &i in by_bytes.iter().take(max / 2) {
        q[i] = groups[i].0.min(1);
    }
    let mut left = max.saturating_sub(q.iter().sum());
    while left > 0 {
        let next = by_bytes
            .iter()
            .copied()
            .filter(|&i| q[i] < groups[i].0)
            .max_by(|&a, &b| {
                let share = |i: usize| groups[i].1 as f64 / (q[i] + 1) as f64;
                share(a).total_cmp(&share(b)).then(b.cmp(&a))
            });
        let Some(i) = next else { break };
        q[i] += 1;
        left -= 1;
    }
    q
}

/// `v` reordered so that every prefix is spread evenly over it: the
/// van der Corput order of its indices (0, n/2, n/4, 3n/4, ...).
fn spread<T>(v: Vec<T>) -> Vec<T> {
    let n = v.len();
    if n < 3 {
        return v;
    }
    let bits = usize::BITS - (n - 1).leading_zeros();
    let order: Vec<usize> = (0..1usize << bits)
        .map(|i| i.reverse_bits() >> (usize::BITS - bits))
        .filter(|&i| i < n)
        .collect();
    debug_assert_eq!(order.len(), n);
    let mut slots: Vec<Option<T>> = v.into_iter().map(Some).collect();
    order
        .into_iter()
        .map(|i| slots[i].take().expect("a permutation"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The learning sample's shares: the largest groups by bytes get one
    /// each first, the rest goes by bytes, no group gives more than it
    /// has, and nothing is taken past the maximum.
    #[test]
    fn the_learning_sample_goes_where_the_bytes_are() {
        // 119 groups: one of a third of the bytes, many small ones; the
        // small ones come first in the groups' order.
        let mut groups = vec![(2usize, 8u64); 100];
        groups.extend((0..18).map(|i| (50, 1_000_000 + i)));
        groups.push((418, 54_000_000));
        let q = quotas(&groups, 96);
        assert_eq!(q.iter().sum::<usize>(), 96);
        assert!(q.iter().zip(&groups).all(|(&q, g)| q <= g.0));
        // The 19 large groups are all sampled, the largest most of all.
        assert!(q[100..].iter().all(|&q| q >= 1), "{q:?}");
        assert!(q[118] > q[100..118].iter().sum::<usize>(), "{q:?}");
        // Half the maximum is kept for the largest: 29 small groups get one.
        assert_eq!(q[..100].iter().filter(|&&q| q > 0).count(), 48 - 19);
        // Fewer tensors than the maximum: all of them.
        assert_eq!(quotas(&[(3, 10), (2, 1)], 96), vec![3, 2]);
        assert_eq!(quotas(&[], 96), Vec::<usize>::new());
    }

    /// A group's sample spans it: every prefix of the order is spread.
    #[test]
    fn a_groups_sample_is_spread_over_it() {
        for n in 0..40usize {
            let v = spread((0..n).collect::<Vec<_>>());
            let mut sorted = v.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "a permutation of {n}");
        }
        assert_eq!(
            spread((0..8).collect::<Vec<_>>()),
            vec![0, 4, 2, 6, 1, 5, 3, 7]
        );
        // Of 41 files' members: the first, then the 33rd and the 17th.
        let v = spread((0..41).collect::<Vec<_>>());
        assert_eq!(&v[..3], &[0, 32, 16]);
    }
}
