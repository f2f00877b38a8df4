//! `Gate`: the limiter's priority semaphore.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// An async semaphore that hands free permits to the waiter with the highest priority
/// (first come, first served within a priority). tokio's `Semaphore` is strictly FIFO,
/// which makes a DAG build finish its DETAILED level before any SUMMARY may start.
///
/// A released permit is handed over: the best waiter's channel is sent to, which wakes
/// that waiter alone; nobody re-checks for a free permit. (A waiter is still polled
/// whenever its parent future is: the build joins its calls with `build::join_woken`, so
/// that a wake-up does not re-poll every waiting call.)
#[derive(Clone)]
pub(crate) struct Gate(Arc<Mutex<GateState>>);

struct GateState {
    available: usize,
    held: usize,
    seq: u64,
    waiters: BinaryHeap<Waiter>,
}

struct Waiter {
    priority: u8,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, o: &Self) -> bool {
        self.priority == o.priority && self.seq == o.seq
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Waiter {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Max-heap: higher priority first, then the earlier arrival.
        self.priority.cmp(&o.priority).then(o.seq.cmp(&self.seq))
    }
}

/// A permit of a [`Gate`]; released on drop.
pub struct Permit(Gate);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A waiter that gave up (its future was dropped) after being handed a permit passes it on.
struct Waiting {
    gate: Gate,
    rx: oneshot::Receiver<()>,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            self.rx.close();
            if self.rx.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

impl Gate {
    pub(super) fn new(permits: usize) -> Gate {
        Gate(Arc::new(Mutex::new(GateState {
            available: permits,
            held: 0,
            seq: 0,
            waiters: BinaryHeap::new(),
        })))
    }

    pub(super) fn held(&self) -> usize {
        self.0.lock().expect("poisoned").held
    }

    pub(super) async fn acquire(&self, priority: u8) -> Permit {
        let rx = {
            let mut s = self.0.lock().expect("poisoned");
            if s.available > 0 {
                s.available -= 1;
                s.held += 1;
                return Permit(self.clone());
            }
            let (tx, rx) = oneshot::channel();
            s.seq += 1;
            let seq = s.seq;
            s.waiters.push(Waiter { priority, seq, tx });
            rx
        };
        let mut w = Waiting {
            gate: self.clone(),
            rx,
            done: false,
        };
        // The sender lives in the gate's state, which outlives this borrow of the gate.
        (&mut w.rx).await.expect("gate state dropped");
        w.done = true;
        Permit(self.clone())
    }

    /// Hands the permit to the best live waiter, or returns it to the pool. The `held`
    /// count moves with the permit.
    fn release(&self) {
        let mut s = self.0.lock().expect("poisoned");
        while let Some(w) = s.waiters.pop() {
            if w.tx.send(()).is_ok() {
                return;
            }
        }
        s.held -= 1;
        s.available += 1;
    }
}
