//! The A* over program shapes that [`super::synthesize`] runs: a frontier
//! of partial shapes by prior cost, each complete one judged.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{
    GENERIC_MAX_BITS, HoleContext, Prior, STOP_BITS, Shape, Target, fill_first, first_hole,
    productions,
};

/// A partial shape on the frontier, with its cost in bits under the prior.
pub(super) struct State {
    cost: f64,
    seq: u64,
    shape: Shape,
}

impl PartialEq for State {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for State {}
impl PartialOrd for State {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for State {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on cost, then FIFO on seq (determinism).
        o.cost
            .total_cmp(&self.cost)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

/// The best program judged so far: its size on the sample, its frozen
/// shape, the shape's cost in bits under the prior, and the program.
pub(super) struct Best {
    pub(super) size: usize,
    pub(super) shape: Shape,
    pub(super) cost: f64,
    pub(super) node: crate::dsl::Node,
}

/// What the A* pass leaves for the generic codecs, judged after it.
pub(super) struct Found {
    /// Candidates judged (each takes one of the budget).
    pub(super) judged: u32,
    /// Whether the generic production was reached.
    pub(super) generic: bool,
    /// Whether it was reached where the prior gives zstd on whole words a
    /// fair chance ([`GENERIC_MAX_BITS`]).
    pub(super) generic_likely: bool,
}

/// A cap on the states the A* may push at a budget: enough that every
/// production the budget can judge is reached, few enough that a search
/// stopped by its budget has not grown the heap without end.
fn max_states(budget: u32) -> usize {
    BASE_STATES + budget as usize * STATES_PER_JUDGED
}

/// States the A* may push at any budget: the top's productions and their
/// first holes' fit in it many times over.
const BASE_STATES: usize = 64;
/// States the A* may push per candidate the budget allows judging: each
/// judged shape is reached through a few partial ones, each pushing a
/// hole's productions.
const STATES_PER_JUDGED: usize = 32;

/// The A* frontier: states by cost (ties in push order), with the number
/// pushed capped.
struct Frontier {
    heap: BinaryHeap<State>,
    seq: u64,
    pushed: usize,
    max_states: usize,
}

impl Frontier {
    /// A frontier holding the empty shape.
    fn new(max_states: usize) -> Self {
        let mut heap = BinaryHeap::new();
        heap.push(State {
            cost: 0.0,
            seq: 0,
            shape: Shape::Hole,
        });
        Frontier {
            heap,
            seq: 0,
            pushed: 1,
            max_states,
        }
    }

    fn full(&self) -> bool {
        self.pushed >= self.max_states
    }

    fn push(&mut self, cost: f64, shape: Shape) {
        self.seq += 1;
        self.pushed += 1;
        self.heap.push(State {
            cost,
            seq: self.seq,
            shape,
        });
    }
}

/// How far [`search_shapes`] goes: complete programs judged, how many
/// bits above the best a state may cost, and the compression level's
/// productions.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub budget: u32,
    pub stop_bits: f64,
    pub level: crate::encode::Level,
}

/// The A* over structured shapes: each complete one (but the incumbent
/// and the generic codecs) is judged by `judge` (its size on the sample,
/// and its program) and kept in `best` if smaller.
pub(super) fn search_shapes(
    t: &Target<'_>,
    prior: &Prior,
    hole: &HoleContext,
    Bounds {
        budget,
        stop_bits,
        level,
    }: Bounds,
    judge: impl Fn(&Shape) -> (usize, crate::dsl::Node),
    best: &mut Best,
) -> Found {
    let mut found = Found {
        judged: 0,
        generic: false,
        generic_likely: false,
    };
    let mut frontier = Frontier::new(max_states(budget));
    while let Some(st) = frontier.heap.pop() {
        if found.judged >= budget {
            break;
        }
        if found.judged > 0 && st.cost > best.cost + STOP_BITS {
            break;
        }
        if found.judged > 0 && st.cost > best.cost + stop_bits && st.shape != Shape::Generic {
            continue;
        }
        match first_hole(&st.shape, t.width) {
            None => {
                if st.shape == Shape::Lit(None) {
                    // The incumbent already is this program: judged before
                    // the search, it takes none of the budget.
                    continue;
                }
                if st.shape == Shape::Generic {
                    // Judged last, against the best structured program: zstd
                    // -19 is slow, and -3 screens it against that program.
                    found.generic = true;
                    // zstd -19 on whole words, only where the prior gives it
                    // a fair chance (the byte planes' zstd is cheap).
                    found.generic_likely |= st.cost <= GENERIC_MAX_BITS;
                    continue;
                }
                let (size, node) = judge(&st.shape);
                found.judged += 1;
                if size < best.size {
                    *best = Best {
                        size,
                        shape: st.shape.freeze(&node),
                        cost: st.cost,
                        node,
                    };
                }
            }
            Some(first) => expand(t, prior, hole, &st, first, level, &mut frontier),
        }
    }
    found
}

/// Push every production that may fill the first hole of `st` (at
/// `depth`, under `parent`, of `width` bits), costed by the prior.
fn expand(
    t: &Target<'_>,
    prior: &Prior,
    hole: &HoleContext,
    st: &State,
    (parent, width, depth): (String, u8, usize),
    level: crate::encode::Level,
    frontier: &mut Frontier,
) {
    let prods = productions(t, &parent, width, depth, level);
    let names: Vec<&str> = prods.iter().map(|p| p.0).collect();
    // The target's role and size class, worked out once.
    let ctx = HoleContext {
        parent,
        width,
        ..hole.clone()
    };
    let probs = prior.probabilities(&ctx, &names);
    for ((_, repl), p) in prods.iter().zip(probs) {
        if frontier.full() {
            break;
        }
        let mut s = st.shape.clone();
        fill_first(&mut s, repl);
        frontier.push(st.cost - p.max(MIN_PROBABILITY).log2(), s);
    }
}

/// Floor of a production's probability, so its cost in bits stays finite.
const MIN_PROBABILITY: f64 = 1e-9;
