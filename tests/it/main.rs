//! End-to-end tests.
mod hub;
