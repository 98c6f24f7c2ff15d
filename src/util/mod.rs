//! Leaf utilities that every stage may use and that know nothing about models: human units and
//! sizes, seeded random numbers, atomic file writes, node-name globs, "did you mean" suggestions,
//! the text-table renderer, lists in one array, progress reporting, named enums, explicit-parallelism linear algebra
//! and the vector-register hygiene it needs. Nothing here imports another module of the crate.

pub mod fs;
pub mod glob;
pub mod lists;
pub mod names;
pub mod pages;
pub mod progress;
pub mod rng;
pub mod simd;
pub mod suggest;
pub mod svd;
pub mod table;
pub mod units;

/// What `write` writes, as a string: a renderer that writes to an output, run into memory.
pub fn written(write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).expect("writing to memory does not fail");
    String::from_utf8(out).expect("the renderers write text")
}
