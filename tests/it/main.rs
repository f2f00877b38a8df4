//! One integration-test binary (one link step): modules by subject.

mod bad_input;
mod chunk_boundaries;
mod cli;
mod crash;
#[cfg(target_os = "linux")]
mod diskfull;
mod eval;
mod hybrid;
mod navigate;
mod openai;
mod pipeline;
mod postgres;
mod props;
mod replicas;
mod server;
mod support;
mod ttl;
mod writes;
