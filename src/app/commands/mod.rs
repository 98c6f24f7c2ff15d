//! One file per command. Adding a command: a file here, its arguments in `cli.rs`, and one line in
//! [`super::run`].

pub mod docs;
pub mod fit;
pub mod lint;
pub mod mem;
pub mod report;
pub mod rewrite;
pub mod rules;
pub mod verify;
