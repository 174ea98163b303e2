//! End-to-end tests.
mod archive;
mod cli;
mod containers;
mod gguf;
mod hub;
mod real_hub;
mod regression;
mod security;
mod strict;
mod wire;
