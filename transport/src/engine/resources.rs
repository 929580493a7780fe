//! [`Resources`]: what an endpoint's connections share on the device: the protection
//! domain, the queues connections are spread over ([`Queues`]: a completion queue and a
//! shared receive queue kept filled from a pool of receive buffers, each pair for a block of
//! connections, made as connections come), and the pool of every other buffer (sends,
//! rendezvous chunks, READ sinks).

use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use memory::{Buffer, ClassConfig, Pool, PoolAccess, PoolConfig};
use parking_lot::Mutex;
use verbs::sys::fd::EpollSet;
use verbs::{Cq, Pd, RecvRing, Srq};

use crate::config::{EndpointConfig, SRQ_SLACK};
use crate::proto::{Delivery, Parts};
use crate::{ConfigError, Error, Result};

/// The device's resources an endpoint's connections share.
#[derive(Debug)]
pub(crate) struct Resources {
    pub pd: Pd,
    /// The queues made so far (the first `made`), in the order they were made; room for as
    /// many as `max_connections` needs.
    queues: Box<[OnceLock<Arc<Queues>>]>,
    made: AtomicUsize,
    /// Held while a pair of queues is made, so two connections that find every pair full
    /// make one between them.
    growing: Mutex<()>,
    /// Every pair's completion channel: readable while any is.
    channels: EpollSet,
    /// Connections per pair of queues.
    share: u32,
    /// The endpoint's maximum of connections (the refusal's figure).
    max_connections: u32,
    /// Entries of each completion queue.
    cq_depth: u32,
    /// Buffers of sends, rendezvous chunks, READ destinations and control frames.
    pub pool: Pool,
    /// On iWARP, where a READ's sink must allow remote writes (the response lands as a
    /// tagged message), READs land here first: a pool of its own whose keys are never sent.
    /// Its buffers give no slices (a peer could write them), so each is copied into a buffer
    /// of `pool` once its READ completed.
    pub read_sinks: Option<Pool>,
    /// Receive buffers only, of every pair of queues, sized for every receive posted plus
    /// every message the application may hold (credits bound both), so reposting a receive
    /// never fails for lack of memory the data path took: a missing receive would mean RNR.
    pub recv_pool: Pool,
    /// Receive buffers of messages the application dropped, posted again before any buffer
    /// is taken from `recv_pool`: in steady state a receive buffer goes from an SRQ to a
    /// message and back without the pool's bookkeeping (the pool's free and alloc cost
    /// more than keeping the buffer, the free on the path of a caller that drops a
    /// message before its next send). Its capacity is every buffer one pair's share of the
    /// pool holds, so keeping one never allocates.
    recycled: Mutex<Vec<Buffer>>,
    /// Receives each SRQ holds beyond its connections' windows: how many may be owed before
    /// they are replaced at once.
    srq_slack: u32,
    /// The size of a receive buffer: the protocol's frame size.
    frame_size: usize,
    /// Receives each SRQ is sized for: its connections' windows.
    srq_depth: u32,
}

/// A completion queue and a shared receive queue, for up to a share of the endpoint's
/// connections: each connection's QP sends its completions to one pair and takes its
/// receives from it.
#[derive(Debug)]
pub(crate) struct Queues {
    pub cq: Cq,
    pub srq: Srq,
    /// The SRQ's receives, all of it: a receive buffer is found again by the slot its
    /// completion's `wr_id` names.
    pub recv_ring: RecvRing<Buffer>,
    /// Receives owed to the SRQ: consumed and not yet replaced (replacing waits for an idle
    /// poll), or not posted because the pool had no buffer.
    pub srq_deficit: AtomicU32,
    /// Connections on these queues, and connections being made for them.
    taken: AtomicU32,
}

/// A connection's place on a pair of queues, from before its QP is made until its record
/// goes: the pair's room is taken while this lives.
#[derive(Debug)]
pub(crate) struct QueueSlot {
    queues: Arc<Queues>,
}

impl QueueSlot {
    /// The queues of the connection.
    pub(crate) fn queues(&self) -> &Queues {
        &self.queues
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.queues.taken.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Resources {
    /// Creates them on `ctx`, the device serving `local_ip`, sized for `cfg` within what the
    /// device allows (the first pair of queues made, its receives posted); on `pd` and with
    /// `pool` for data when given.
    pub(crate) fn open(
        ctx: &verbs::Context,
        local_ip: IpAddr,
        cfg: &EndpointConfig,
        pd: Option<Pd>,
        pool: Option<Pool>,
    ) -> Result<Resources> {
        let dev = ctx.query_device()?;
        let srq_depth = cfg.srq_depth().min(dev.max_srq_wr().saturating_sub(1));
        let srq_slack = SRQ_SLACK.min(dev.max_srq_wr().saturating_sub(1) - srq_depth);
        let cq_depth = cfg.cq_depth().min(dev.max_cqe());
        if cq_depth < cfg.cq_depth() || srq_depth < cfg.srq_depth() {
            return Err(ConfigError::DeviceLimits {
                max_cqe: dev.max_cqe(),
                max_srq_wr: dev.max_srq_wr(),
                connections_per_queue: cfg.queue_share(),
                window: cfg.proto.window,
                cq_depth: cfg.cq_depth(),
                srq_depth: cfg.srq_depth(),
            }
            .into());
        }
        let pd = match pd {
            Some(pd) => {
                let theirs = pd.context().name().to_string();
                if theirs != ctx.name() {
                    return Err(ConfigError::PdOnOtherDevice {
                        pd_device: theirs,
                        addr: local_ip,
                        device: ctx.name().to_string(),
                    }
                    .into());
                }
                pd
            }
            None => ctx.alloc_pd()?,
        };
        let needed = PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_READ;
        let pool = match pool {
            Some(pool) if !pool.access().contains(needed) => {
                return Err(ConfigError::PoolAccess {
                    access: format!("{:?}", pool.access()),
                }
                .into())
            }
            Some(pool) => pool,
            None => Pool::on_pd(
                &pd,
                PoolConfig::new().cap_bytes(cfg.pool_bytes).access(needed),
            )?,
        };
        let read_sinks = if cfg.write_completes_when_sent {
            let access = PoolAccess::LOCAL_WRITE | PoolAccess::REMOTE_WRITE;
            Some(Pool::on_pd(
                &pd,
                PoolConfig::new().cap_bytes(cfg.pool_bytes).access(access),
            )?)
        } else {
            None
        };
        let frame = cfg.proto.frame_size as usize;
        let frame_class = frame.next_multiple_of(64);
        // Each pair's receives posted and as many held by the application, and a margin.
        let per_queues = (2 * srq_depth as usize + srq_slack as usize + 64) * frame_class;
        let max_queues = cfg.max_queues() as usize;
        let recv_bytes = per_queues
            .saturating_mul(max_queues)
            .saturating_add(4 << 20);
        let recv_pool = Pool::on_pd(
            &pd,
            PoolConfig::new()
                .classes([ClassConfig::new(frame_class)])
                .cap_bytes(recv_bytes),
        )?;
        let res = Resources {
            recycled: Mutex::new(Vec::with_capacity(per_queues / frame_class)),
            recv_pool,
            read_sinks,
            pd,
            queues: (0..max_queues).map(|_| OnceLock::new()).collect(),
            made: AtomicUsize::new(0),
            growing: Mutex::new(()),
            channels: EpollSet::new()
                .map_err(|e| Error::Verbs(verbs::Error::CreateCompChannel(e)))?,
            share: cfg.queue_share(),
            max_connections: cfg.max_connections,
            cq_depth,
            pool,
            srq_slack,
            frame_size: frame,
            srq_depth,
        };
        res.make_queues()?;
        Ok(res)
    }

    /// The pairs of queues made so far, in the order they were made.
    #[inline]
    pub(crate) fn queues(&self) -> impl Iterator<Item = &Arc<Queues>> {
        let made = self.made.load(Ordering::Acquire);
        self.queues[..made].iter().filter_map(OnceLock::get)
    }

    /// The first pair of queues (made when the endpoint opened).
    pub(crate) fn first_queues(&self) -> &Queues {
        self.queues[0]
            .get()
            .expect("the first queues are made at open")
    }

    /// A place for a new connection: on the first pair of queues with room, or on a pair
    /// made now when every pair is full. [`Error::TooManyConnections`] once the endpoint has
    /// every pair its maximum needs and all are full.
    pub(crate) fn take_slot(&self) -> Result<QueueSlot> {
        if let Some(slot) = self.slot_with_room() {
            return Ok(slot);
        }
        let _growing = self.growing.lock();
        // Another connection may have made a pair meanwhile, or one may have gone.
        if let Some(slot) = self.slot_with_room() {
            return Ok(slot);
        }
        if self.made.load(Ordering::Acquire) == self.queues.len() {
            return Err(Error::TooManyConnections {
                max: self.max_connections,
            });
        }
        self.make_queues()?;
        self.slot_with_room().ok_or(Error::TooManyConnections {
            max: self.max_connections,
        })
    }

    fn slot_with_room(&self) -> Option<QueueSlot> {
        let share = self.share;
        self.queues().find_map(|q| {
            q.taken
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < share).then_some(n + 1)
                })
                .ok()
                .map(|_| QueueSlot { queues: q.clone() })
        })
    }

    /// Makes the next pair of queues (the caller holds `growing`, or is `open`): the
    /// completion queue on a channel of its own, in the channels' set and armed, and the
    /// SRQ with its receives posted. Published once complete: a poller never sees a pair
    /// without its receives.
    fn make_queues(&self) -> Result<()> {
        // The CQ and SRQ go on the PD's context: queue pairs need all three on one.
        let ctx = self.pd.context();
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(self.cq_depth, Some(channel))?;
        let fd: RawFd = cq.channel_fd().expect("made with a channel");
        self.channels
            .add(fd)
            .map_err(|e| Error::Verbs(verbs::Error::CreateCompChannel(e)))?;
        // Armed before anything completes on it: its first completion raises an event
        // (the pollers re-arm every pair after they drain the channels).
        cq.req_notify(false)?;
        let srq = self.pd.create_srq(self.srq_depth + self.srq_slack, 1)?;
        let recv_ring = srq.recv_ring(srq.max_wr())?;
        let queues = Arc::new(Queues {
            cq,
            srq,
            recv_ring,
            srq_deficit: AtomicU32::new(0),
            taken: AtomicU32::new(0),
        });
        self.post_receives(&queues, self.srq_depth + self.srq_slack)?;
        let i = self.made.load(Ordering::Acquire);
        let _ = self.queues[i].set(queues);
        self.made.store(i + 1, Ordering::Release);
        Ok(())
    }

    /// The descriptor readable while a completion channel of the endpoint has an event: one
    /// descriptor for every pair of queues, those made later included.
    pub(crate) fn channels_fd(&self) -> RawFd {
        self.channels.as_raw_fd()
    }

    /// Consumes and acknowledges every event on the completion channels.
    pub(crate) fn drain_channels(&self) {
        for q in self.queues() {
            while matches!(q.cq.get_event(Some(Duration::ZERO)), Ok(true)) {}
            q.cq.ack_events();
        }
    }

    /// Arms every completion queue: its next completion raises an event on its channel.
    pub(crate) fn arm(&self) -> Result<()> {
        for q in self.queues() {
            q.cq.req_notify(false)?;
        }
        Ok(())
    }

    /// The longest rendezvous chunk this endpoint reads: the largest buffer of the pool its
    /// READs land in (on iWARP, also of the data pool each is copied into).
    pub(crate) fn max_read_chunk(&self) -> u32 {
        let sinks = self.read_sinks.as_ref().unwrap_or(&self.pool);
        let longest = sinks.max_buffer_size().min(self.pool.max_buffer_size());
        u32::try_from(longest).unwrap_or(u32::MAX)
    }

    /// A receive of `queues` was consumed: it is replaced later, on an idle poll, unless
    /// `srq_slack` are owed now. Each SRQ holds that many beyond every credit granted on it,
    /// so the receives owed never leave a credit without a receive behind it.
    #[inline]
    pub(crate) fn owe_receive(&self, queues: &Queues) {
        if queues.srq_deficit.fetch_add(1, Ordering::Relaxed) + 1 >= self.srq_slack {
            self.repay_receives(queues);
        }
    }

    /// Posts `n` receive buffers of the frame size on the SRQ of `queues`; what the pool
    /// cannot give is owed (retried on every idle poll).
    pub(crate) fn post_receives(&self, queues: &Queues, n: u32) -> Result<()> {
        let frame = self.frame_size;
        for i in 0..n {
            let kept = self.recycled.lock().pop();
            let buf = match kept.map_or_else(|| self.recv_pool.try_alloc(frame), Ok) {
                Ok(b) => b,
                Err(_) => {
                    queues.srq_deficit.fetch_add(n - i, Ordering::Relaxed);
                    return Ok(());
                }
            };
            queues.recv_ring.post(buf).map_err(|e| e.error)?;
        }
        Ok(())
    }

    /// Drops a delivered message, keeping an eager message's receive buffer for the next
    /// receive posted; returns whether the drop must be reported to the protocol
    /// ([`Delivery::release`](crate::proto::Delivery::release)).
    pub(crate) fn release_delivery(&self, d: Delivery<Buffer>) -> bool {
        match d.parts {
            Parts::Eager(buf) | Parts::Bare(buf) => {
                self.recycle(buf);
                true
            }
            parts => Delivery { parts, ..d }.release(),
        }
    }

    /// Keeps `buf`, a receive buffer of the frame size, for the next receive posted (or
    /// gives it back to the pool if it is not one).
    fn recycle(&self, buf: Buffer) {
        if buf.len() != self.frame_size {
            return;
        }
        let mut kept = self.recycled.lock();
        if kept.len() < kept.capacity() {
            kept.push(buf);
        }
    }

    /// Posts the receives `queues` is owed.
    pub(crate) fn repay_receives(&self, queues: &Queues) {
        let owed = queues.srq_deficit.swap(0, Ordering::Relaxed);
        if owed > 0 {
            let _ = self.post_receives(queues, owed);
        }
    }
}
