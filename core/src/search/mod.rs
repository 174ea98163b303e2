//! Synthesis: the program chooser and the prior.
use crate::error::{DecodeError, EncodeError};
use std::path::Path;

/// Options for learning a prior.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LearnOptions {
    /// Search budget used on the sample.
    pub budget: u32,
    /// Maximum number of tensors sampled.
    pub max_tensors: usize,
}

impl Default for LearnOptions {
    fn default() -> Self {
        LearnOptions { budget: 64, max_tensors: 64 }
    }
}

/// A production model learned from a sample of one checkpoint's tensors.
#[derive(Debug, Clone, Default)]
pub struct Prior {}

impl Prior {
    /// Learn a prior from safetensors files.
    pub fn learn(files: &[&Path], opts: &LearnOptions) -> Result<Prior, EncodeError> {
        let _ = (files, opts);
        Ok(Prior {})
    }
    /// Serialize as JSON (`brevis.prior.json`).
    pub fn to_json(&self) -> String {
        "{}".into()
    }
    /// Parse JSON written by [`Prior::to_json`].
    pub fn from_json(s: &str) -> Result<Prior, DecodeError> {
        let _ = s;
        Ok(Prior {})
    }
}
