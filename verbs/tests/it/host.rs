//! Host-tier tests: behaviour that needs no device.
use verbs::{Error, QpAttr, QpAttrMask, QpState};

/// Device listing tells a kernel without RDMA apart from one with it: on a host without
/// `/sys/class/infiniband` (no RDMA in this kernel), listing gives the dedicated error with a
/// hint the user can follow (commands of the system, not of this repository); where RDMA
/// exists, listing succeeds.
#[test]
fn listing_reports_missing_rdma_support_clearly() {
    let has_rdma = std::path::Path::new("/sys/class/infiniband_verbs").exists()
        || std::path::Path::new("/sys/class/infiniband").exists();
    match verbs::devices() {
        Ok(list) => assert!(
            has_rdma,
            "listing succeeded without RDMA in sysfs: {list:?}"
        ),
        Err(e @ Error::NoRdmaSupport { .. }) => {
            assert!(!has_rdma, "RDMA in sysfs but listing says none: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("no RDMA support") && msg.contains("rdma link add"),
                "{msg}"
            );
        }
        Err(e) => panic!("unexpected listing error: {e}"),
    }
}

#[test]
fn attribute_mask_follows_setters() {
    let a = QpAttr::new()
        .qp_state(QpState::Init)
        .port_num(1)
        .pkey_index(0);
    assert_eq!(
        a.mask(),
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX
    );
}

/// Every handle can move between and be shared by threads (see the crate's thread-safety
/// section); the error type can cross threads too.
#[test]
fn handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<verbs::Context>();
    both::<verbs::Pd>();
    both::<verbs::MemoryRegion>();
    both::<verbs::RawMr>();
    both::<verbs::Cq>();
    both::<verbs::Qp>();
    both::<verbs::Srq>();
    both::<verbs::Ah>();
    both::<verbs::Error>();
    both::<verbs::AsyncEvent>();
    fn send<T: Send>() {}
    send::<verbs::CompletionChannel>();
    send::<verbs::SendRequest>();
    send::<verbs::RecvRequest>();
    send::<verbs::Reclaimed>();
}
