//! One integration-test binary (one link step): modules by subject.

mod bad_input;
mod chunk_boundaries;
mod cli;
mod eval;
mod hybrid;
mod openai;
mod pipeline;
mod props;
mod server;
mod support;
mod ttl;
