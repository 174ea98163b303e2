//! Literal wire codecs.
