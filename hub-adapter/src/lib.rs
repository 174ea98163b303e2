//! Hugging Face Hub adapter for Brevis.
