//! A `tracing` subscriber that records events, for tests that check what a crate emits
//! (feature `tracing`): [`capture`] runs a closure with it recording the thread's events.
//!
//! The process's global subscriber is a router, set once, that hands each event to the
//! capture active on the emitting thread. It tells every call site to ask it each time
//! (`Interest::sometimes`), so no call site caches "never" for a capture: with a scoped
//! (thread-local) subscriber, a call site first reached by another test's thread while the
//! capture was being installed could keep "never", and the capture missed its events.

/// An event as the [`Capture`] subscriber saw it: level, target, message and every other field
/// as text (strings unquoted, `Display` and `Debug` fields as they print).
#[derive(Debug, Clone)]
pub struct Recorded {
    pub level: tracing::Level,
    pub target: String,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

impl Recorded {
    /// The value of the field `name`, if the event has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl tracing::field::Visit for Recorded {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_text(field, value.to_owned());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.record_text(field, format!("{value:?}"));
    }
}

impl Recorded {
    fn record_text(&mut self, field: &tracing::field::Field, text: String) {
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.push((field.name().to_owned(), text));
        }
    }
}

/// A subscriber that records every event (no spans), for the thread it is the default of.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    events: std::sync::Arc<std::sync::Mutex<Vec<Recorded>>>,
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut recorded = Recorded {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: String::new(),
            fields: Vec::new(),
        };
        event.record(&mut recorded);
        self.events.lock().unwrap().push(recorded);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

thread_local! {
    /// The capture recording this thread's events, while [`capture`] runs.
    static ACTIVE: std::cell::RefCell<Option<Capture>> = const { std::cell::RefCell::new(None) };
}

/// The global subscriber: every event of a thread with an active capture goes to it.
struct Router;

impl tracing::Subscriber for Router {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        ACTIVE.with(|a| a.borrow().is_some())
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        ACTIVE.with(|a| {
            if let Some(c) = &*a.borrow() {
                tracing::Subscriber::event(c, event);
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Ends a thread's capture, even if the closure panicked.
struct Active;

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().take());
    }
}

/// Runs `f` recording this thread's events; returns its result and the events of `target` it
/// emitted. Where the process already has a global subscriber of its own, the capture is the
/// thread's scoped subscriber instead.
pub fn capture<T>(target: &str, f: impl FnOnce() -> T) -> (T, Vec<Recorded>) {
    static ROUTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let routed = *ROUTER.get_or_init(|| tracing::subscriber::set_global_default(Router).is_ok());
    let sub = Capture::default();
    let out = if routed {
        ACTIVE.with(|a| *a.borrow_mut() = Some(sub.clone()));
        let _active = Active;
        f()
    } else {
        tracing::subscriber::with_default(sub.clone(), f)
    };
    let events = sub.events.lock().unwrap().clone();
    (
        out,
        events.into_iter().filter(|e| e.target == target).collect(),
    )
}
