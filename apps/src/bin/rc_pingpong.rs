//! `rc-pingpong`: the RC ping-pong of rdma-core's `ibv_rc_pingpong`, on our verbs layer.
//! Same options, same out-of-band exchange, same result lines: it interoperates with the C
//! program in either role.
//!
//! Its loop is the C program's: one registered buffer that every send reads and every receive
//! writes (the contents are never looked at); receives are posted as borrowed work requests
//! in chains, the send as one borrowed request checked once after the connection and posted
//! as it is each time ([`PreparedSend`]), both through verbs' [`FixedBuffers`] (which keeps
//! the buffer, as a sink), and completions are told apart by
//! their `wr_id`, so an iteration costs no in-flight bookkeeping, no allocation and no lock.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use apps::pingpong::{self, Dest};
use clap::Parser;
use verbs::{
    AccessFlags, AhAttr, CompletionBuf, Context, Cq, FixedBuffers, GlobalRoute, LinkLayer,
    LocalSlice, Mtu, PreparedSend, Qp, QpAttr, QpInitAttr, QpState, QpType, RecvWr, SendFlags,
    SendWr, WrOp,
};

/// Ping-pong over an RC QP (compatible with ibv_rc_pingpong).
#[derive(Parser, Debug)]
#[command(name = "rc-pingpong")]
struct Args {
    /// Listen on/connect to TCP port.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Use this RDMA device (default: the first found).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Use this port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    ib_port: u8,
    /// Size of the messages exchanged.
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level.
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Local port GID index (needed on RoCE).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<u8>,
    /// Server to connect to; without it, wait for a client.
    servername: Option<String>,
}

type BoxError = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    apps::init_tracing();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc-pingpong: {}", apps::report::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `wr_id` of the receives and of the send (the C program's `PINGPONG_RECV_WRID` and
/// `PINGPONG_SEND_WRID`, also its `pending` bits).
const RECV: u64 = 1;
const SEND: u64 = 2;

/// Receives posted per call when refilling the queue (one doorbell each).
const RECV_CHAIN: usize = 64;

struct PingPong {
    // Field order is drop order: the QP (and its posted requests) goes before the buffer.
    qp: Qp,
    cq: Cq,
    /// The message buffer, as a sink: every send reads `sge`, every receive writes it, and
    /// the program no longer reaches it.
    buf: FixedBuffers,
    /// The first `size` bytes of the buffer.
    sge: [LocalSlice; 1],
    /// SIGNALED, and INLINE when the QP takes `size` bytes inline.
    send_flags: SendFlags,
}

impl PingPong {
    /// The send, as the C program posts it: one borrowed work request, checked once here
    /// (the QP must be connected) and then posted each time with one `ibv_post_send`.
    fn prepare_send(&self) -> Result<PreparedSend<'_>, BoxError> {
        let wr = SendWr {
            wr_id: SEND,
            op: WrOp::Send,
            sges: &self.sge,
            flags: self.send_flags,
            ud: None,
        };
        self.buf
            .prepare_send(&self.qp, &wr)
            .map_err(|e| format!("Couldn't post send: {e}").into())
    }

    /// Posts `n` receives into the buffer; returns how many were posted.
    fn post_recv(&self, n: usize) -> usize {
        let wr = RecvWr {
            wr_id: RECV,
            sges: &self.sge,
        };
        let chain = [wr; RECV_CHAIN];
        let mut posted = 0;
        while posted < n {
            let k = (n - posted).min(RECV_CHAIN);
            if self.buf.post_recv(&self.qp, &chain[..k]).is_err() {
                break;
            }
            posted += k;
        }
        posted
    }
}

fn connect_qp(
    qp: &Qp,
    port: u8,
    my_psn: u32,
    mtu: Mtu,
    sl: u8,
    dest: &Dest,
    sgid: Option<u8>,
) -> verbs::Result<()> {
    let mut av = AhAttr {
        dlid: dest.lid,
        sl,
        src_path_bits: 0,
        static_rate: 0,
        port_num: port,
        grh: None,
    };
    if dest.gid.interface_id() != 0 {
        let mut grh = GlobalRoute::new(dest.gid, sgid.unwrap_or(0));
        grh.hop_limit = 1;
        av.grh = Some(grh);
    }
    qp.modify(
        &QpAttr::new()
            .qp_state(QpState::Rtr)
            .path_mtu(mtu)
            .dest_qp_num(dest.qpn)
            .rq_psn(dest.psn)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12)
            .ah_attr(av),
    )?;
    qp.modify(
        &QpAttr::new()
            .qp_state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(my_psn)
            .max_rd_atomic(1),
    )
}

fn random_psn() -> u32 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut x = (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
    // splitmix64 step: enough to avoid two runs starting at the same PSN.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((x ^ (x >> 31)) & 0x00ff_ffff) as u32
}

fn run(args: &Args) -> Result<(), BoxError> {
    let mtu =
        pingpong::mtu_from_bytes(args.mtu).ok_or("the MTU must be 256, 512, 1024, 2048 or 4096")?;
    let ctx = match &args.ib_dev {
        Some(name) => Context::open(name)?,
        None => Context::open_first()?,
    };
    if ctx.transport() == verbs::Transport::Iwarp {
        return Err(format!(
            "{} is an iWARP device: rc-pingpong connects its queue pair by hand (the peers \
             trade QPN, PSN and GID over TCP, then move it to RTS), and an iWARP queue pair \
             reaches RTS only through the RDMA CM. Use rping, or the perftest tools with -R \
             (rdma_cm), on this device",
            ctx.name()
        )
        .into());
    }
    let size = args.size as usize;
    let rx_depth = args.rx_depth as usize;
    let channel = if args.events {
        Some(ctx.create_comp_channel()?)
    } else {
        None
    };
    let pd = ctx.alloc_pd()?;
    let mut buf = pd.reg_mr(size.max(1), AccessFlags::LOCAL_WRITE)?;
    buf.as_mut_slice().fill(0x7b);
    let cq = ctx.create_cq(args.rx_depth + 1, channel)?;
    let qp = pd.create_qp(
        &QpInitAttr::new(QpType::Rc, &cq, &cq)
            .max_send_wr(1)
            .max_recv_wr(args.rx_depth)
            .max_send_sge(1)
            .max_recv_sge(1),
    )?;
    let mut send_flags = SendFlags::SIGNALED;
    if qp.cap().max_inline_data as usize >= size {
        send_flags |= SendFlags::INLINE;
    }
    qp.to_init(args.ib_port, AccessFlags::empty())?;
    let mut kept = FixedBuffers::new();
    let sge = [kept.add_sink(buf, ..size)?];
    let pp = PingPong {
        qp,
        cq,
        buf: kept,
        sge,
        send_flags,
    };
    let mut routs = pp.post_recv(rx_depth);
    if routs < rx_depth {
        return Err(format!("Couldn't post receive ({routs})").into());
    }
    if args.events {
        pp.cq.req_notify(false)?;
    }

    let port = ctx.query_port(args.ib_port)?;
    if port.link_layer() != LinkLayer::Ethernet && port.lid() == 0 {
        return Err("Couldn't get local LID".into());
    }
    let gid = match args.gid_idx {
        Some(i) => ctx.query_gid(args.ib_port, i)?.gid,
        None => verbs::Gid::ZERO,
    };
    let me = Dest {
        lid: port.lid(),
        qpn: pp.qp.qp_num(),
        psn: random_psn(),
        gid,
    };
    println!("  local address:  {}", me.describe());

    let remote = match &args.servername {
        Some(server) => pingpong::client_exchange(server, args.port, &me)?,
        None => pingpong::server_exchange::<BoxError>(args.port, &me, |d| {
            connect_qp(&pp.qp, args.ib_port, me.psn, mtu, args.sl, d, args.gid_idx)
                .map_err(Into::into)
        })?,
    };
    println!("  remote address: {}", remote.describe());
    if args.servername.is_some() {
        connect_qp(
            &pp.qp,
            args.ib_port,
            me.psn,
            mtu,
            args.sl,
            &remote,
            args.gid_idx,
        )?;
    }

    let mut send = pp.prepare_send()?;
    let mut post_send = || {
        send.post()
            .map_err(|e| BoxError::from(format!("Couldn't post send: {e}")))
    };
    let mut pending = RECV;
    if args.servername.is_some() {
        post_send()?;
        pending |= SEND;
    }

    let start = Instant::now();
    let iters = args.iters as usize;
    let (mut rcnt, mut scnt) = (0usize, 0usize);
    let mut wcs = CompletionBuf::new(2);
    while rcnt < iters || scnt < iters {
        if args.events {
            pp.cq.get_event(None)?;
            pp.cq.req_notify(false)?;
        }
        // Busy, unless in event mode.
        let polled = pp.cq.poll(&mut wcs)?;
        for wc in &polled {
            if let Err(e) = wc.status() {
                return Err(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    e.status, e.code, e.wr_id
                )
                .into());
            }
            match wc.wr_id() {
                SEND => scnt += 1,
                RECV => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += pp.post_recv(rx_depth - routs);
                        if routs < rx_depth {
                            return Err(format!("Couldn't post receive ({routs})").into());
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending &= !wc.wr_id();
            if scnt < iters && pending == 0 {
                post_send()?;
                pending = RECV | SEND;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * iters as u64 * 2;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        bytes,
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        iters,
        usec / 1e6,
        usec / iters as f64
    );
    Ok(())
}
