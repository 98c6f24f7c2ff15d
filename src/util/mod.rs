//! Leaf utilities that every stage may use and that know nothing about models: human units and
//! sizes, seeded random numbers, atomic file writes, node-name globs, "did you mean" suggestions,
//! the text-table renderer, progress reporting, named enums, explicit-parallelism linear algebra
//! and the vector-register hygiene it needs. Nothing here imports another module of the crate.

pub mod fs;
pub mod glob;
pub mod names;
pub mod progress;
pub mod rng;
pub mod simd;
pub mod suggest;
pub mod svd;
pub mod table;
pub mod units;
