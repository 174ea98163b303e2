//! One module per subcommand: its arguments (`--help` with an example)
//! and its `run`.

pub mod bench;
pub mod compress;
pub mod decompress;
pub mod inspect;
pub mod mirror;
mod mirror_plan;
pub mod prior;
pub mod pull;
pub mod serve;
pub mod verify;
pub mod verify_mirror;
