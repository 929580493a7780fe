//! One side's verbs resources: device, port and GID checks, the CQ, the RC queue pairs and the
//! buffer the peer may access, connected as perftest connects them (`ctx_connect`); the
//! memory of the test loops' requests; and the completion poller every test loop uses.
//!
//! The loops post as perftest does: borrowed work requests on registered memory kept for the
//! run ([`Endpoint::add_source`], [`Endpoint::add_sink`], through verbs' [`FixedBuffers`]),
//! completions told apart by their `wr_id` ([`send_wr_id`], [`recv_wr_id`]). An iteration
//! allocates nothing and keeps no in-flight bookkeeping.
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, AhAttr, CompletionBuf, Context, Cq, FixedBuffers, Gid, GidType, GlobalRoute,
    LinkLayer, LocalSlice, MemoryRegion, Mtu, Pd, PortState, PreparedSend, Qp, QpAttr, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, RemoteSlice, SendWr, WcStatus,
};

use super::cm_link::{server_addr, QpSpec, TestConns};
use super::exchange::Dest;
use super::options::Params;
use super::{Error, Verb};

/// The opened device and port.
#[derive(Debug)]
pub struct Device {
    /// The context.
    pub ctx: Context,
    /// The port used.
    pub port: u8,
    /// GID index in use (`None` on InfiniBand without `-x`).
    pub gid_index: Option<u32>,
    /// Its GID (zero without one).
    pub gid: Gid,
    /// The port's active MTU.
    pub active_mtu: Mtu,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// The device's `max_qp_rd_atom`.
    pub max_rd_atom: u32,
    /// The device's vendor id.
    pub vendor_id: u32,
}

impl Device {
    /// Opens `-d` (or the first device), checks `-i` and `-x` against what exists.
    pub fn open(p: &Params) -> Result<Device, Error> {
        let a = &p.args;
        let ctx = match &a.ib_dev {
            Some(name) => Context::open(name).map_err(|e| match e {
                verbs::Error::NoSuchDevice { name, found } => Error::Usage(format!(
                    "no RDMA device named {name:?} (found: {found}); pick one with -d"
                )),
                e => Error::Verbs("open the device", e),
            })?,
            None => {
                Context::open_first().map_err(|e| Error::Verbs("open the first RDMA device", e))?
            }
        };
        let dev = ctx
            .query_device()
            .map_err(|e| Error::Verbs("query the device", e))?;
        if a.ib_port > dev.phys_port_cnt() {
            return Err(Error::Usage(format!(
                "{} has {} port(s): use -i 1..={}",
                ctx.name(),
                dev.phys_port_cnt(),
                dev.phys_port_cnt()
            )));
        }
        let port = ctx
            .query_port(a.ib_port)
            .map_err(|e| Error::Verbs("query the port", e))?;
        if port.state() != PortState::Active {
            return Err(Error::Usage(format!(
                "port {} of {} is not active ({:?}): bring its link up",
                a.ib_port,
                ctx.name(),
                port.state()
            )));
        }
        let ethernet = port.link_layer() == LinkLayer::Ethernet;
        let gid_index = match a.gid_index {
            Some(i) => {
                if i >= port.gid_tbl_len() {
                    return Err(Error::Usage(format!(
                        "GID index {i} is out of range: port {} of {} has {} GID entries \
                         (use -x 0..={})",
                        a.ib_port,
                        ctx.name(),
                        port.gid_tbl_len(),
                        port.gid_tbl_len().saturating_sub(1)
                    )));
                }
                Some(i)
            }
            None if ethernet => Some(best_gid(&ctx, a.ib_port)?),
            None => None,
        };
        let gid = match gid_index {
            Some(i) => {
                let index = u8::try_from(i).map_err(|_| {
                    Error::Usage(format!(
                        "GID index {i} is out of range: at most 255 (use -x)"
                    ))
                })?;
                let e = ctx.query_gid(a.ib_port, index).map_err(|_| {
                    Error::Usage(format!(
                        "GID index {i} of port {} of {} is empty: pick a filled entry with -x \
                         (see `devinfo -v`)",
                        a.ib_port,
                        ctx.name()
                    ))
                })?;
                if e.gid.is_zero() {
                    return Err(Error::Usage(format!(
                        "GID index {i} of {} is empty: pick another with -x",
                        ctx.name()
                    )));
                }
                e.gid
            }
            None => Gid::ZERO,
        };
        Ok(Device {
            port: a.ib_port,
            gid_index,
            gid,
            active_mtu: match port.active_mtu() {
                Mtu::Unknown(_) => Mtu::Mtu1024,
                m => m,
            },
            lid: port.lid(),
            max_rd_atom: dev.max_qp_rd_atom(),
            vendor_id: dev.as_raw().vendor_id,
            ctx,
        })
    }
}

/// perftest's `get_best_gid_index`, simplified: the first RoCE v2 IPv4-mapped GID of the
/// port, else its first RoCE v2 GID, else its first non-empty one.
fn best_gid(ctx: &Context, port: u8) -> Result<u32, Error> {
    let table = ctx
        .gid_table()
        .map_err(|e| Error::Verbs("read the GID table", e))?;
    let mine: Vec<_> = table
        .iter()
        .filter(|e| e.port == port && !e.gid.is_zero())
        .collect();
    let v2 = |e: &&&verbs::GidEntry| e.gid_type == Some(GidType::RoceV2);
    mine.iter()
        .filter(v2)
        .find(|e| e.gid.to_ipv4_mapped().is_some())
        .or_else(|| mine.iter().find(v2))
        .or_else(|| mine.first())
        .map(|e| u32::from(e.index))
        .ok_or_else(|| {
            Error::Usage(format!(
                "port {port} of {} has no GID: give its netdev an IP address, or pick -x",
                ctx.name()
            ))
        })
}

/// The resources of one test run.
#[derive(Debug)]
pub struct Endpoint {
    /// Protection domain.
    pub pd: Pd,
    /// One CQ for sends and receives of every QP.
    pub cq: Cq,
    /// The queue pairs.
    pub qps: Vec<Qp>,
    /// The buffer the peer writes, reads or targets with atomics.
    pub target: MemoryRegion,
    /// Largest inline message the QPs accept.
    pub max_inline: u32,
    /// Outstanding reads/atomics this side accepts.
    pub out_reads: u32,
    /// What the peer may do on the QPs.
    qp_access: AccessFlags,
    /// `-R`: the rdma_cm connections of the QPs.
    cm: Option<TestConns>,
    /// `-R` server: the listener for the test's QPs, bound before the client may connect them.
    cm_listener: Option<cm::Listener>,
    /// send-bw on iWARP ([`Params::credits`]): `2 × QPs` 32-bit words, as perftest's
    /// `ctrl_buf`; the peer writes its receive count for QP `i` into word `QPs + i`.
    credits: Option<MemoryRegion>,
    /// Memory of the test loops' requests ([`add_source`](Self::add_source),
    /// [`add_sink`](Self::add_sink)). Last field, so it is dropped after every QP: a test may
    /// end with requests still posted (receives, a duration run's tail).
    buffers: FixedBuffers,
}

/// The test QPs' queue sizes (`-t`, `-r`, `-I`).
fn qp_cap(p: &Params) -> QpCap {
    QpCap {
        max_send_wr: p.tx_depth + 1,
        max_recv_wr: p.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        // Receive credits go as 4-byte inline WRITEs.
        max_inline_data: if p.credits {
            p.inline_size.max(4)
        } else {
            p.inline_size
        },
    }
}

impl Endpoint {
    /// Creates the CQ, `p.qps` RC queue pairs in Init, and the target buffer.
    pub fn create(dev: &Device, p: &Params) -> Result<Endpoint, Error> {
        let verb = p.test.verb();
        let ctx = &dev.ctx;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| Error::Verbs("allocate a PD", e))?;
        let channel = if p.args.events {
            Some(
                ctx.create_comp_channel()
                    .map_err(|e| Error::Verbs("create a completion channel", e))?,
            )
        } else {
            None
        };
        let cqe = (p.tx_depth + p.rx_depth + 8) * p.qps;
        let cq = ctx
            .create_cq(cqe, channel)
            .map_err(|e| Error::Verbs("create the CQ", e))?;
        let (target_access, qp_access) = match verb {
            Verb::Send => (
                AccessFlags::LOCAL_WRITE,
                AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
            ),
            Verb::Write => (
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                AccessFlags::REMOTE_WRITE,
            ),
            Verb::Read => (
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                AccessFlags::REMOTE_READ,
            ),
            Verb::Atomic => (
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
                AccessFlags::REMOTE_ATOMIC,
            ),
        };
        // perftest's bandwidth clients walk their target address over the peer's cycle
        // buffer (a page) for messages up to half a page: keep a page beyond the largest
        // message.
        let target_len = if verb == Verb::Send {
            4096
        } else {
            p.max_size.max(4096) as usize + 4096
        };
        let target = pd
            .reg_mr(target_len, target_access)
            .map_err(|e| Error::Verbs("register the buffer the peer accesses (lower -s?)", e))?;
        let mut qps = Vec::new();
        // With -R the QPs come from rdma_cm ([`Endpoint::add_cm_qps`]).
        if !p.args.rdma_cm {
            for _ in 0..p.qps {
                let init = QpInitAttr::new(QpType::Rc, &cq, &cq).cap(qp_cap(p));
                let qp = pd.create_qp(&init).map_err(|e| {
                    Error::Verbs(
                        "create the QP (the device may not take this -t, -r or -I)",
                        e,
                    )
                })?;
                qp.to_init(dev.port, qp_access)
                    .map_err(|e| Error::Verbs("move the QP to Init", e))?;
                qps.push(qp);
            }
        }
        let max_inline = qps
            .first()
            .map(|q| q.cap().max_inline_data.min(p.inline_size))
            .unwrap_or(p.inline_size);
        let out_reads = match verb {
            Verb::Read | Verb::Atomic => p.outs.unwrap_or(dev.max_rd_atom).min(dev.max_rd_atom),
            _ => 1,
        }
        .max(1);
        let credits = if p.credits {
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            Some(
                pd.reg_mr(8 * p.qps as usize, access)
                    .map_err(|e| Error::Verbs("register the receive credits", e))?,
            )
        } else {
            None
        };
        Ok(Endpoint {
            pd,
            cq,
            qps,
            target,
            max_inline,
            out_reads,
            qp_access,
            cm: None,
            cm_listener: None,
            credits,
            buffers: FixedBuffers::new(),
        })
    }

    /// Registers `len` bytes (at least 8), byte `i` set to `fill(i)`, as memory the NIC reads
    /// (SEND and WRITE sources; see [`FixedBuffers`]); returns all of it as a scatter/gather
    /// entry.
    pub fn add_source(
        &mut self,
        len: u64,
        fill: impl Fn(usize) -> u8,
        what: &'static str,
    ) -> Result<LocalSlice, Error> {
        let mut m = self.register(len, what)?;
        for (i, b) in m.as_mut_slice().iter_mut().enumerate() {
            *b = fill(i);
        }
        let m = Arc::new(m);
        let sge = m
            .local(..)
            .map_err(|e| Error::Verbs("describe a source", e))?;
        self.buffers.add_source(m);
        Ok(sge)
    }

    /// Registers `len` bytes (at least 8) as memory the NIC writes (receives, READ and atomic
    /// results), which the program never looks at; returns all of it as a scatter/gather
    /// entry.
    pub fn add_sink(&mut self, len: u64, what: &'static str) -> Result<LocalSlice, Error> {
        let m = self.register(len, what)?;
        self.buffers
            .add_sink(m, ..)
            .map_err(|e| Error::Verbs("describe a sink", e))
    }

    fn register(&self, len: u64, what: &'static str) -> Result<MemoryRegion, Error> {
        self.pd
            .reg_mr(len.max(8) as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| Error::Verbs(what, e))
    }

    /// Posts `wrs` on QP `qp` as one chain, on this endpoint's buffers.
    pub fn post_send(&self, qp: usize, wrs: &[SendWr<'_>]) -> Result<(), Error> {
        self.buffers
            .post_send(&self.qps[qp], wrs)
            .map_err(|e| Error::Verbs("post requests", e))
    }

    /// Checks `wr` once for QP `qp`, on this endpoint's buffers, to post it each iteration
    /// with [`PreparedSend::post`] (no request to build or check again).
    pub fn prepare_send<'a>(
        &'a self,
        qp: usize,
        wr: &SendWr<'a>,
    ) -> Result<PreparedSend<'a>, Error> {
        self.buffers
            .prepare_send(&self.qps[qp], wr)
            .map_err(|e| Error::Verbs("prepare a request", e))
    }

    /// Posts `n` receives of QP `qp` into `sge` (in chains), with [`recv_wr_id`].
    pub fn post_recvs(&self, qp: usize, sge: &[LocalSlice; 1], n: usize) -> Result<(), Error> {
        let wr = RecvWr {
            wr_id: recv_wr_id(qp),
            sges: sge,
        };
        self.buffers
            .prepare_recv(&self.qps[qp], &wr)
            .and_then(|mut prepared| prepared.post(n))
            .map_err(|e| Error::Verbs("post receives (lower -r?)", e))
    }

    fn cm_spec(&self, p: &Params) -> QpSpec<'_> {
        let rd_atomic = match p.test.verb() {
            Verb::Read | Verb::Atomic => self.out_reads.min(255) as u8,
            _ => 0,
        };
        QpSpec {
            pd: &self.pd,
            cq: &self.cq,
            cap: qp_cap(p),
            access: self.qp_access,
            rd_atomic,
        }
    }

    /// `-R` server: listens for the test's QPs on the test's port, before the handshake
    /// after which the client connects them (a client does nothing here).
    pub fn listen_cm(&mut self, p: &Params) -> Result<(), Error> {
        if p.args.servername.is_none() {
            self.cm_listener = Some(TestConns::listen(&self.cm_spec(p), p.args.port)?);
        }
        Ok(())
    }

    /// `-R`: connects (client) or accepts (server, on the listener of
    /// [`Endpoint::listen_cm`]) the test's QPs with rdma_cm on the endpoint's PD and CQ,
    /// ready to send (perftest's `create_rdma_cm_connection`).
    pub fn add_cm_qps(&mut self, p: &Params, src: Option<std::net::IpAddr>) -> Result<(), Error> {
        let spec = self.cm_spec(p);
        let n = p.qps as usize;
        let conns = match &p.args.servername {
            Some(server) => TestConns::connect(
                &spec,
                n,
                server_addr(server, p.args.port)?,
                src,
                p.timeout(),
            )?,
            None => {
                let listener = match &self.cm_listener {
                    Some(l) => l,
                    None => &TestConns::listen(&spec, p.args.port)?,
                };
                TestConns::accept(&spec, listener, n, p.timeout())?
            }
        };
        // The port is free again once every QP is accepted.
        self.cm_listener = None;
        self.qps = conns.parts.iter().map(|c| c.qp.clone()).collect();
        if let Some(q) = self.qps.first() {
            self.max_inline = q.cap().max_inline_data.min(p.inline_size);
        }
        self.cm = Some(conns);
        Ok(())
    }

    /// `-R`: ends the rdma_cm connections of the test's QPs.
    pub fn disconnect_cm(&self) {
        if let Some(c) = &self.cm {
            c.disconnect();
        }
    }

    /// This side's address message for QP `i` (`set_up_connection`).
    /// With receive credits, it names this side's credit word of QP `i` instead of the
    /// target buffer (perftest's `ctx_alloc_credit`).
    pub fn dest(&self, dev: &Device, i: usize, psn: u32) -> Dest {
        let (rkey, vaddr) = match &self.credits {
            Some(c) => (c.rkey(), c.addr() + 4 * (self.qps.len() + i) as u64),
            None => (self.target.rkey(), self.target.addr()),
        };
        Dest {
            lid: dev.lid,
            out_reads: self.out_reads,
            qpn: self.qps[i].qp_num(),
            psn,
            rkey,
            vaddr,
            gid: dev.gid,
            srqn: 0,
        }
    }

    /// The receive count the peer last granted on QP `qp` (0 without credits).
    pub fn credit(&self, qp: usize) -> u64 {
        let Some(c) = &self.credits else { return 0 };
        let mut word = [0u8; 4];
        c.read(4 * (self.qps.len() + qp), &mut word)
            .expect("a credit word of the region");
        u64::from(u32::from_ne_bytes(word))
    }

    /// Forgets the credits granted (before each size: the peer counts its receives anew).
    pub fn reset_credits(&mut self) {
        let n = self.qps.len();
        if let Some(c) = &mut self.credits {
            c.write(4 * n, &vec![0u8; 4 * n])
                .expect("the credit words of the region");
        }
    }

    /// Grants the peer `received` receives on QP `qp`: an inline RDMA WRITE of the count
    /// into its credit word (`remote`, from its address message), signaled (perftest's
    /// `ctrl_wr`). Its completion is reclaimed by the [`Poller`].
    pub fn grant_credit(&self, qp: usize, remote: &Dest, received: u64) -> Result<(), Error> {
        let word = (received as u32).to_ne_bytes();
        let at = RemoteSlice {
            addr: remote.vaddr,
            len: 4,
            rkey: remote.rkey,
        };
        self.qps[qp]
            .post_send_inline(
                verbs::WrOp::RdmaWrite(at),
                &[std::io::IoSlice::new(&word)],
                verbs::SendFlags::SIGNALED,
                None,
            )
            .map(drop)
            .map_err(|e| Error::Verbs("grant receive credits", e))
    }

    /// `ctx_connect`: QP `i` to RTR and RTS toward `remote`.
    pub fn connect(
        &self,
        dev: &Device,
        p: &Params,
        i: usize,
        mine: &Dest,
        remote: &Dest,
        mtu: Mtu,
    ) -> Result<(), Error> {
        let grh = dev.gid_index.map(|idx| {
            let mut g = GlobalRoute::new(remote.gid, idx as u8);
            g.hop_limit = 0xff;
            g
        });
        let av = AhAttr {
            dlid: remote.lid,
            sl: p.args.sl,
            src_path_bits: 0,
            static_rate: 0,
            port_num: dev.port,
            grh,
        };
        let qp = &self.qps[i];
        qp.modify(
            &QpAttr::new()
                .qp_state(QpState::Rtr)
                .path_mtu(mtu)
                .dest_qp_num(remote.qpn)
                .rq_psn(remote.psn)
                .max_dest_rd_atomic(mine.out_reads.min(255) as u8)
                .min_rnr_timer(12)
                .ah_attr(av),
        )
        .map_err(|e| Error::Verbs("move the QP to RTR", e))?;
        qp.modify(
            &QpAttr::new()
                .qp_state(QpState::Rts)
                .timeout(p.qp_timeout())
                .retry_cnt(7)
                .rnr_retry(7)
                .sq_psn(mine.psn)
                .max_rd_atomic(remote.out_reads.clamp(1, 255) as u8),
        )
        .map_err(|e| Error::Verbs("move the QP to RTS", e))
    }
}

/// The peer's buffer as an RDMA target of `len` bytes.
pub fn remote_slice(d: &Dest, len: u64) -> RemoteSlice {
    RemoteSlice {
        addr: d.vaddr,
        len: len as u32,
        rkey: d.rkey,
    }
}

/// `len` bytes of `buf` from `offset`, as a scatter/gather entry.
pub fn part(buf: LocalSlice, offset: u64, len: u64) -> Result<LocalSlice, Error> {
    buf.slice(offset as usize..(offset + len) as usize)
        .map_err(|e| Error::Verbs("describe a message (it is larger than its buffer)", e))
}

/// `wr_id` bit of a receive.
const RECV_BIT: u64 = 1;
/// `wr_id` bits 8..24: the QP's index.
const QP_SHIFT: u32 = 8;
/// `wr_id` bits 32..62: the requests a signaled send-queue request finishes.
const FINISHES_SHIFT: u32 = 32;

/// The `wr_id` of a send-queue request on QP `qp` that, signaled, finishes `finishes`
/// requests: itself and the unsignaled ones posted on the QP since the last signaled one.
pub fn send_wr_id(qp: usize, finishes: usize) -> u64 {
    ((finishes as u64) << FINISHES_SHIFT) | ((qp as u64 & 0xffff) << QP_SHIFT)
}

/// The `wr_id` of a receive on QP `qp`.
pub fn recv_wr_id(qp: usize) -> u64 {
    ((qp as u64 & 0xffff) << QP_SHIFT) | RECV_BIT
}

/// A successful completion, told apart by its `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// Whether it is a receive.
    pub recv: bool,
    /// Index of the QP.
    pub qp: usize,
    /// The requests it finishes (1 for a receive).
    pub finished: usize,
}

impl Done {
    fn from_wr_id(wr_id: u64) -> Done {
        let recv = wr_id & RECV_BIT != 0;
        Done {
            recv,
            qp: ((wr_id >> QP_SHIFT) & 0xffff) as usize,
            finished: if recv {
                1
            } else {
                ((wr_id >> FINISHES_SHIFT) as usize & 0x3fff_ffff).max(1)
            },
        }
    }
}

/// Polls the CQ (busy or by events), bounding the time without progress.
#[derive(Debug)]
pub struct Poller {
    buf: CompletionBuf,
    events: bool,
    timeout: Duration,
}

impl Poller {
    /// A poller taking up to `batch` completions at a time.
    pub fn new(batch: usize, events: bool, timeout: Duration) -> Poller {
        Poller {
            buf: CompletionBuf::new(batch.max(1)),
            events,
            timeout,
        }
    }

    /// Waits for at least one completion and appends them to `out`; a failed completion
    /// becomes an error naming its likely cause.
    pub fn wait(&mut self, ep: &Endpoint, out: &mut Vec<Done>) -> Result<(), Error> {
        self.collect(ep, out, true)
    }

    /// Takes the completions already there, without waiting.
    pub fn poll_now(&mut self, ep: &Endpoint, out: &mut Vec<Done>) -> Result<(), Error> {
        self.collect(ep, out, false)
    }

    fn collect(&mut self, ep: &Endpoint, out: &mut Vec<Done>, block: bool) -> Result<(), Error> {
        // Busy polling reads the clock only once it has spun a while: a completion that is
        // already there (the common case in a loop) costs no clock read.
        let mut start = self.events.then(Instant::now);
        let mut spins = 0u32;
        loop {
            let polled = if self.events && block {
                ep.cq
                    .wait_and_poll(&mut self.buf, Some(self.timeout))
                    .map_err(|e| Error::Verbs("wait for completions", e))?
            } else {
                ep.cq
                    .poll(&mut self.buf)
                    .map_err(|e| Error::Verbs("poll the CQ", e))?
            };
            let mut got = false;
            for wc in &polled {
                got = true;
                if let Err(e) = wc.status() {
                    return Err(Error::Completion(explain(e.status), e.to_string()));
                }
                if wc.wr_id() & verbs::OWNED_WR_ID != 0 {
                    // A receive credit (tracked by verbs): finished, nothing to count.
                    for qp in &ep.qps {
                        qp.reclaim(wc);
                    }
                    continue;
                }
                out.push(Done::from_wr_id(wc.wr_id()));
            }
            if got || !block {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if (self.events || spins % 1024 == 0)
                && start.get_or_insert_with(Instant::now).elapsed() >= self.timeout
            {
                return Err(Error::Peer(format!(
                    "no completion for {} s: the peer stopped (did it exit?) or runs a \
                     different test or parameters",
                    self.timeout.as_secs()
                )));
            }
        }
    }
}

/// The likely cause of a failed completion, in the user's terms.
fn explain(status: Option<WcStatus>) -> &'static str {
    match status {
        Some(WcStatus::RemAccessErr) => {
            "the peer refused access to its buffer: do both sides run the same test with the \
             same -s / -a?"
        }
        Some(WcStatus::RemInvReqErr) => {
            "the peer refused the request (message larger than its receive buffer, or an \
             operation it did not allow): do both sides run the same test with the same -s / -a?"
        }
        Some(WcStatus::LocLenErr) => {
            "a message larger than our receive buffer arrived: do both sides use the same -s / -a?"
        }
        Some(WcStatus::RetryExcErr) => {
            "the peer stopped answering (transport retries exhausted): did it exit or fail?"
        }
        Some(WcStatus::RnrRetryExcErr) => "the peer posted no receive: does it run the same test?",
        Some(WcStatus::RemOpErr) | Some(WcStatus::RemInvRdReqErr) => {
            "the peer could not take the request (a message larger than its receive buffer, \
             or an operation it does not run): do both sides run the same test with the same \
             -s / -a?"
        }
        Some(WcStatus::WrFlushErr) => {
            "the queue pair went to the error state: an earlier request failed, or the peer went \
             away or refused a request (on iWARP a refused request ends the connection: do both \
             sides run the same test with the same -s / -a?)"
        }
        Some(WcStatus::LocQpOpErr) => {
            "the request does not fit the QP, or (on iWARP) the peer refused it and ended the \
             connection: do both sides run the same test with the same -s / -a?"
        }
        _ => "a work request failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_name_the_queue_the_qp_and_what_a_completion_finishes() {
        assert_eq!(
            Done::from_wr_id(recv_wr_id(3)),
            Done {
                recv: true,
                qp: 3,
                finished: 1
            }
        );
        assert_eq!(
            Done::from_wr_id(send_wr_id(7, 100)),
            Done {
                recv: false,
                qp: 7,
                finished: 100
            }
        );
        // An unsignaled request finishes nothing by itself; should it complete (with an
        // error), it still counts as one.
        assert_eq!(Done::from_wr_id(send_wr_id(0, 0)).finished, 1);
        // The bits stay clear of those the verbs layer reserves for its owned requests.
        assert_eq!(send_wr_id(0xffff, 0x3fff_ffff) & verbs::OWNED_WR_ID, 0);
        assert_eq!(
            Done::from_wr_id(send_wr_id(0xffff, 0x3fff_ffff)),
            Done {
                recv: false,
                qp: 0xffff,
                finished: 0x3fff_ffff
            }
        );
    }
}
