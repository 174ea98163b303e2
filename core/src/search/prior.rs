//! The prior: how likely each production is in a context, learned from the
//! programs the search finds on a sample of one checkpoint's tensors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dtype::Dtype;
use crate::entropy::{Codec, Contexts};
use crate::error::DecodeError;

/// Where a hole sits: what the prior conditions on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HoleContext {
    /// Production of the parent (`top` for the root), with the field index
    /// inside a Merge, e.g. `Merge[bf16].1`.
    pub parent: String,
    /// Word width of the hole.
    pub width: u8,
    /// The tensor's dtype.
    pub dtype: Dtype,
    /// The tensor's role from its name and shape (e.g. `attn.2d`).
    pub role: String,
    /// Cheap statistics bucket of the tensor (size class).
    pub bucket: u8,
}

impl HoleContext {
    fn full_key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}",
            self.dtype.name(),
            self.width,
            self.parent,
            self.role,
            self.bucket
        )
    }
    fn backoff_key(&self) -> String {
        format!("{}|{}|{}", self.dtype.name(), self.width, self.parent)
    }
}

/// A production model with backoff: full context -> (dtype, width, parent)
/// -> uniform. Counts are the productions of winning programs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Prior {
    /// Format marker.
    #[serde(default)]
    pub version: u32,
    /// Production counts per full context.
    #[serde(default)]
    pub full: BTreeMap<String, BTreeMap<String, u32>>,
    /// Production counts per backoff context.
    #[serde(default)]
    pub backoff: BTreeMap<String, BTreeMap<String, u32>>,
    /// Leaf codecs (e.g. `rans1`, `rans|1`) of winning programs per full
    /// context: which context coders the literal chooser need weigh there.
    #[serde(default)]
    pub leaves: BTreeMap<String, BTreeMap<String, u32>>,
    /// Leaf codecs per backoff context.
    #[serde(default)]
    pub leaf_backoff: BTreeMap<String, BTreeMap<String, u32>>,
    /// How many tensors it was learned from.
    #[serde(default)]
    pub tensors: u32,
    /// Where it was learned (file names), informational.
    #[serde(default)]
    pub source: Vec<String>,
    /// [`Prior::leaf_contexts`]'s answers so far.
    #[serde(skip)]
    leaf_memo: LeafMemo,
}

/// The leaf model's answers by hole context: the search asks the same few
/// dozen contexts for every literal of thousands of tensors, and each
/// answer formats two keys and smooths 17 choices over two maps. Not part
/// of a prior's value: never written, equal in every prior, emptied when
/// the prior learns (by [`Prior::observe_leaf`]; a prior whose maps are
/// changed directly after it was asked must be cloned, which starts an
/// empty memo).
#[derive(Default)]
struct LeafMemo(std::sync::Mutex<std::collections::HashMap<HoleContext, Contexts>>);

/// Contexts remembered at most (a prior over many repos' roles).
const LEAF_MEMO_MAX: usize = 4096;

impl Clone for LeafMemo {
    fn clone(&self) -> Self {
        LeafMemo::default()
    }
}

impl PartialEq for LeafMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for LeafMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeafMemo")
    }
}

/// Weight of the backoff distribution relative to the observed counts.
const SMOOTHING: f64 = 0.5;

/// The leaf codecs a literal may win with (canonical 4-state names,
/// [`Codec::name`]), the choices of the leaf model: flat, order 0, order 1
/// (at [`RANS1`]), and conditioned on each of the [`MAX_SIBLINGS`] earlier
/// siblings (from [`RANS1`] + 1 on).
const LEAF_CHOICES: [&str; 17] = [
    "raw",
    "bits",
    "huff",
    "rans0",
    "pack+rans0",
    "zstd",
    "rans1",
    "rans|0",
    "rans|1",
    "rans|2",
    "rans|3",
    "rans|4",
    "rans|5",
    "rans|6",
    "rans|7",
    "rans|8",
    "rans|9",
];

/// Index of order 1 in [`LEAF_CHOICES`].
const RANS1: usize = 6;

/// Siblings the leaf model knows (the longest float split, f64, has 10
/// fields).
const MAX_SIBLINGS: u8 = 10;

/// A context coder less likely than this to win in a hole's context is not
/// weighed there (counting a 64K-word sample under its contexts is most of
/// what the search spends). Uniform over the 17 leaf choices, a choice is
/// 1/17 likely; it falls below 1/512 when three tensors of the hole's
/// context, and of its backoff, chose other codecs, or 15 of the backoff
/// alone: rare enough that skipping it costs next to nothing.
pub const LEAF_SKIP_P: f64 = 1.0 / 512.0;

/// Version of the prior files this crate writes. Version 1 had no leaf
/// model (`leaves`, `leaf_backoff`); version 2 added it.
pub const PRIOR_VERSION: u32 = 2;
/// Oldest prior file version [`Prior::from_json`] reads.
pub const OLDEST_PRIOR_VERSION: u32 = 1;

impl Prior {
    /// The uniform prior (no knowledge).
    pub fn uniform() -> Prior {
        Prior {
            version: PRIOR_VERSION,
            ..Prior::default()
        }
    }

    /// Whether nothing was learned.
    pub fn is_uniform(&self) -> bool {
        self.full.is_empty()
            && self.backoff.is_empty()
            && self.leaves.is_empty()
            && self.leaf_backoff.is_empty()
    }

    /// The context coders worth weighing for a literal in `ctx`: those the
    /// leaf model gives at least [`LEAF_SKIP_P`] (all, with nothing
    /// learned about the context).
    pub(crate) fn leaf_contexts(&self, ctx: &HoleContext) -> Contexts {
        if self.leaves.is_empty() && self.leaf_backoff.is_empty() {
            return Contexts::ALL;
        }
        let memo = || self.leaf_memo.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&c) = memo().get(ctx) {
            return c;
        }
        let c = self.leaf_contexts_of(ctx);
        let mut m = memo();
        if m.len() < LEAF_MEMO_MAX {
            m.insert(ctx.clone(), c);
        }
        c
    }

    /// [`Prior::leaf_contexts`], worked out.
    fn leaf_contexts_of(&self, ctx: &HoleContext) -> Contexts {
        let uniform = [1.0 / LEAF_CHOICES.len() as f64; LEAF_CHOICES.len()];
        let back = smooth(
            self.leaf_backoff.get(&ctx.backoff_key()),
            &LEAF_CHOICES,
            &uniform,
        );
        let p = smooth(self.leaves.get(&ctx.full_key()), &LEAF_CHOICES, &back);
        let mut siblings = u32::MAX << MAX_SIBLINGS;
        for i in 0..MAX_SIBLINGS as usize {
            if p[RANS1 + 1 + i] >= LEAF_SKIP_P {
                siblings |= 1 << i;
            }
        }
        Contexts {
            previous: p[RANS1] >= LEAF_SKIP_P,
            siblings,
        }
    }

    /// Record the codec (any number of states) of a winning program's leaf.
    pub(crate) fn observe_leaf(&mut self, ctx: &HoleContext, codec: Codec) {
        self.leaf_memo = LeafMemo::default();
        let name = codec.fit(0).name();
        for (map, key) in [
            (&mut self.leaves, ctx.full_key()),
            (&mut self.leaf_backoff, ctx.backoff_key()),
        ] {
            *map.entry(key).or_default().entry(name.clone()).or_default() += 1;
        }
    }

    /// Probability of each production among `choices` in `ctx` (sums to 1).
    pub(crate) fn probabilities(&self, ctx: &HoleContext, choices: &[&str]) -> Vec<f64> {
        let k = choices.len().max(1) as f64;
        let uniform = vec![1.0 / k; choices.len()];
        let back = smooth(self.backoff.get(&ctx.backoff_key()), choices, &uniform);
        smooth(self.full.get(&ctx.full_key()), choices, &back)
    }

    /// Record the productions of a winning program.
    pub(crate) fn observe(&mut self, ctx: &HoleContext, production: &str) {
        *self
            .full
            .entry(ctx.full_key())
            .or_default()
            .entry(production.to_owned())
            .or_default() += 1;
        *self
            .backoff
            .entry(ctx.backoff_key())
            .or_default()
            .entry(production.to_owned())
            .or_default() += 1;
    }

    /// Serialize as JSON (`brevis.prior.json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }

    /// Parse JSON written by [`Prior::to_json`] of this version or an
    /// older one (`OLDEST_PRIOR_VERSION`..=`PRIOR_VERSION`). Any other
    /// JSON is an error saying what is wrong: not an object, no `version`
    /// or one this build does not read, or a table of that version missing
    /// (`full` and `backoff`; from version 2 also `leaves` and
    /// `leaf_backoff`). `tensors` and `source` are informational.
    pub fn from_json(s: &str) -> Result<Prior, DecodeError> {
        let err = |m: String| DecodeError::Prior(m);
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| err(format!("not JSON: {e}")))?;
        let Some(obj) = v.as_object() else {
            return Err(err(
                "not a JSON object: a prior is an object with a \"version\"".into(),
            ));
        };
        let version = match obj.get("version") {
            None => {
                return Err(err(
                    "no \"version\" field: not a Brevis prior (written by `brevis-hub prior learn`)"
                        .into(),
                ));
            }
            Some(x) => x
                .as_u64()
                .ok_or_else(|| err(format!("\"version\" is {x}, not a whole number")))?,
        };
        if !(OLDEST_PRIOR_VERSION as u64..=PRIOR_VERSION as u64).contains(&version) {
            return Err(err(format!(
                "version {version} is not one this build reads ({OLDEST_PRIOR_VERSION} to {PRIOR_VERSION})"
            )));
        }
        let required: &[&str] = if version >= 2 {
            &["full", "backoff", "leaves", "leaf_backoff"]
        } else {
            &["full", "backoff"]
        };
        if let Some(missing) = required.iter().find(|k| !obj.contains_key(**k)) {
            return Err(err(format!(
                "no \"{missing}\" table (a version-{version} prior has {})",
                required.join(", ")
            )));
        }
        serde_json::from_value(v).map_err(|e| err(e.to_string()))
    }
}

fn smooth(counts: Option<&BTreeMap<String, u32>>, choices: &[&str], base: &[f64]) -> Vec<f64> {
    let Some(counts) = counts else {
        return base.to_vec();
    };
    let total: f64 = choices
        .iter()
        .map(|c| *counts.get(*c).unwrap_or(&0) as f64)
        .sum();
    choices
        .iter()
        .zip(base)
        .map(|(c, b)| (*counts.get(*c).unwrap_or(&0) as f64 + SMOOTHING * b) / (total + SMOOTHING))
        .collect()
}

/// The role of a tensor from its name and rank, e.g. `attn.2d`.
pub fn role(name: &str, rank: usize) -> String {
    let n = name.to_ascii_lowercase();
    let kind = if n.ends_with("bias") || n.ends_with(".b") {
        "bias"
    } else if ["norm", "ln_", ".ln", "layernorm", "bn", "batchnorm"]
        .iter()
        .any(|k| n.contains(k))
    {
        "norm"
    } else if ["embed", "wte", "wpe", "tok_", "token"]
        .iter()
        .any(|k| n.contains(k))
    {
        "embed"
    } else if [
        "attn",
        "attention",
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "query",
        "key",
        "value",
    ]
    .iter()
    .any(|k| n.contains(k))
    {
        "attn"
    } else if [
        "mlp",
        "ffn",
        "fc",
        "up_proj",
        "down_proj",
        "gate",
        "dense",
        "intermediate",
    ]
    .iter()
    .any(|k| n.contains(k))
    {
        "mlp"
    } else if n.contains("conv") {
        "conv"
    } else if n.starts_with("__") {
        "bytes"
    } else {
        "other"
    };
    format!("{kind}.{}d", rank.min(5))
}

/// Size class of a tensor: log2 of its word count, in steps of 4.
pub fn bucket(words: u64) -> u8 {
    ((64 - words.leading_zeros()) / 4) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #9: only prior files load; anything else is an error saying why.
    #[test]
    fn issue_9_other_json_is_rejected() {
        for (text, why) in [
            ("{}", "no \"version\""),
            ("[]", "not a JSON object"),
            ("null", "not a JSON object"),
            ("{\"foo\":1}", "no \"version\""),
            (
                r#"{"architectures":["BertModel"],"hidden_size":384,"model_type":"bert"}"#,
                "no \"version\"",
            ),
            ("{\"version\": 999}", "version 999"),
            (
                "{\"version\": 0, \"full\": {}, \"backoff\": {}}",
                "version 0",
            ),
            ("{\"version\": \"2\"}", "not a whole number"),
            ("{\"version\": 2}", "no \"full\" table"),
            (
                r#"{"version": 2, "full": {}, "backoff": {}}"#,
                "no \"leaves\" table",
            ),
            (r#"{"version": 1, "full": {}}"#, "no \"backoff\" table"),
            (
                r#"{"version": 1, "full": {"a": {"Lit": -1}}, "backoff": {}}"#,
                "invalid value",
            ),
            ("not json", "not JSON"),
        ] {
            match Prior::from_json(text) {
                Err(DecodeError::Prior(m)) => assert!(m.contains(why), "{text}: {m}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    /// Version 1 (before the leaf model) and version 2 files still load.
    #[test]
    fn issue_9_version_1_and_2_priors_load() {
        // As `prior learn` wrote them before the leaf model (commit 6d0a8b4).
        let v1 = r#"{
  "version": 1,
  "full": {
    "BF16|16|top|attn.2d|4": {
      "Merge": 3
    },
    "BF16|8|Merge.1|attn.2d|4": {
      "Lit": 3
    }
  },
  "backoff": {
    "BF16|16|top": {
      "Merge": 3
    },
    "BF16|8|Merge.1": {
      "Lit": 3
    }
  },
  "tensors": 3,
  "source": [
    "model.safetensors"
  ]
}"#;
        let p = Prior::from_json(v1).expect("a version-1 prior loads");
        assert_eq!(p.version, 1);
        assert_eq!(p.tensors, 3);
        assert!(!p.is_uniform() && p.leaves.is_empty());
        // Version 2, as written now (and the uniform prior, nothing learned).
        let mut q = Prior::uniform();
        let ctx = HoleContext {
            parent: "top".into(),
            width: 16,
            dtype: Dtype::BF16,
            role: "attn.2d".into(),
            bucket: 4,
        };
        q.observe(&ctx, "Merge");
        q.observe_leaf(&ctx, Codec::Raw);
        q.tensors = 1;
        assert_eq!(Prior::from_json(&q.to_json()).expect("version 2 loads"), q);
        let u = Prior::uniform();
        assert_eq!(Prior::from_json(&u.to_json()).expect("uniform loads"), u);
    }
}
