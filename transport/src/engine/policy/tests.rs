//! Host tests of the polling policy: how long each waiter spins, when the progress thread sleeps
//! on its channel and what wakes it, and when a reactor counts as active.

use super::*;

const US: Duration = Duration::from_micros(1);

fn policy(polling: Polling) -> Policy {
    Policy::new(&EndpointConfig::default().with_polling(polling))
}

/// A socket pair: the second end stands for a completion channel, readable once the
/// first is written.
fn channel() -> (
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    std::os::unix::net::UnixStream::pair().unwrap()
}

#[test]
fn the_sleep_on_the_channel_ends_for_a_completion_a_request_or_its_timer_only() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let p = std::sync::Arc::new(policy(Polling::Event));
    let (mut w, r) = channel();
    let fd = r.as_raw_fd();
    let long = Duration::from_secs(30);
    // Asked to run before it sleeps: no sleep at all.
    let t = Instant::now();
    assert!(!p.sleep_on_channel(fd, long, || true));
    assert!(t.elapsed() < long);
    // Its timer: the sleep lasts until then and says nothing is readable.
    let t = Instant::now();
    assert!(!p.sleep_on_channel(fd, 20 * 1000 * US, || false));
    assert!(t.elapsed() >= 20 * 1000 * US);
    // Woken (tick_soon, stop) while asleep: the sleep ends long before its timer, and
    // the wakeup is taken back (the next sleep lasts until its own timer).
    let waker = {
        let p = p.clone();
        std::thread::spawn(move || {
            while !p.sleeping_on_channel.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            p.unpark_progress();
        })
    };
    let t = Instant::now();
    assert!(!p.sleep_on_channel(fd, long, || false));
    assert!(t.elapsed() < long, "the wakeup did not end the sleep");
    waker.join().unwrap();
    let t = Instant::now();
    assert!(!p.sleep_on_channel(fd, 20 * 1000 * US, || false));
    assert!(t.elapsed() >= 20 * 1000 * US, "a wakeup stayed rung");
    // A completion: the channel is readable.
    w.write_all(b"x").unwrap();
    assert!(p.sleep_on_channel(fd, long, || false));
}

#[test]
fn a_blocked_call_spins_as_its_mode_says() {
    let (start, deadline) = (Instant::now(), Instant::now() + Duration::from_secs(1));
    let adaptive = policy(Polling::Adaptive { spin: 50 * US });
    assert_eq!(
        adaptive.spin_until(80 * US, start, deadline),
        start + 80 * US
    );
    assert_eq!(
        policy(Polling::Busy).spin_until(80 * US, start, deadline),
        deadline
    );
    assert_eq!(
        policy(Polling::Event).spin_until(80 * US, start, deadline),
        start
    );
    let reactor = policy(Polling::Reactor { spin: 50 * US });
    assert_eq!(reactor.spin_until(80 * US, start, deadline), start);
}

#[test]
fn a_task_spins_under_adaptive_polling_unless_a_driver_serves_several_connections() {
    let p = policy(Polling::Adaptive { spin: 50 * US });
    let (yes, no) = (|| true, || false);
    assert_eq!(p.task_spin(80 * US, no, no), Some(80 * US), "no driver");
    assert_eq!(
        p.task_spin(80 * US, no, yes),
        None,
        "current-thread runtime"
    );
    assert_eq!(
        p.task_spin(Duration::ZERO, yes, no),
        None,
        "no spin configured"
    );
    p.driver_began();
    assert_eq!(
        p.task_spin(80 * US, no, no),
        None,
        "a driver, several connections"
    );
    assert_eq!(
        p.task_spin(80 * US, yes, no),
        Some(80 * US),
        "a driver, one connection"
    );
    p.driver_ended();
    assert_eq!(
        p.task_spin(80 * US, no, no),
        Some(80 * US),
        "the driver gone"
    );
    for mode in [
        Polling::Busy,
        Polling::Event,
        Polling::Reactor { spin: 50 * US },
    ] {
        assert_eq!(policy(mode).task_spin(80 * US, yes, no), None, "{mode:?}");
    }
}

#[test]
fn busy_read_spins_every_task_in_every_mode() {
    let cfg = EndpointConfig::default()
        .with_polling(Polling::Event)
        .with_busy_read(Duration::from_millis(1));
    let p = Policy::new(&cfg);
    assert!(p.every_task_spins());
    let yes = || true;
    assert_eq!(
        p.task_spin(80 * US, yes, yes),
        Some(Duration::from_millis(1))
    );
    assert!(!policy(Polling::Adaptive { spin: 50 * US }).every_task_spins());
}

#[test]
fn the_progress_thread_sleeps_after_its_spin_and_never_spins_without_a_connection() {
    let adaptive = policy(Polling::Adaptive { spin: 50 * US });
    assert!(!adaptive.progress_sleeps(49 * US, 1));
    assert!(adaptive.progress_sleeps(50 * US, 1));
    assert!(adaptive.progress_sleeps(Duration::ZERO, 0));
    let busy = policy(Polling::Busy);
    assert!(!busy.progress_sleeps(Duration::from_secs(60), 1));
    assert!(busy.progress_sleeps(Duration::ZERO, 0));
    assert!(policy(Polling::Event).progress_sleeps(Duration::ZERO, 1));
    assert!(policy(Polling::Reactor { spin: 50 * US }).progress_sleeps(Duration::ZERO, 1));
}

#[test]
fn the_tokio_driver_spins_as_its_mode_says() {
    let adaptive = policy(Polling::Adaptive { spin: 50 * US });
    assert_eq!(adaptive.driver_spin(), 50 * US * GROWTH);
    assert_eq!(
        policy(Polling::Reactor { spin: 7 * US }).driver_spin(),
        7 * US
    );
    assert_eq!(policy(Polling::Busy).driver_spin(), Duration::ZERO);
    assert!(adaptive.wants_driver());
    adaptive.driver_began();
    assert!(!adaptive.wants_driver(), "one driver per endpoint");
    assert!(adaptive.reactor_drives());
    assert!(!policy(Polling::Busy).wants_driver());
}

#[test]
fn a_reactor_counts_as_active_only_for_a_while_after_it_drove() {
    let p = policy(Polling::Reactor {
        spin: Duration::ZERO,
    });
    let drove = p.epoch + Duration::from_secs(5);
    assert!(!p.reactor_active(drove), "never drove");
    p.reactor_drove_at(drove);
    assert!(p.reactor_active(drove));
    assert!(p.reactor_active(drove + REACTOR_QUIET - US));
    assert!(
        !p.reactor_active(drove + REACTOR_QUIET),
        "quiet for REACTOR_QUIET"
    );
}
