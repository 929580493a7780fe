//! `devinfo`: what `ibv_devinfo` (and, with `-l`, `ibv_devices`) shows, from our verbs layer:
//! every device, port and GID-table field it can query; with `--counters`, each port's
//! counters as `rdma statistic show link` shows them.
use std::fmt::Write as _;

use verbs::{devices, Context, CounterGroup, Mtu, PortCounters, PortState};

/// The options (`ibv_devinfo`'s letters).
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "devinfo",
    about = "Show RDMA devices, like ibv_devinfo (--counters: port counters, like rdma statistic)"
)]
pub struct Args {
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Only this port.
    #[arg(short = 'i', long = "ib-port", value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
    /// List the devices only (like ibv_devices).
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Every field, and the GID table.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Each port's counters instead, a line per port as `rdma statistic show link DEV/PORT`
    /// prints them (`link DEV/PORT NAME VALUE ...`, the port's sysfs `hw_counters`, sorted by
    /// name); with -v also a `counters DEV/PORT ...` line of its sysfs `counters`, if it has
    /// them (which rdma does not show).
    #[arg(long = "counters", conflicts_with = "list")]
    pub counters: bool,
}

fn mtu(m: Mtu) -> String {
    match m {
        Mtu::Unknown(raw) => format!("unknown ({raw})"),
        m => format!("{} ({})", m.bytes(), u32::from(m)),
    }
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// Renders the report; errors say what to do.
pub fn render(a: &Args) -> Result<String, String> {
    let list = devices().map_err(|e| format!("cannot list RDMA devices: {e}"))?;
    let mut out = String::new();
    if list.is_empty() {
        return Err(
            "no RDMA devices found (load a driver, or `rdma link add` an rxe device)".into(),
        );
    }
    if a.list {
        let _ = writeln!(out, "    {:<16}\t   node GUID", "device");
        let _ = writeln!(out, "    {:<16}\t----------------", "------");
        for d in &list {
            let _ = writeln!(out, "    {:<16}\t{:016x}", d.name, d.guid);
        }
        return Ok(out);
    }
    let chosen: Vec<_> = match &a.ib_dev {
        Some(n) => {
            let d = list.iter().find(|d| &d.name == n).ok_or_else(|| {
                let names: Vec<_> = list.iter().map(|d| d.name.as_str()).collect();
                format!(
                    "no RDMA device named {n:?} (found: {}); pick one with -d",
                    names.join(", ")
                )
            })?;
            vec![d.clone()]
        }
        None => list.clone(),
    };
    for d in chosen {
        let ctx = Context::open(&d.name).map_err(|e| format!("cannot open {}: {e}", d.name))?;
        if a.counters {
            counters(&mut out, &ctx, a)?;
        } else {
            device(&mut out, &ctx, &d, a)?;
        }
    }
    Ok(out)
}

/// `--counters`: a line per port (only `-i`'s, if given).
fn counters(out: &mut String, ctx: &Context, a: &Args) -> Result<(), String> {
    let ports = match a.ib_port {
        Some(port) => port..=port,
        None => {
            let attr = ctx
                .query_device()
                .map_err(|e| format!("cannot query {}: {e}", ctx.name()))?;
            1..=attr.phys_port_cnt()
        }
    };
    for port in ports {
        let c = ctx.port_counters(port).map_err(|e| match e {
            verbs::Error::NoSuchPort { .. } => format!("{e}; pick one with -i"),
            e => format!(
                "cannot read the counters of {} port {port}: {e}",
                ctx.name()
            ),
        })?;
        counter_line(out, "link", &c, CounterGroup::HwCounters);
        if a.verbose && c.group(CounterGroup::Counters).next().is_some() {
            counter_line(out, "counters", &c, CounterGroup::Counters);
        }
    }
    Ok(())
}

/// `WHAT DEV/PORT NAME VALUE ...`: one group of a port's counters on one line, in the shape
/// of `rdma statistic show link`.
fn counter_line(out: &mut String, what: &str, c: &PortCounters, group: CounterGroup) {
    let _ = write!(out, "{what} {}/{}", c.device(), c.port());
    for (name, value) in c.group(group) {
        let _ = write!(out, " {name} {value}");
    }
    let _ = writeln!(out);
}

/// A transport as `ibv_devinfo` prints it: its name and `enum ibv_transport_type` value.
fn transport(t: verbs::Transport) -> &'static str {
    match t {
        verbs::Transport::Ib => "InfiniBand (0)",
        verbs::Transport::Iwarp => "iWARP (1)",
        verbs::Transport::Usnic => "usNIC (2)",
        verbs::Transport::UsnicUdp => "usNIC UDP (3)",
        _ => "unknown transport (-1)",
    }
}

fn device(out: &mut String, ctx: &Context, d: &verbs::DeviceInfo, a: &Args) -> Result<(), String> {
    let attr = ctx
        .query_device()
        .map_err(|e| format!("cannot query {}: {e}", d.name))?;
    let r = attr.as_raw();
    let _ = writeln!(out, "hca_id:\t{}", d.name);
    let _ = writeln!(out, "\ttransport:\t\t\t{}", transport(ctx.transport()));
    let _ = writeln!(out, "\tnode_type:\t\t\t{:?}", d.node_type);
    let _ = writeln!(out, "\tfw_ver:\t\t\t\t{}", attr.fw_ver());
    let _ = writeln!(out, "\tnode_guid:\t\t\t{}", guid(attr.node_guid()));
    let _ = writeln!(
        out,
        "\tsys_image_guid:\t\t\t{}",
        guid(u64::from_be(r.sys_image_guid))
    );
    let _ = writeln!(out, "\tvendor_id:\t\t\t{:#06x}", r.vendor_id);
    let _ = writeln!(out, "\tvendor_part_id:\t\t\t{}", r.vendor_part_id);
    let _ = writeln!(out, "\thw_ver:\t\t\t\t{:#x}", r.hw_ver);
    let _ = writeln!(out, "\tphys_port_cnt:\t\t\t{}", attr.phys_port_cnt());
    if a.verbose {
        let fields: [(&str, i64); 30] = [
            ("max_mr_size", attr.max_mr_size() as i64),
            ("page_size_cap", r.page_size_cap as i64),
            ("max_qp", i64::from(r.max_qp)),
            ("max_qp_wr", i64::from(r.max_qp_wr)),
            ("device_cap_flags", i64::from(r.device_cap_flags)),
            ("max_sge", i64::from(r.max_sge)),
            ("max_sge_rd", i64::from(r.max_sge_rd)),
            ("max_cq", i64::from(r.max_cq)),
            ("max_cqe", i64::from(r.max_cqe)),
            ("max_mr", i64::from(r.max_mr)),
            ("max_pd", i64::from(r.max_pd)),
            ("max_qp_rd_atom", i64::from(r.max_qp_rd_atom)),
            ("max_ee_rd_atom", i64::from(r.max_ee_rd_atom)),
            ("max_res_rd_atom", i64::from(r.max_res_rd_atom)),
            ("max_qp_init_rd_atom", i64::from(r.max_qp_init_rd_atom)),
            ("max_ee_init_rd_atom", i64::from(r.max_ee_init_rd_atom)),
            ("max_ee", i64::from(r.max_ee)),
            ("max_rdd", i64::from(r.max_rdd)),
            ("max_mw", i64::from(r.max_mw)),
            ("max_raw_ipv6_qp", i64::from(r.max_raw_ipv6_qp)),
            ("max_raw_ethy_qp", i64::from(r.max_raw_ethy_qp)),
            ("max_mcast_grp", i64::from(r.max_mcast_grp)),
            ("max_mcast_qp_attach", i64::from(r.max_mcast_qp_attach)),
            (
                "max_total_mcast_qp_attach",
                i64::from(r.max_total_mcast_qp_attach),
            ),
            ("max_ah", i64::from(r.max_ah)),
            ("max_srq", i64::from(r.max_srq)),
            ("max_srq_wr", i64::from(r.max_srq_wr)),
            ("max_srq_sge", i64::from(r.max_srq_sge)),
            ("max_pkeys", i64::from(r.max_pkeys)),
            ("local_ca_ack_delay", i64::from(r.local_ca_ack_delay)),
        ];
        for (k, v) in fields {
            if k == "device_cap_flags" {
                let _ = writeln!(out, "\t{k}:\t\t{v:#010x}");
            } else {
                let _ = writeln!(out, "\t{k}:{}{v}", tabs(k));
            }
        }
        let _ = writeln!(out, "\tatomic_cap:\t\t\t{:?}", attr.atomic_cap());
        if let Ok(ex) = ctx.query_device_ex() {
            let _ = writeln!(
                out,
                "\tdevice_cap_flags_ex:\t\t{:#x}",
                ex.device_cap_flags_ex()
            );
            let _ = writeln!(out, "\todp_general_caps:\t\t{:#x}", ex.odp_general_caps());
            let _ = writeln!(
                out,
                "\tcompletion_timestamp_mask:\t{:#x}",
                ex.completion_timestamp_mask()
            );
            let _ = writeln!(out, "\thca_core_clock:\t\t\t{}kHZ", ex.hca_core_clock());
            let _ = writeln!(out, "\tmax_dm_size:\t\t\t{}", ex.max_dm_size());
        }
    }
    let gids = if a.verbose {
        ctx.gid_table().ok()
    } else {
        None
    };
    for port in 1..=attr.phys_port_cnt() {
        if a.ib_port.is_some_and(|p| p != port) {
            continue;
        }
        let pa = ctx
            .query_port(port)
            .map_err(|e| format!("cannot query port {port} of {}: {e}", d.name))?;
        let p = pa.as_raw();
        let state = match pa.state() {
            PortState::Active => "PORT_ACTIVE (4)".to_string(),
            PortState::Unknown(_) => format!("unknown ({})", p.state),
            s => format!("{s:?} ({})", p.state),
        };
        let _ = writeln!(out, "\t\tport:\t{port}");
        let _ = writeln!(out, "\t\t\tstate:\t\t\t{state}");
        let _ = writeln!(out, "\t\t\tmax_mtu:\t\t{}", mtu(pa.max_mtu()));
        let _ = writeln!(out, "\t\t\tactive_mtu:\t\t{}", mtu(pa.active_mtu()));
        let _ = writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        let _ = writeln!(out, "\t\t\tport_lid:\t\t{}", pa.lid());
        let _ = writeln!(out, "\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
        let _ = writeln!(out, "\t\t\tlink_layer:\t\t{:?}", pa.link_layer());
        if a.verbose {
            let _ = writeln!(out, "\t\t\tmax_msg_sz:\t\t{:#x}", pa.max_msg_sz());
            let _ = writeln!(out, "\t\t\tport_cap_flags:\t\t{:#010x}", p.port_cap_flags);
            let _ = writeln!(out, "\t\t\tport_cap_flags2:\t{:#06x}", p.port_cap_flags2);
            let _ = writeln!(out, "\t\t\tmax_vl_num:\t\t{}", p.max_vl_num);
            let _ = writeln!(out, "\t\t\tbad_pkey_cntr:\t\t{:#x}", p.bad_pkey_cntr);
            let _ = writeln!(out, "\t\t\tqkey_viol_cntr:\t\t{:#x}", p.qkey_viol_cntr);
            let _ = writeln!(out, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
            let _ = writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
            let _ = writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", pa.gid_tbl_len());
            let _ = writeln!(out, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
            let _ = writeln!(out, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
            let (width, speed) = (pa.active_width(), pa.active_speed());
            let _ = writeln!(out, "\t\t\tactive_width:\t\t{width} ({})", u8::from(width));
            let _ = writeln!(out, "\t\t\tactive_speed:\t\t{speed} ({})", u8::from(speed));
            // As ibv_devinfo: the physical state of InfiniBand-transport ports only.
            if ctx.transport() == verbs::Transport::Ib {
                let phys = pa.phys_state();
                let _ = writeln!(out, "\t\t\tphys_state:\t\t{phys} ({})", u8::from(phys));
            }
            for e in gids.iter().flatten().filter(|e| e.port == port) {
                let ip = e
                    .gid
                    .to_ipv4_mapped()
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "\t\t\tGID[{:>3}]:\t\t{}, {:?}{}{}",
                    e.index,
                    e.gid,
                    e.gid_type,
                    if ip.is_empty() { "" } else { ", " },
                    ip
                );
            }
        }
        let _ = writeln!(out);
    }
    if a.ib_port
        .is_some_and(|p| p == 0 || p > attr.phys_port_cnt())
    {
        return Err(format!(
            "{} has {} port(s): use -i 1..={}",
            d.name,
            attr.phys_port_cnt(),
            attr.phys_port_cnt()
        ));
    }
    Ok(())
}

fn tabs(key: &str) -> &'static str {
    match key.len() + 2 {
        0..=7 => "\t\t\t\t",
        8..=15 => "\t\t\t",
        16..=23 => "\t\t",
        _ => "\t",
    }
}
