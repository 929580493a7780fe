//! The crate's `tracing` events (target `verbs`), captured by a subscriber of the test's own:
//! a device opened, posts refused in Reset (with the QP number and errno), a QP moved to Err,
//! and an async event as it is read.
use std::time::Duration;

use testkit::tracing_capture::capture;
use tracing::Level;
use verbs::{AccessFlags, AsyncEventKind, QpInitAttr, QpType, RecvRequest, SendRequest};

use crate::support::{connect, open, PORT, TIMEOUT};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn refusals_transitions_and_async_events_are_events() {
    let dev = testkit::device().name;
    let manual = open()
        .capabilities()
        .unwrap()
        .require(&dev, verbs::Capability::ManualConnect);
    let ((qp_num, srq), events) = capture("verbs", || {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64, None).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        // In Reset both posts are refused before the provider is called.
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        qp.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap_err();
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        qp.post_send(SendRequest::send(mr, 0..8).unwrap())
            .unwrap_err();
        qp.to_init(PORT, AccessFlags::empty()).unwrap();
        qp.to_error().unwrap();
        // An SRQ falling below its armed limit: an async event naming it.
        let srq = match &manual {
            Err(reason) => {
                testkit::skip_part("the async event (SRQ limit)", &reason.to_string());
                None
            }
            Ok(()) => Some(srq_limit_reached(&ctx)),
        };
        (qp.qp_num(), srq)
    });

    let opened = events
        .iter()
        .find(|e| e.message == "device opened")
        .unwrap_or_else(|| panic!("no device opened in {events:#?}"));
    assert_eq!(opened.level, Level::DEBUG);
    assert_eq!(opened.field("device"), Some(dev.as_str()));

    let qpn = qp_num.to_string();
    let refused: Vec<_> = events
        .iter()
        .filter(|e| e.message == "post refused" && e.field("qp_num") == Some(qpn.as_str()))
        .collect();
    assert_eq!(refused.len(), 2, "{events:#?}");
    for r in refused {
        assert_eq!(r.level, Level::WARN);
        // Refused here, before the provider: the errno the verbs give such a request.
        assert_eq!(
            r.field("errno"),
            Some(libc::EINVAL.to_string().as_str()),
            "{r:?}"
        );
        assert_eq!(r.field("by_provider"), Some("false"), "{r:?}");
        assert!(
            r.field("error").is_some_and(|e| e.contains("Reset")),
            "{r:?}"
        );
    }

    let to_err = events
        .iter()
        .find(|e| e.message == "QP moved to Err")
        .unwrap_or_else(|| panic!("no move to Err in {events:#?}"));
    assert_eq!(to_err.level, Level::DEBUG);
    assert_eq!(to_err.field("qp_num"), Some(qpn.as_str()));
    assert_eq!(to_err.field("from"), Some("Init"));

    if let Some(srq) = srq {
        let ev = events
            .iter()
            .find(|e| e.message == "async event" && e.field("event") == Some("SrqLimitReached"))
            .unwrap_or_else(|| panic!("no SRQ limit event in {events:#?}"));
        assert_eq!(ev.level, Level::DEBUG);
        assert_eq!(ev.field("device"), Some(dev.as_str()));
        assert_eq!(ev.field("srq"), Some(srq.to_string().as_str()));
    }
}

/// Arms an SRQ's limit and consumes a receive below it; returns the SRQ's address once its
/// async event was read.
fn srq_limit_reached(ctx: &verbs::Context) -> usize {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).srq(&srq))
        .unwrap();
    connect(ctx, &a, &b);
    for _ in 0..4 {
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        srq.post_recv(RecvRequest::new(mr, ..).unwrap()).unwrap();
    }
    srq.arm_limit(4).unwrap();
    let src = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    a.post_send(SendRequest::send(src, 0..8).unwrap()).unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(!left.is_zero(), "no SRQ limit event within {TIMEOUT:?}");
        if let Some(ev) = ctx
            .get_async_event(Some(left.min(Duration::from_secs(1))))
            .unwrap()
        {
            if ev.kind == Ok(AsyncEventKind::SrqLimitReached) {
                return srq.as_raw() as usize;
            }
        }
    }
}
