//! One integration-test binary (one link step): modules by subject.

mod bad_input;
mod cli;
mod pipeline;
mod props;
mod support;
mod ttl;
