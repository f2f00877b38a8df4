//! A lazily initialized value. (Patched, see PATCH.md: sled 0.34.7's own spun on an atomic
//! flag while another thread initialized the value; the threadpool's first workers did so
//! while the thread that spawned them was still initializing the queue, taking the CPU it
//! needed. This one is std's `OnceLock`: a thread that finds the value being initialized
//! waits, parked.)

use std::sync::OnceLock;

pub struct Lazy<T, F> {
    value: OnceLock<T>,
    init: F,
}

impl<T, F> Lazy<T, F> {
    pub const fn new(init: F) -> Self
    where
        F: Sized,
    {
        Self { value: OnceLock::new(), init }
    }
}

impl<T, F> std::ops::Deref for Lazy<T, F>
where
    F: Fn() -> T,
{
    type Target = T;

    fn deref(&self) -> &T {
        self.value.get_or_init(|| (self.init)())
    }
}
