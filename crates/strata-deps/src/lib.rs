//! No code: this crate only makes every build of the workspace ask for the same features
//! of each dependency (see its Cargo.toml).
