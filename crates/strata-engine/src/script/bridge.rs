//! The script thread's side of the channel: how it sends primitive calls to the caller
//! and waits for their answers, gives memory back, and keeps what ended the script.

use super::{Call, Final, Limits, Outcome, ScriptError, one_line};
use rhai::{Dynamic, EvalAltResult, Position};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The value a script is terminated with (the reason is kept beside it).
pub(super) const TERMINATE: &str = "strata-sandbox-terminated";

pub(super) type Answer = Result<Dynamic, Box<EvalAltResult>>;

pub(super) fn terminated() -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorTerminated(
        TERMINATE.into(),
        Position::NONE,
    ))
}

/// How often a script waiting for an answer looks whether it was cancelled.
const POLL: Duration = Duration::from_millis(20);

/// A message from the script thread.
pub(super) enum Msg {
    Call(Call, std::sync::mpsc::Sender<Result<Value, String>>),
    /// Memory the script thread was given and is done with, to be freed by the caller
    /// (freeing it on the script thread would make its meter read low).
    Drop(Box<dyn Send>),
    Done(Box<Result<Outcome, ScriptError>>),
}

pub(super) struct Bridge {
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    pub(super) deadline: Instant,
    pub(super) wall_ms: u64,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) calls: AtomicU32,
    pub(super) max_calls: u32,
    pub(super) operations: AtomicU64,
    /// Set by `final`.
    pub(super) final_answer: Mutex<Option<Final>>,
    /// Why the script was terminated (a limit the engine does not know, or cancellation).
    pub(super) stopped: Mutex<Option<ScriptError>>,
}

impl Bridge {
    pub(super) fn new(
        tx: tokio::sync::mpsc::UnboundedSender<Msg>,
        limits: &Limits,
        deadline: Instant,
        cancel: Arc<AtomicBool>,
    ) -> Bridge {
        Bridge {
            tx,
            deadline,
            wall_ms: limits.wall_time.as_millis() as u64,
            cancel,
            calls: AtomicU32::new(0),
            max_calls: limits.max_calls,
            operations: AtomicU64::new(0),
            final_answer: Mutex::new(None),
            stopped: Mutex::new(None),
        }
    }

    /// Keeps why the script is being stopped (the first reason stands).
    pub(super) fn note(&self, why: ScriptError) {
        self.stopped.lock().expect("poisoned").get_or_insert(why);
    }

    /// Ends the script (not catchable by it) because of `why`.
    pub(super) fn stop(&self, why: ScriptError) -> Answer {
        self.note(why);
        Err(terminated())
    }

    /// Gives memory back to the caller to free.
    pub(super) fn give_back(&self, v: impl Send + 'static) {
        let _ = self.tx.send(Msg::Drop(Box::new(v)));
    }

    pub(super) fn call(&self, call: Call, weight: u32) -> Answer {
        let name = call.name();
        let made = self.calls.fetch_add(weight, Ordering::SeqCst) + weight;
        if made > self.max_calls {
            return self.stop(ScriptError::TooManyCalls(self.max_calls));
        }
        let (reply, answer) = std::sync::mpsc::channel();
        if self.tx.send(Msg::Call(call, reply)).is_err() {
            return self.stop(ScriptError::Cancelled);
        }
        let got = loop {
            if self.cancel.load(Ordering::SeqCst) {
                return self.stop(ScriptError::Cancelled);
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.stop(ScriptError::TimedOut(self.wall_ms));
            }
            match answer.recv_timeout(left.min(POLL)) {
                Ok(got) => break got,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return self.stop(ScriptError::Cancelled);
                }
            }
        };
        match got {
            Ok(v) => {
                let d = rhai::serde::to_dynamic(&v);
                self.give_back(v);
                d
            }
            Err(message) => {
                if self.cancel.load(Ordering::SeqCst) {
                    return self.stop(ScriptError::Cancelled);
                }
                if Instant::now() >= self.deadline {
                    return self.stop(ScriptError::TimedOut(self.wall_ms));
                }
                let mut m = rhai::Map::new();
                m.insert("primitive".into(), name.into());
                m.insert("error".into(), one_line(&message).into());
                self.give_back(message);
                Err(Box::new(EvalAltResult::ErrorRuntime(
                    m.into(),
                    Position::NONE,
                )))
            }
        }
    }
}
