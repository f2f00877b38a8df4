//! One integration-test binary (one link step): modules by subject.

mod aragora_api;
mod aragora_sdk;
mod aragora_ts_sdk;
mod bad_input;
mod chunk_boundaries;
mod cli;
mod context;
mod crash;
#[cfg(target_os = "linux")]
mod diskfull;
mod eval;
mod forget;
mod hybrid;
mod layers;
mod mcp;
mod mcp_http;
mod navigate;
mod openai;
mod pipeline;
mod postgres;
mod props;
mod readonly;
mod reduce;
mod repair;
mod replicas;
mod script;
mod security_http;
mod security_ingest;
mod security_script;
mod server;
mod support;
mod time;
mod trace;
mod ttl;
mod writes;
