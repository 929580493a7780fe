//! [`Resources`]: what an endpoint's connections share on the device: the protection
//! domain, one completion queue, one shared receive queue kept filled from a pool of receive
//! buffers, and the pool of every other buffer (sends, rendezvous chunks, READ sinks).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

use memory::{Buffer, ClassConfig, Pool, PoolAccess, PoolConfig};
use parking_lot::Mutex;
use verbs::{Cq, Pd, RecvRing, Srq};

use crate::config::{EndpointConfig, SRQ_SLACK};
use crate::proto::{Delivery, Parts};
use crate::{ConfigError, Result};

/// The device's resources an endpoint's connections share.
#[derive(Debug)]
pub(crate) struct Resources {
    pub pd: Pd,
    pub cq: Cq,
    pub srq: Srq,
    /// The SRQ's receives, all of it: a receive buffer is found again by the slot its
    /// completion's `wr_id` names.
    pub recv_ring: RecvRing<Buffer>,
    /// Buffers of sends, rendezvous chunks, READ destinations and control frames.
    pub pool: Pool,
    /// On iWARP, where a READ's sink must allow remote writes (the response lands as a
    /// tagged message), READs land here first: a pool of its own whose keys are never sent.
    /// Its buffers give no slices (a peer could write them), so each is copied into a buffer
    /// of `pool` once its READ completed.
    pub read_sinks: Option<Pool>,
    /// Receive buffers only, sized for every receive posted plus every message the
    /// application may hold (credits bound both), so reposting a receive never fails for
    /// lack of memory the data path took: a missing receive would mean RNR.
    pub recv_pool: Pool,
    /// Receive buffers of messages the application dropped, posted again before any buffer
    /// is taken from `recv_pool`: in steady state a receive buffer goes from the SRQ to a
    /// message and back without the pool's bookkeeping (the pool's free and alloc cost
    /// more than keeping the buffer, the free on the path of a caller that drops a
    /// message before its next send). Its capacity is every buffer the pool can hold, so
    /// keeping one never allocates.
    recycled: Mutex<Vec<Buffer>>,
    /// Receives owed to the SRQ: consumed and not yet replaced (replacing waits for an idle
    /// poll), or not posted because the pool had no buffer.
    pub(crate) srq_deficit: AtomicU32,
    /// Receives the SRQ holds beyond every connection's window: how many may be owed before
    /// they are replaced at once.
    srq_slack: u32,
    /// The size of a receive buffer: the protocol's frame size.
    frame_size: usize,
    /// Receives the SRQ is sized for: every connection's window.
    srq_depth: u32,
}

impl Resources {
    /// Creates them on `ctx`, the device serving `local_ip`, sized for `cfg` within what the
    /// device allows; on `pd` and with `pool` for data when given.
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
                max_connections: cfg.max_connections,
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
        // The CQ and SRQ go on the PD's context: queue pairs need all three on one.
        let ctx = pd.context();
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(cq_depth, Some(channel))?;
        let srq = pd.create_srq(srq_depth + srq_slack, 1)?;
        let recv_ring = srq.recv_ring(srq.max_wr())?;
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
        let recv_bytes =
            (2 * srq_depth as usize + srq_slack as usize + 64) * frame_class + (4 << 20);
        let recv_pool = Pool::on_pd(
            &pd,
            PoolConfig::new()
                .classes([ClassConfig::new(frame_class)])
                .cap_bytes(recv_bytes),
        )?;
        Ok(Resources {
            recycled: Mutex::new(Vec::with_capacity(recv_bytes / frame_class)),
            recv_pool,
            read_sinks,
            pd,
            cq,
            srq,
            recv_ring,
            pool,
            srq_deficit: AtomicU32::new(0),
            srq_slack,
            frame_size: frame,
            srq_depth,
        })
    }

    /// The longest rendezvous chunk this endpoint reads: the largest buffer of the pool its
    /// READs land in (on iWARP, also of the data pool each is copied into).
    pub(crate) fn max_read_chunk(&self) -> u32 {
        let sinks = self.read_sinks.as_ref().unwrap_or(&self.pool);
        let longest = sinks.max_buffer_size().min(self.pool.max_buffer_size());
        u32::try_from(longest).unwrap_or(u32::MAX)
    }

    /// A receive was consumed: it is replaced later, on an idle poll, unless `srq_slack`
    /// are owed now. The SRQ holds that many beyond every credit granted, so the receives
    /// owed never leave a credit without a receive behind it.
    #[inline]
    pub(crate) fn owe_receive(&self) {
        if self.srq_deficit.fetch_add(1, Ordering::Relaxed) + 1 >= self.srq_slack {
            self.repay_receives();
        }
    }

    /// Receives to post at the start: every connection's window and the slack.
    pub(crate) fn receives(&self) -> u32 {
        self.srq_depth + self.srq_slack
    }

    /// Posts `n` receive buffers of the frame size on the SRQ; what the pool cannot give is
    /// owed (retried on every progress call).
    pub(crate) fn post_receives(&self, n: u32) -> Result<()> {
        let frame = self.frame_size;
        for i in 0..n {
            let kept = self.recycled.lock().pop();
            let buf = match kept.map_or_else(|| self.recv_pool.try_alloc(frame), Ok) {
                Ok(b) => b,
                Err(_) => {
                    self.srq_deficit.fetch_add(n - i, Ordering::Relaxed);
                    return Ok(());
                }
            };
            self.recv_ring.post(buf).map_err(|e| e.error)?;
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

    pub(crate) fn repay_receives(&self) {
        let owed = self.srq_deficit.swap(0, Ordering::Relaxed);
        if owed > 0 {
            let _ = self.post_receives(owed);
        }
    }
}
