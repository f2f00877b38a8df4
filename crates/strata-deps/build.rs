// A build script, so that cargo applies the [build-dependencies] above to build scripts too.
fn main() {}
