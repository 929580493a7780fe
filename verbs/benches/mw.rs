//! Device benchmark: what exposing a range of registered memory to a peer costs with a memory
//! window against a registration of its own, for 64 B, 4 KiB and 1 MiB of a 2 MiB region.
//!
//! - type 2: bind by send request + local invalidate, each waited for (expose and revoke);
//! - type 1: a rebind through `ibv_bind_mw`, waited for (expose; the next bind revokes);
//! - baseline: `ibv_reg_mr` + `ibv_dereg_mr` of the same range of memory that is already
//!   allocated (the registration only, no allocation).
//!
//! Run in the guest: `cargo bench -p rdma-verbs --bench mw --no-run`, then
//! `cargo xtask guest -- <that executable> --bench`. The device is `RDMA_TEST_DEVICE`, else the
//! first one. Each case runs a few fixed-length samples and prints the median of the mean
//! time per operation, and the ratio to the registration.
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, Context, Cq, MemoryRegion, Mtu, Mw, MwType, Pd, Qp, QpEndpoint, QpInitAttr,
    QpType, SendRequest,
};

const REGION: usize = 2 << 20;
const SIZES: [usize; 3] = [64, 4096, 1 << 20];
const SAMPLES: usize = 5;
const SAMPLE: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(5);

/// A loopback RC QP in RTS and its CQ.
fn loopback(ctx: &Context, pd: &Pd) -> (Cq, Qp) {
    let dev = testkit::device();
    let cq = ctx.create_cq(64, None).expect("create_cq");
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .expect("create_qp");
    let gid = ctx.query_gid(1, dev.gid_index).expect("query_gid").gid;
    let me = QpEndpoint {
        qp_num: qp.qp_num(),
        psn: 0,
        lid: 0,
        gid,
    };
    qp.to_init(1, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)
        .expect("init");
    qp.to_rtr(&me, 1, Some(dev.gid_index), Mtu::Mtu1024)
        .expect("rtr");
    qp.to_rts(0).expect("rts");
    (cq, qp)
}

/// Waits for one successful completion and reclaims it.
fn complete(cq: &Cq, qp: &Qp) {
    let wc = cq.wait_one(WAIT).expect("completion");
    wc.status().expect("successful completion");
    drop(qp.reclaim(&wc));
}

/// The median over [`SAMPLES`] of the mean ns of `op` within [`SAMPLE`].
fn measure(mut op: impl FnMut()) -> f64 {
    for _ in 0..20 {
        op();
    }
    let mut means: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < SAMPLE {
                op();
                n += 1;
            }
            start.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[SAMPLES / 2]
}

fn main() -> ExitCode {
    if !std::env::args().any(|a| a == "--bench") {
        return ExitCode::SUCCESS;
    }
    let dev = testkit::device();
    let ctx = Context::open(&dev.name).expect("open the device");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (cq, qp) = loopback(&ctx, &pd);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    let region: Arc<MemoryRegion> = Arc::new(pd.reg_mr(REGION, access).expect("reg_mr"));
    let t1: Mw = pd.alloc_mw(MwType::Type1).expect("type 1 window");
    let t2: Mw = pd.alloc_mw(MwType::Type2).expect("type 2 window");
    let rights = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    // Memory for the baseline's registrations, allocated once.
    let mut plain = vec![0u8; REGION];
    let reg_access = AccessFlags::LOCAL_WRITE | rights;

    println!(
        "device {}: exposing a range to a peer, mean per operation (median of {SAMPLES} samples)",
        dev.name
    );
    println!(
        "{:>8} {:>22} {:>18} {:>22} {:>9} {:>9}",
        "bytes", "type2 bind+inv (us)", "type1 bind (us)", "reg+dereg (us)", "t2/reg", "t1/reg"
    );
    for len in SIZES {
        let bind2 = measure(|| {
            let req = SendRequest::bind_mw(&t2, region.clone(), 0..len, rights).expect("bind");
            qp.post_send(req).expect("post bind");
            complete(&cq, &qp);
            qp.post_send(SendRequest::local_inv(&t2))
                .expect("post local_inv");
            complete(&cq, &qp);
        });
        let bind1 = measure(|| {
            qp.bind_mw(&t1, &region, 0..len, rights).expect("bind_mw");
            complete(&cq, &qp);
        });
        let reg = measure(|| {
            // SAFETY: `plain` outlives the registration, which is dropped at once; nothing
            // is posted with it.
            let mr = unsafe { pd.reg_mr_raw(plain.as_mut_ptr(), len, reg_access) }.expect("reg_mr");
            drop(mr);
        });
        println!(
            "{len:>8} {:>22.2} {:>18.2} {:>22.2} {:>9.2} {:>9.2}",
            bind2 / 1e3,
            bind1 / 1e3,
            reg / 1e3,
            bind2 / reg,
            bind1 / reg
        );
    }
    ExitCode::SUCCESS
}
