//! The Rust code blocks of the Markdown documentation, as doc-tests: `cargo test --doc`
//! compiles every ```` ```rust ```` block of these files (and runs those not marked
//! `no_run`), so the documentation cannot drift from the library unnoticed. Each item only
//! carries a file as its doc comment; nothing here exists outside doc-tests.
//!
//! Imports: nothing.
#![cfg(doctest)]

/// README.md (no Rust block today: the vendor plugin example moved to docs/VENDOR-GUIDE.md,
/// which its own test builds; kept so that a Rust block added here is compiled).
#[doc = include_str!("../../README.md")]
pub struct Readme;

/// docs/LIBRARY.md (using the library from Rust).
#[doc = include_str!("../../docs/LIBRARY.md")]
pub struct LibraryGuide;
