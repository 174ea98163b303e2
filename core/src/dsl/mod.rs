//! The program language.
