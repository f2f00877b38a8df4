//! The binary's own modules (the library never uses them): the command line, printing, and
//! `strata eval`.

pub mod args;
pub mod eval;
pub mod output;
