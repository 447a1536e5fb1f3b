//! # backplane-backend-kit: what every backplane backend plugin needs
//!
//! The Backend API ([`backplane_api`]) is the contract; this kit is the code that every
//! backend built on it would otherwise write for itself, once, so that a hardening fix is made
//! in one place and a new vendor starts from tested pieces. It depends on the API only (and
//! `log`), and is released with it: its major and minor version follow `backplane-api`'s
//! (kit 1.4 goes with API 1.4), so a plugin asks for both at the same version.
//!
//! | module | what it is for |
//! |---|---|
//! | [`support`] | deciding whether a backend runs a layer: the preamble every backend checks first (the Float32 gate, refusing another backend's `PreCompiled` layer, the `<id>: ` prefix of reasons, the shape rule) and [`Route`](support::Route), one routing function that answers both `is_layer_supported` and `create_workload` |
//! | [`payload`] | the binary form of a backend's own `PreCompiled` layers: a writer, and a reader for the untrusted bytes that come back (every read length-checked, every tag checked, nothing left over) |
//! | [`graph`] | questions about the subgraph of `optimize_subgraph` (producers, consumers, sole consumers, constants) and the greedy fusion driver that asks the plugin's own matcher for chains |
//! | [`geometry`] | the geometry of convolutions and poolings over NCHW planes, one struct for both |
//! | [`constants`] | reading a constant input's value (weights, biases) with its length checked |
//! | [`capabilities`] | folding the layer kinds and binary operations a backend runs into its capabilities |
//! | `testing` | (feature `testing`, for unit tests) a seeded pseudo-random generator |
//!
//! Errors are sentences (`String`) that say what is wrong without the backend's id or the
//! layer's name: the plugin puts those in front ([`support::with_id`] does the id). No
//! function of the kit panics on any input.
//!
//! A reference or oracle backend should not use the kit: an oracle must not share code with
//! what it checks.
//!
//! ## Use
//! ```toml
//! [dependencies]
//! backplane-api = "1.4"
//! backplane-backend-kit = "1.4"
//!
//! [dev-dependencies]
//! backplane-backend-kit = { version = "1.4", features = ["testing"] }
//! ```

#![deny(unsafe_code)]

pub mod capabilities;
pub mod constants;
pub mod geometry;
pub mod graph;
pub mod payload;
pub mod support;
#[cfg(feature = "testing")]
pub mod testing;
