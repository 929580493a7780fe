//! Layout tests: every struct the safe layer reads or writes field by field has the size,
//! alignment and field offsets of the C definition in `<infiniband/verbs.h>` (rdma-core 44,
//! x86_64; values printed by a C program compiled against that header).
use crate::*;
use std::mem::{align_of, offset_of, size_of};

macro_rules! check {
    ($t:ident, $size:expr, $align:expr $(, $f:ident: $off:expr)* $(,)?) => {
        assert_eq!(size_of::<$t>(), $size, concat!("size of ", stringify!($t)));
        assert_eq!(align_of::<$t>(), $align, concat!("align of ", stringify!($t)));
        $(assert_eq!(offset_of!($t, $f), $off, concat!(stringify!($t), ".", stringify!($f)));)*
    };
}

#[test]
fn layouts_match_verbs_h() {
    check!(ibv_wc, 48, 8, wr_id: 0, status: 8, opcode: 12, vendor_err: 16, byte_len: 20, qp_num: 28, src_qp: 32, wc_flags: 36, pkey_index: 40, slid: 42, sl: 44, dlid_path_bits: 45);
    check!(ibv_sge, 16, 8, addr: 0, length: 8, lkey: 12);
    check!(ibv_send_wr, 128, 8, wr_id: 0, next: 8, sg_list: 16, num_sge: 24, opcode: 28, send_flags: 32, wr: 40, qp_type: 72);
    check!(ibv_recv_wr, 32, 8, wr_id: 0, next: 8, sg_list: 16, num_sge: 24);
    check!(ibv_qp_cap, 20, 4, max_send_wr: 0, max_recv_wr: 4, max_send_sge: 8, max_recv_sge: 12, max_inline_data: 16);
    check!(ibv_qp_init_attr, 64, 8, qp_context: 0, send_cq: 8, recv_cq: 16, srq: 24, cap: 32, qp_type: 52, sq_sig_all: 56);
    check!(ibv_global_route, 24, 8, dgid: 0, flow_label: 16, sgid_index: 20, hop_limit: 21, traffic_class: 22);
    check!(ibv_ah_attr, 32, 8, grh: 0, dlid: 24, sl: 26, src_path_bits: 27, static_rate: 28, is_global: 29, port_num: 30);
    check!(ibv_qp_attr, 144, 8, qp_state: 0, cur_qp_state: 4, path_mtu: 8, qkey: 16, rq_psn: 20, sq_psn: 24, dest_qp_num: 28, qp_access_flags: 32, cap: 36, ah_attr: 56, pkey_index: 120, max_rd_atomic: 126, max_dest_rd_atomic: 127, min_rnr_timer: 128, port_num: 129, timeout: 130, retry_cnt: 131, rnr_retry: 132, rate_limit: 136);
    check!(ibv_gid_entry, 32, 8, gid: 0, gid_index: 16, port_num: 20, gid_type: 24, ndev_ifindex: 28);
    check!(ibv_async_event_raw, 16, 8, element: 0, event_type: 8);
    check!(ibv_port_attr, 52, 4, state: 0, max_mtu: 4, active_mtu: 8, gid_tbl_len: 12, lid: 34, link_layer: 46, port_cap_flags2: 48);
    check!(ibv_device_attr, 232, 8, fw_ver: 0, node_guid: 64, max_mr_size: 80, max_qp: 108, max_qp_wr: 112, max_sge: 120, max_cqe: 132, max_mr: 136, max_pd: 140, max_qp_rd_atom: 144, atomic_cap: 164, max_srq: 212, max_srq_wr: 216, phys_port_cnt: 227);
    check!(ibv_srq_attr, 12, 4, max_wr: 0, max_sge: 4, srq_limit: 8);
    check!(ibv_srq_init_attr, 24, 8, srq_context: 0, attr: 8);
    check!(ibv_mr, 48, 8, context: 0, pd: 8, addr: 16, length: 24, handle: 32, lkey: 36, rkey: 40);
    check!(ibv_qp, 160, 8, context: 0, qp_num: 52, state: 56, qp_type: 60);
    check!(ibv_context, 328, 8, device: 0, cmd_fd: 264, async_fd: 268, num_comp_vectors: 272);
    check!(ibv_comp_channel, 16, 8, context: 0, fd: 8, refcnt: 12);
    check!(ibv_cq, 128, 8, context: 0, channel: 8, cq_context: 16, handle: 24, cqe: 28);
    check!(ibv_device_attr_ex, 400, 8, orig_attr: 0, comp_mask: 232, odp_caps: 240, completion_timestamp_mask: 264, hca_core_clock: 272, device_cap_flags_ex: 280, max_dm_size: 376, phys_port_cnt_ex: 396);
    // Fields inside unions.
    assert_eq!(offset_of!(ibv_wc, imm_data_invalidated_rkey_union), 24);
    assert_eq!(offset_of!(ibv_send_wr, imm_data_invalidated_rkey_union), 36);
    assert_eq!(offset_of!(ibv_send_wr, wr) + offset_of!(atomic_t, rkey), 64);
    assert_eq!(
        offset_of!(ibv_send_wr, wr) + offset_of!(ud_t, remote_qkey),
        52
    );
    assert_eq!(size_of::<ibv_gid>(), 16);
}
