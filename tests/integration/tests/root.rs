//! backplane's integration tests: one binary, a module per area. Every test loads real `.so`
//! files built from `tests/plugins/*` (run `scripts/test.sh`, which builds them first).

mod armnn;
mod c_api;
mod cli;
mod compat;
mod compiled;
mod concurrency;
mod device;
mod docs;
mod dynamic;
mod execution;
mod faults;
mod fixtures;
mod oracle;
mod out_of_process;
mod reasons;
mod runtime;
mod surface;
mod vendor_guide;
