//! Device-test support: the device under test, a loopback RC pair on a given protection
//! domain, and bounded completion waits.

use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, Completion, CompletionBuf, Context, Cq, Mtu, Pd, Qp, QpCap, QpEndpoint,
    QpInitAttr, QpType, Reclaimed,
};

/// Every wait in the device tests is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(10);

const PORT: u8 = 1;

/// A protection domain on the device under test (panics without a device: never a vacuous
/// pass).
pub fn pd() -> Pd {
    let dev = testkit::device();
    let ctx = Context::open(&dev.name).unwrap_or_else(|e| panic!("cannot open {}: {e}", dev.name));
    ctx.alloc_pd().expect("allocate a protection domain")
}

/// Two RC QPs of one device connected to each other, each with its own CQ; `a` is the
/// requester in the tests, `b` the responder.
pub struct Pair {
    pub cq_a: Cq,
    pub cq_b: Cq,
    pub a: Qp,
    pub b: Qp,
}

impl Pair {
    /// A connected pair on `pd`, allowing remote read, write and atomics.
    pub fn on(pd: &Pd) -> Pair {
        let ctx = pd.context();
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 32,
            ..QpCap::default()
        };
        let cq_a = ctx.create_cq(64, None).unwrap();
        let cq_b = ctx.create_cq(64, None).unwrap();
        let a = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a).cap(cap))
            .unwrap();
        let b = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b).cap(cap))
            .unwrap();

        let gid_index = testkit::device().gid_index;
        let gid = ctx.query_gid(PORT, gid_index).expect("the test GID").gid;
        let endpoint = |qp: &Qp, psn| QpEndpoint {
            qp_num: qp.qp_num(),
            psn,
            lid: 0,
            gid,
        };
        let (ea, eb) = (endpoint(&a, 0x100), endpoint(&b, 0x200));
        let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        for (qp, remote, own) in [(&a, &eb, &ea), (&b, &ea, &eb)] {
            qp.to_init(PORT, access).unwrap();
            qp.to_rtr(remote, PORT, Some(gid_index as u8), Mtu::Mtu1024)
                .unwrap();
            qp.to_rts(own.psn).unwrap();
        }
        Pair { cq_a, cq_b, a, b }
    }
}

/// Waits (at most [`TIMEOUT`]) for `n` completions on `cq`, reclaiming their buffers from `qp`.
pub fn completions(cq: &Cq, qp: &Qp, n: usize) -> Vec<(Completion, Vec<Reclaimed>)> {
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = CompletionBuf::new(16);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} completions within {TIMEOUT:?}",
            out.len()
        );
        for wc in &cq.poll(&mut buf).unwrap() {
            out.push((wc.to_completion(), qp.reclaim(wc)));
        }
    }
    out
}

/// Waits for one completion on `cq`, and takes back the one buffer of type `B` it returns.
pub fn one<B: 'static>(cq: &Cq, qp: &Qp) -> (Completion, B) {
    let (completion, mut reclaimed) = completions(cq, qp, 1).pop().unwrap();
    assert_eq!(reclaimed.len(), 1, "one request finished: {completion:?}");
    let buf = reclaimed[0]
        .take::<B>()
        .expect("the request's buffer comes back");
    (completion, buf)
}

/// Skips the calling test (`test`, from `testkit::test_name!`) when the device under test
/// lacks `capability`, as decided from what it reports, and says whether it did.
pub fn lacks(test: &str, capability: verbs::Capability) -> bool {
    let dev = testkit::device().name;
    let caps = verbs::Context::open(&dev)
        .and_then(|c| c.capabilities())
        .expect("query the test device");
    testkit::skip_unless(test, caps.require(&dev, capability))
}
