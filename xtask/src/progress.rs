//! Progress of a long run of tests: "k of N tests", the time spent and an estimate of the time
//! left. [`Progress`] is the pure core: fed `(now, event)`, it says what to print, so its tests
//! pass the time in. [`Live`] prints what it says on stderr: a bar redrawn in place when stderr
//! is a terminal (ticking once a second), plain lines otherwise (a line when both 30 s and a
//! tenth of the tests have gone by since the last one, and at the end of each test binary),
//! which keeps CI logs readable.
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// One line redrawn in place (stderr is a terminal).
    Bar,
    /// Plain lines, now and then.
    Lines,
}

/// What happened in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A test binary started. The first one starts the clock of the estimate (a guest boots
    /// before it).
    BinaryStarted,
    /// A test finished (`test NAME ... ok|FAILED|ignored`).
    TestFinished,
    /// A test binary finished (its `test result:` line).
    BinaryFinished,
    /// Time went by.
    Tick,
    /// The run is over.
    End,
}

/// What to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Draw {
    /// Redraw the bar in place with this text.
    Bar(String),
    /// Print this line (in bar style: in place of the bar, which is gone after it).
    Line(String),
}

/// No estimate before this many tests have finished.
pub const ESTIMATE_AFTER: u64 = 5;
/// In line style, at least this long between two lines (but for a binary's end)...
pub const LINE_EVERY: Duration = Duration::from_secs(30);
/// ...and at least this part of the tests (in tenths), whichever is rarer.
pub const LINE_TENTHS: u64 = 1;
/// Width of the bar, in characters between its brackets.
const BAR_WIDTH: u64 = 16;

/// The progress of one run of `total` tests (a tier), deciding what to print.
#[derive(Debug)]
pub struct Progress {
    label: String,
    total: u64,
    /// What is counted: `tests`, `runs`.
    unit: &'static str,
    style: Style,
    started: Instant,
    /// When the first test binary started: the estimate counts from there.
    first_binary: Option<Instant>,
    done: u64,
    /// Whether [`Event::End`] came: no estimate after it.
    ended: bool,
    /// In line style: when the last line was printed and how many tests had finished then
    /// (at first: the start, none; no line says "0 of N").
    last_line: (Instant, u64),
    /// In bar style: the last text drawn.
    last_bar: String,
}

impl Progress {
    /// A run named `label` (`tier rxe`) of `total` tests (or other steps: `unit`), starting
    /// `now`.
    pub fn new(
        label: impl Into<String>,
        total: u64,
        unit: &'static str,
        style: Style,
        now: Instant,
    ) -> Self {
        Progress {
            label: label.into(),
            total,
            unit,
            style,
            started: now,
            first_binary: None,
            done: 0,
            ended: false,
            last_line: (now, 0),
            last_bar: String::new(),
        }
    }

    /// Takes `event`, which happened at `now`, and says what to print, if anything.
    pub fn on(&mut self, now: Instant, event: Event) -> Option<Draw> {
        match event {
            Event::BinaryStarted => {
                self.first_binary.get_or_insert(now);
            }
            Event::TestFinished => self.done += 1,
            Event::End => self.ended = true,
            Event::BinaryFinished | Event::Tick => {}
        }
        match self.style {
            Style::Bar if event == Event::End => {
                self.last_bar.clear();
                Some(Draw::Line(self.text(now)))
            }
            Style::Bar => {
                let text = self.bar(now);
                if event == Event::Tick && text == self.last_bar {
                    return None;
                }
                self.last_bar.clone_from(&text);
                Some(Draw::Bar(text))
            }
            Style::Lines => {
                let (at, printed) = self.last_line;
                if printed == self.done {
                    return None;
                }
                let due = match event {
                    Event::BinaryFinished | Event::End => true,
                    Event::BinaryStarted => false,
                    Event::TestFinished | Event::Tick => {
                        let since = self.done.saturating_sub(printed);
                        now.saturating_duration_since(at) >= LINE_EVERY
                            && since * 10 >= self.total * LINE_TENTHS
                    }
                };
                if !due {
                    return None;
                }
                self.last_line = (now, self.done);
                Some(Draw::Line(self.text(now)))
            }
        }
    }

    /// The time left, once [`ESTIMATE_AFTER`] tests have finished and while some are left
    /// (until the end): the time per test so far times the tests left.
    pub fn estimate(&self, now: Instant) -> Option<Duration> {
        if self.done < ESTIMATE_AFTER || self.done >= self.total || self.ended {
            return None;
        }
        let spent = now.saturating_duration_since(self.first_binary.unwrap_or(self.started));
        Some(spent.mul_f64((self.total - self.done) as f64 / self.done as f64))
    }

    /// `LABEL: k of N UNIT, ELAPSED[, about M min left]`.
    fn text(&self, now: Instant) -> String {
        format!("{}: {}", self.label, self.counts(now))
    }

    /// `LABEL [####    ] k of N UNIT, ELAPSED[, about M min left]`.
    fn bar(&self, now: Instant) -> String {
        let filled = match self.total {
            0 => BAR_WIDTH,
            n => (self.done.min(n) * BAR_WIDTH / n).min(BAR_WIDTH),
        } as usize;
        format!(
            "{} [{}{}] {}",
            self.label,
            "#".repeat(filled),
            " ".repeat(BAR_WIDTH as usize - filled),
            self.counts(now)
        )
    }

    fn counts(&self, now: Instant) -> String {
        let mut s = format!(
            "{} of {} {}, {}",
            self.done,
            self.total,
            self.unit,
            elapsed(now.saturating_duration_since(self.started))
        );
        if let Some(left) = self.estimate(now) {
            s.push_str(", ");
            s.push_str(&time_left(left));
        }
        s
    }
}

/// `45 s`, `4 min 5 s`, `1 h 4 min`.
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// `about M min left` (to the nearest minute), or `under 1 min left`.
pub fn time_left(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        "under 1 min left".to_owned()
    } else {
        format!("about {} min left", (s / 60.0).round() as u64)
    }
}

/// The event a line of libtest's output stands for: a test's result or the binary's
/// `test result:` line. `line` is without colour sequences.
pub fn libtest_event(line: &str) -> Option<Event> {
    let line = line.trim();
    if line.starts_with("test result: ") {
        return Some(Event::BinaryFinished);
    }
    let (_, outcome) = line.strip_prefix("test ")?.rsplit_once(" ... ")?;
    ["ok", "FAILED", "ignored"]
        .iter()
        .any(|o| outcome.starts_with(o))
        .then_some(Event::TestFinished)
}

/// How long each test took: the time from the previous test's end (or its binary's start)
/// to its own end, which is the test's own time where tests run one at a time (the device
/// tiers). What shows where a run's time goes.
#[derive(Debug, Default)]
pub struct Timings {
    /// When the last test ended or the current binary started.
    since: Option<Instant>,
    /// Each test's name and time, in the order they ended.
    times: Vec<(String, Duration)>,
}

impl Timings {
    /// Takes `event`, at `now`, for the test named `test` (when a test ended).
    pub fn on(&mut self, now: Instant, event: Event, test: Option<&str>) {
        match event {
            Event::BinaryStarted => self.since = Some(now),
            Event::TestFinished => {
                if let (Some(since), Some(name)) = (self.since, test) {
                    self.times
                        .push((name.to_owned(), now.saturating_duration_since(since)));
                }
                self.since = Some(now);
            }
            Event::BinaryFinished | Event::Tick | Event::End => {}
        }
    }

    /// The `n` slowest tests, slowest first.
    pub fn slowest(&self, n: usize) -> Vec<(String, Duration)> {
        let mut v = self.times.clone();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// Every test's time, one per line (`SECONDS NAME`), slowest first.
    pub fn table(&self) -> String {
        self.slowest(usize::MAX)
            .iter()
            .map(|(name, d)| format!("{:8.1} {name}\n", d.as_secs_f64()))
            .collect()
    }
}

/// The name of the test a libtest result line is about (`test NAME ... ok`).
pub fn libtest_name(line: &str) -> Option<&str> {
    let (name, _) = line.trim().strip_prefix("test ")?.rsplit_once(" ... ")?;
    Some(name)
}

/// The printing side of a [`Progress`], shared by the threads that feed it.
struct Shown {
    progress: Progress,
    timings: Timings,
    /// Put before each line printed (`[siw] `), when another run prints beside this one.
    prefix: String,
    /// The bar's text while it is on the screen.
    bar: Option<String>,
}

impl Shown {
    /// Draws `d`, each in one write (the commands it runs may write on stderr too).
    fn draw(&mut self, d: Option<Draw>) {
        let out = match d {
            Some(Draw::Bar(text)) => {
                let out = format!("\r\x1b[K{text}");
                self.bar = Some(text);
                out
            }
            Some(Draw::Line(text)) => {
                let clear = if self.bar.take().is_some() {
                    "\r\x1b[K"
                } else {
                    ""
                };
                format!("{clear}xtask: {text}\n")
            }
            None => return,
        };
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(out.as_bytes());
        let _ = err.flush();
    }

    /// Prints `text` (on stdout, or stderr) with the bar taken away first, then draws `then`
    /// (or the bar again).
    fn print(&mut self, text: &str, to_stderr: bool, then: Option<Draw>) {
        if self.bar.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        let line = format!("{}{text}\n", self.prefix);
        if to_stderr {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        }
        match (then, self.bar.take()) {
            (Some(d), _) => self.draw(Some(d)),
            (None, Some(bar)) => self.draw(Some(Draw::Bar(bar))),
            (None, None) => {}
        }
    }
}

/// A [`Progress`] printing on stderr: a bar when stderr is a terminal (redrawn each second
/// while the run lasts), plain lines otherwise.
pub struct Live {
    shown: Arc<Mutex<Shown>>,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Live {
    /// Starts showing the progress of `total` tests (or other steps: `unit`) named `label`
    /// (`tier rxe`).
    pub fn start(label: impl Into<String>, total: u64, unit: &'static str) -> Live {
        let style = if std::io::stderr().is_terminal() {
            Style::Bar
        } else {
            Style::Lines
        };
        let shown = Arc::new(Mutex::new(Shown {
            progress: Progress::new(label, total, unit, style, Instant::now()),
            timings: Timings::default(),
            prefix: String::new(),
            bar: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = (style == Style::Bar).then(|| {
            let (shown, stop) = (Arc::clone(&shown), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    if let Ok(mut s) = shown.lock() {
                        if !stop.load(Ordering::Relaxed) {
                            let d = s.progress.on(Instant::now(), Event::Tick);
                            s.draw(d);
                        }
                    }
                }
            })
        });
        let live = Live {
            shown,
            stop,
            ticker,
        };
        if style == Style::Bar {
            live.event(Event::Tick);
        }
        live
    }

    /// [`start`](Self::start) for a run beside another: plain progress lines (two bars would
    /// overwrite each other), and every line of output marked `[tag] `.
    pub fn start_beside(
        label: impl Into<String>,
        total: u64,
        unit: &'static str,
        tag: &str,
    ) -> Live {
        let shown = Shown {
            progress: Progress::new(label, total, unit, Style::Lines, Instant::now()),
            timings: Timings::default(),
            prefix: format!("[{tag}] "),
            bar: None,
        };
        Live {
            shown: Arc::new(Mutex::new(shown)),
            stop: Arc::new(AtomicBool::new(false)),
            ticker: None,
        }
    }

    /// Whether the bar is drawn (stderr is a terminal).
    pub fn is_bar(&self) -> bool {
        self.ticker.is_some()
    }

    /// Takes an event that happened now.
    pub fn event(&self, e: Event) {
        let mut s = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        s.timings.on(now, e, None);
        let d = s.progress.on(now, e);
        s.draw(d);
    }

    /// Prints a line of libtest's output on stdout and takes the event it stands for (a
    /// test's end is timed: [`Live::slowest`]).
    pub fn output(&self, line: &str) {
        let plain = crate::test::strip_ansi(line);
        let event = libtest_event(&plain);
        if event == Some(Event::TestFinished) {
            let mut s = self.shown.lock().unwrap_or_else(|p| p.into_inner());
            s.timings
                .on(Instant::now(), Event::TestFinished, libtest_name(&plain));
        }
        self.print(line, false, event);
    }

    /// What [`Timings`] recorded of the tests so far: the `n` slowest, and the table of all.
    pub fn timings(&self, n: usize) -> (Vec<(String, Duration)>, String) {
        let s = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        (s.timings.slowest(n), s.timings.table())
    }

    /// Prints a line on stdout (the bar stays below it).
    pub fn println(&self, line: &str) {
        self.print(line, false, None);
    }

    /// Prints a line on stdout, then takes `event`, which it stands for.
    pub fn println_then(&self, line: &str, event: Option<Event>) {
        self.print(line, false, event);
    }

    /// Prints a line on stderr (the bar stays below it).
    pub fn eprintln(&self, line: &str) {
        self.print(line, true, None);
    }

    fn print(&self, line: &str, to_stderr: bool, event: Option<Event>) {
        let mut s = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        let then = event.and_then(|e| s.progress.on(Instant::now(), e));
        s.print(line, to_stderr, then);
    }

    /// Ends the run: the bar gives way to a last line of the counts.
    pub fn finish(mut self) {
        self.stop_ticker();
        self.event(Event::End);
    }

    fn stop_ticker(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop_ticker();
        let mut s = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if s.bar.take().is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn line(d: Option<Draw>) -> Option<String> {
        match d {
            Some(Draw::Line(l)) => Some(l),
            Some(Draw::Bar(b)) => panic!("a bar in line style: {b}"),
            None => None,
        }
    }

    #[test]
    fn each_test_is_timed_from_the_previous_end_or_its_binary_start() {
        let t0 = Instant::now();
        let mut t = Timings::default();
        // Before any binary started: nothing to time from.
        t.on(t0, Event::TestFinished, Some("stray"));
        t.on(t0 + secs(1), Event::BinaryStarted, None);
        t.on(t0 + secs(4), Event::TestFinished, Some("a"));
        t.on(t0 + secs(5), Event::TestFinished, Some("b"));
        t.on(t0 + secs(6), Event::BinaryFinished, None);
        t.on(t0 + secs(20), Event::BinaryStarted, None);
        t.on(t0 + secs(30), Event::TestFinished, Some("c"));
        assert_eq!(
            t.slowest(2),
            vec![("c".to_owned(), secs(10)), ("a".to_owned(), secs(3))]
        );
        assert_eq!(t.table(), "    10.0 c\n     3.0 a\n     1.0 b\n");
        assert_eq!(libtest_name("test it::x::y ... ok"), Some("it::x::y"));
        assert_eq!(libtest_name("running 3 tests"), None);
    }

    #[test]
    fn libtest_lines_are_told_apart() {
        assert_eq!(
            libtest_event("test it::pd::alloc ... ok"),
            Some(Event::TestFinished)
        );
        assert_eq!(
            libtest_event("test it::qp::a ... FAILED"),
            Some(Event::TestFinished)
        );
        assert_eq!(
            libtest_event("test rping ... ignored, needs an RDMA device: cargo xtask test"),
            Some(Event::TestFinished)
        );
        assert_eq!(
            libtest_event("test memory/src/lib.rs - (line 26) ... ok"),
            Some(Event::TestFinished)
        );
        assert_eq!(
            libtest_event("test result: ok. 2 passed; 0 failed; 0 ignored"),
            Some(Event::BinaryFinished)
        );
        // The name printed before a test that writes to stdout, and other lines.
        assert_eq!(libtest_event("test it::noisy ... "), None);
        assert_eq!(libtest_event("running 3 tests"), None);
        assert_eq!(libtest_event("testing the ... ok thing"), None);
        assert_eq!(libtest_event(""), None);
    }

    #[test]
    fn lines_come_when_both_30_s_and_a_tenth_went_by_and_at_each_binary_end() {
        let t0 = Instant::now();
        let mut p = Progress::new("tier rxe", 100, "tests", Style::Lines, t0);
        assert_eq!(p.on(t0, Event::BinaryStarted), None);
        // A binary that ran none of them says nothing.
        assert_eq!(p.on(t0, Event::BinaryFinished), None);
        // 20 tests in 10 s: a fifth of them, but not 30 s.
        for i in 1..=20 {
            assert_eq!(
                p.on(t0 + secs(i / 2), Event::TestFinished),
                None,
                "test {i}"
            );
        }
        // 30 s, and a tenth since the last line (none yet).
        assert_eq!(
            line(p.on(t0 + secs(30), Event::TestFinished)).as_deref(),
            Some("tier rxe: 21 of 100 tests, 30 s, about 2 min left")
        );
        // 40 s later but only 5 tests more: no line until the tenth.
        for i in 22..=30 {
            assert_eq!(p.on(t0 + secs(70), Event::TestFinished), None, "test {i}");
        }
        assert_eq!(
            line(p.on(t0 + secs(71), Event::TestFinished)).as_deref(),
            Some("tier rxe: 31 of 100 tests, 1 min 11 s, about 3 min left")
        );
        // A binary's end gives a line at once, unless the last line already said as much.
        p.on(t0 + secs(72), Event::TestFinished);
        assert_eq!(
            line(p.on(t0 + secs(73), Event::BinaryFinished)).as_deref(),
            Some("tier rxe: 32 of 100 tests, 1 min 13 s, about 3 min left")
        );
        assert_eq!(p.on(t0 + secs(74), Event::BinaryFinished), None);
        assert_eq!(p.on(t0 + secs(75), Event::End), None);
        assert_eq!(p.done, 32);
    }

    #[test]
    fn no_estimate_before_five_tests_nor_after_the_last() {
        let t0 = Instant::now();
        let mut p = Progress::new("host tier", 6, "tests", Style::Lines, t0);
        for _ in 0..4 {
            p.on(t0 + secs(40), Event::TestFinished);
        }
        assert_eq!(p.estimate(t0 + secs(40)), None);
        assert_eq!(
            line(p.on(t0 + secs(41), Event::BinaryFinished)).as_deref(),
            Some("host tier: 4 of 6 tests, 41 s")
        );
        p.on(t0 + secs(50), Event::TestFinished);
        // 50 s for 5 tests: 10 s for the one left.
        assert_eq!(p.estimate(t0 + secs(50)), Some(secs(10)));
        p.on(t0 + secs(60), Event::TestFinished);
        assert_eq!(p.estimate(t0 + secs(60)), None);
        // More tests than listed: counted, never estimated.
        p.on(t0 + secs(61), Event::TestFinished);
        assert_eq!(
            line(p.on(t0 + secs(62), Event::End)).as_deref(),
            Some("host tier: 7 of 6 tests, 1 min 2 s")
        );
    }

    #[test]
    fn the_estimate_counts_from_the_first_binary() {
        let t0 = Instant::now();
        let mut p = Progress::new("tier siw", 20, "tests", Style::Lines, t0);
        // A boot of 2 min, then 10 tests in 5 min: 5 min for the 10 left.
        p.on(t0 + secs(120), Event::BinaryStarted);
        p.on(t0 + secs(200), Event::BinaryStarted);
        for _ in 0..10 {
            p.on(t0 + secs(400), Event::TestFinished);
        }
        assert_eq!(p.estimate(t0 + secs(420)), Some(secs(300)));
        assert_eq!(
            line(p.on(t0 + secs(420), Event::BinaryFinished)).as_deref(),
            Some("tier siw: 10 of 20 tests, 7 min 0 s, about 5 min left")
        );
    }

    #[test]
    fn the_bar_is_redrawn_on_each_event_and_on_ticks_that_change_it() {
        let t0 = Instant::now();
        let mut p = Progress::new("tier rxe", 8, "tests", Style::Bar, t0);
        assert_eq!(
            p.on(t0, Event::Tick),
            Some(Draw::Bar(
                "tier rxe [                ] 0 of 8 tests, 0 s".into()
            ))
        );
        assert_eq!(p.on(t0 + Duration::from_millis(300), Event::Tick), None);
        assert_eq!(
            p.on(t0 + secs(1), Event::Tick),
            Some(Draw::Bar(
                "tier rxe [                ] 0 of 8 tests, 1 s".into()
            ))
        );
        for i in 1..=6 {
            assert!(matches!(
                p.on(t0 + secs(10 * i), Event::TestFinished),
                Some(Draw::Bar(_))
            ));
        }
        // 60 s for 6 tests: 20 s for the 2 left.
        assert_eq!(
            p.on(t0 + secs(60), Event::BinaryFinished),
            Some(Draw::Bar(
                "tier rxe [############    ] 6 of 8 tests, 1 min 0 s, under 1 min left".into()
            ))
        );
        // At the end the bar gives way to a line.
        assert_eq!(
            p.on(t0 + secs(61), Event::End),
            Some(Draw::Line("tier rxe: 6 of 8 tests, 1 min 1 s".into()))
        );
    }

    #[test]
    fn times_are_said_shortly() {
        assert_eq!(elapsed(secs(0)), "0 s");
        assert_eq!(elapsed(secs(245)), "4 min 5 s");
        assert_eq!(elapsed(secs(3840)), "1 h 4 min");
        assert_eq!(time_left(secs(59)), "under 1 min left");
        assert_eq!(time_left(secs(60)), "about 1 min left");
        assert_eq!(time_left(secs(150)), "about 3 min left");
        assert_eq!(time_left(secs(3000)), "about 50 min left");
    }
}
