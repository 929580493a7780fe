//! Port speed, width and physical state (checked against `ibv_devinfo`), the device clock,
//! completion vectors, and the full `ibv_query_qp` of a connected QP.
use std::process::Command;
use std::time::Duration;

use verbs::{AccessFlags, CqExAttr, Error, Mtu, PhysState, QpState, QpType};

use crate::support::{gid, open, Pair, PORT};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn port_speed_width_and_state_print_like_ibv_devinfo() {
    let ctx = open();
    let port = ctx.query_port(PORT).unwrap();
    assert_eq!(port.phys_state(), PhysState::LinkUp);
    let speed = port.active_speed();
    let width = port.active_width();
    assert!(port.rate_gbps().unwrap() > 0.0);

    let mut cmd = Command::new("ibv_devinfo");
    cmd.args(["-v", "-d", ctx.name(), "-i", &PORT.to_string()]);
    let out = testkit::run_with_timeout(cmd, Duration::from_secs(10));
    testkit::assert_success("ibv_devinfo", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in ibv_devinfo output:\n{text}"))
            .trim()
            .to_string()
    };
    // ibv_devinfo prints e.g. "active_width: 1X (1)", "active_speed: 2.5 Gbps (1)",
    // "phys_state: LINK_UP (5)".
    assert_eq!(
        field("active_width:"),
        format!("{width} ({})", u8::from(width))
    );
    assert_eq!(
        field("active_speed:"),
        format!("{speed} ({})", u8::from(speed))
    );
    // ibv_devinfo prints the physical state of InfiniBand-transport ports only.
    if ctx.transport() == verbs::Transport::Ib {
        assert_eq!(field("phys_state:"), format!("{} (5)", PhysState::LinkUp));
    } else {
        assert!(!text.contains("phys_state:"), "{text}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn device_clock_reads_or_is_unsupported() {
    let ctx = open();
    match ctx.query_rt_values_ex() {
        Ok(t0) => {
            let t1 = ctx.query_rt_values_ex().unwrap();
            assert!(t1 >= t0, "{t0:?} then {t1:?}");
        }
        Err(e) => {
            assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            assert!(e.to_string().contains("ibv_query_rt_values_ex"), "{e}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn cqs_on_each_completion_vector() {
    let ctx = open();
    let n = ctx.num_comp_vectors();
    assert!(n >= 1);
    let pd = ctx.alloc_pd().unwrap();
    for v in 0..n {
        let cq = ctx
            .create_cq_on_vector(8, Some(ctx.create_comp_channel().unwrap()), v)
            .unwrap();
        let cqx = match ctx.create_cq_ex(CqExAttr::new(8).comp_vector(v)) {
            Ok(cqx) => cqx,
            Err(e @ Error::Unsupported { .. }) => {
                testkit::skip(testkit::test_name!(), &e.to_string());
                return;
            }
            Err(e) => panic!("create_cq_ex on vector {v}: {e}"),
        };
        // Usable: a QP completes on them.
        pd.create_qp(&verbs::QpInitAttr::new(QpType::Rc, &cq, &cqx))
            .unwrap();
    }
    let e = ctx.create_cq_on_vector(8, None, n).unwrap_err();
    assert!(
        matches!(e, Error::CompVector { vector, count } if vector == n && count == n),
        "{e:?}"
    );
    assert!(e.to_string().contains("num_comp_vectors"), "{e}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn query_qp_reports_the_connection() {
    if crate::support::lacks(testkit::test_name!(), verbs::Capability::ManualConnect) {
        return;
    }
    let p = Pair::rc();
    let ctx = open();
    let (sgid, g) = gid(&ctx);
    let q = p.a.query().unwrap();
    assert_eq!(q.state(), Some(QpState::Rts));
    assert_eq!(q.qp_type(), Some(QpType::Rc));
    assert_eq!(q.dest_qp_num(), p.b.qp_num());
    // support::connect: a sends from PSN 0x100 and expects b's 0x200.
    assert_eq!((q.sq_psn(), q.rq_psn()), (0x100, 0x200));
    assert_eq!(q.path_mtu(), Some(Mtu::Mtu1024));
    assert_eq!(q.port_num(), PORT);
    assert_eq!(q.dest_gid(), g);
    assert_eq!(q.sgid_index(), sgid);
    assert_eq!((q.timeout(), q.retry_cnt(), q.rnr_retry()), (14, 7, 7));
    assert!(q.access_flags().contains(AccessFlags::REMOTE_WRITE));
    // The device may report more than it granted at creation (rxe rounds the queue up).
    assert!(q.init_cap().max_send_wr >= p.a.cap().max_send_wr);
    assert!(!q.sq_sig_all());
    // After an error transition, the query sees it (and the handle's state follows).
    p.a.to_error().unwrap();
    assert_eq!(p.a.query().unwrap().state(), Some(QpState::Err));
    assert_eq!(p.a.state(), QpState::Err);
}
