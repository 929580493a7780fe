//! Test support: the device under test, a loopback RC pair, and bounded completion waits.
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, Completion, CompletionBuf, Context, Cq, Gid, Mtu, Pd, Qp, QpCap, QpEndpoint,
    QpInitAttr, QpType, Reclaimed, WorkCompletion,
};

/// Every wait in the tests is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub const PORT: u8 = 1;

/// The device under test, opened (panics without one: never a vacuous pass).
pub fn open() -> Context {
    let dev = testkit::device();
    Context::open(&dev.name).unwrap_or_else(|e| panic!("cannot open {}: {e}", dev.name))
}

/// The RoCE v2 GID index the environment names, and its GID.
pub fn gid(ctx: &Context) -> (u8, Gid) {
    let idx = testkit::device().gid_index;
    let e = ctx.query_gid(PORT, idx).expect("query the test GID");
    (idx, e.gid)
}

/// Two RC (or UC) QPs on one device connected to each other, each with its own CQ.
pub struct Pair {
    pub pd: Pd,
    pub cq_a: Cq,
    pub cq_b: Cq,
    pub a: Qp,
    pub b: Qp,
}

pub const ALL_REMOTE: AccessFlags = AccessFlags::REMOTE_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

impl Pair {
    pub fn rc() -> Pair {
        Self::new(QpType::Rc, QpCap::default())
    }

    pub fn new(t: QpType, cap: QpCap) -> Pair {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let cq_a = ctx.create_cq(256, None).unwrap();
        let cq_b = ctx.create_cq(256, None).unwrap();
        let a = pd
            .create_qp(&QpInitAttr::new(t, &cq_a, &cq_a).cap(cap))
            .unwrap();
        let b = pd
            .create_qp(&QpInitAttr::new(t, &cq_b, &cq_b).cap(cap))
            .unwrap();
        connect(&ctx, &a, &b);
        Pair {
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
}

/// Brings two QPs of one device to RTS, connected to each other.
pub fn connect(ctx: &Context, a: &Qp, b: &Qp) {
    let (sgid, gid) = gid(ctx);
    let access = match a.qp_type() {
        QpType::Uc => AccessFlags::REMOTE_WRITE,
        _ => ALL_REMOTE,
    };
    let ea = QpEndpoint {
        qp_num: a.qp_num(),
        psn: 0x100,
        lid: 0,
        gid,
    };
    let eb = QpEndpoint {
        qp_num: b.qp_num(),
        psn: 0x200,
        lid: 0,
        gid,
    };
    // One end through the typestate API, the other through the plain calls.
    verbs::QpIn::new(a.clone())
        .unwrap()
        .init(PORT, access)
        .unwrap()
        .rtr(&eb, PORT, Some(sgid), Mtu::Mtu1024)
        .unwrap()
        .rts(ea.psn)
        .unwrap();
    b.to_init(PORT, access).unwrap();
    b.to_rtr(&ea, PORT, Some(sgid), Mtu::Mtu1024).unwrap();
    b.to_rts(eb.psn).unwrap();
}

/// Polls `cq` until `n` completions arrived (panics after [`TIMEOUT`]), passing each to `f`.
pub fn drain(cq: &Cq, n: usize, mut f: impl FnMut(&WorkCompletion)) {
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = CompletionBuf::new(16);
    let mut got = 0;
    while got < n {
        assert!(
            Instant::now() < deadline,
            "only {got} of {n} completions within {TIMEOUT:?}"
        );
        let polled = cq.poll(&mut buf).unwrap();
        for wc in &polled {
            f(wc);
            got += 1;
        }
    }
}

/// Waits for exactly one completion, reclaims its buffers from `qp`, and returns both.
pub fn one(cq: &Cq, qp: &Qp) -> (Completion, Vec<Reclaimed>) {
    let mut out = None;
    drain(cq, 1, |wc| out = Some((wc.to_completion(), qp.reclaim(wc))));
    out.unwrap()
}

/// Asserts the CQ stays empty for a moment.
pub fn assert_quiet(cq: &Cq) {
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = CompletionBuf::new(4);
    let polled = cq.poll(&mut buf).unwrap();
    assert!(polled.is_empty(), "unexpected completions: {:?}", &*polled);
}

/// Skips the calling test (`test`, from `testkit::test_name!`) when the device under test
/// lacks `capability`, as decided from what it reports, and says whether it did.
pub fn lacks(test: &str, capability: verbs::Capability) -> bool {
    let caps = open().capabilities().expect("query the device");
    testkit::skip_unless(test, caps.require(&testkit::device().name, capability))
}
