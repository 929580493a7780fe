//! What a device can do ([`Capabilities`], [`Capability`]), decided from what it reports (its
//! transport and its attributes), and the typed error for asking it for what it lacks.
use crate::context::{AtomicCap, Context, DeviceAttr};
use crate::{Error, Result, Transport};

/// A feature some devices lack, as [`Capabilities::has`] and [`Context::require`] name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Unreliable datagram queue pairs ([`QpType::Ud`](crate::QpType::Ud)): InfiniBand and
    /// RoCE, not iWARP.
    UnreliableDatagram,
    /// Unreliable connected queue pairs ([`QpType::Uc`](crate::QpType::Uc)): InfiniBand and
    /// RoCE, not iWARP.
    UnreliableConnected,
    /// Atomic compare-and-swap and fetch-and-add (`atomic_cap` other than none).
    Atomics,
    /// Memory windows (`IBV_DEVICE_MEM_WINDOW` and `max_mw` > 0).
    MemoryWindows,
    /// Immediate data: SEND and RDMA WRITE with immediate (InfiniBand and RoCE; iWARP's RDMAP
    /// has none).
    ImmediateData,
    /// Connecting a queue pair by hand (Init -> RTR -> RTS with the peer's QP number and
    /// address, as `ibv_rc_pingpong` does): InfiniBand and RoCE. An iWARP queue pair is
    /// connected only through the RDMA CM (`cm`), which runs the MPA handshake over TCP.
    ManualConnect,
    /// Memory regions over a dma-buf ([`Pd::reg_dmabuf_mr`](crate::Pd::reg_dmabuf_mr),
    /// `ibv_reg_dmabuf_mr`): the provider, the kernel (5.12 or later) and the device's driver
    /// must all import dma-bufs. No attribute reports it, so [`Capabilities::has`] cannot tell
    /// and answers true; the device tells by refusing the registration, which then gives
    /// [`Error::MissingCapability`] with this capability.
    DmabufMr,
}

impl Capability {
    /// Every capability, for listings.
    pub const ALL: [Capability; 7] = [
        Capability::UnreliableDatagram,
        Capability::UnreliableConnected,
        Capability::Atomics,
        Capability::MemoryWindows,
        Capability::ImmediateData,
        Capability::ManualConnect,
        Capability::DmabufMr,
    ];

    /// What to do instead, for an error message.
    fn instead(self) -> &'static str {
        match self {
            Capability::UnreliableDatagram | Capability::UnreliableConnected => {
                "use reliable connected (RC) queue pairs, or an InfiniBand or RoCE device"
            }
            Capability::Atomics => {
                "update the value with RDMA READ and WRITE under a lock of your own, or use a device whose atomic_cap is not none"
            }
            Capability::MemoryWindows => {
                "register a memory region per remote access instead, or use a device with memory windows"
            }
            Capability::ImmediateData => {
                "carry the value in the message itself (a SEND's payload, or a SEND after the WRITE)"
            }
            Capability::ManualConnect => "connect the queue pair through the RDMA CM (the cm crate)",
            Capability::DmabufMr => crate::mr::DMABUF_INSTEAD,
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capability::UnreliableDatagram => "unreliable datagram (UD) queue pairs",
            Capability::UnreliableConnected => "unreliable connected (UC) queue pairs",
            Capability::Atomics => "atomic operations",
            Capability::MemoryWindows => "memory windows",
            Capability::ImmediateData => "immediate data",
            Capability::ManualConnect => "manually connected queue pairs",
            Capability::DmabufMr => "dma-buf memory regions (ibv_reg_dmabuf_mr)",
        })
    }
}

/// What a device can do, from its transport and attributes: [`Context::capabilities`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    transport: Transport,
    atomic_cap: AtomicCap,
    memory_windows: bool,
    /// RDMA READs and atomics a QP of the device may have outstanding, as
    /// [`to_rtr`](crate::Qp::to_rtr) and [`to_rts`](crate::Qp::to_rts) use (1..=16).
    pub(crate) max_rd_atomic: u8,
    /// Most scatter/gather entries an RDMA READ may write (0: not reported).
    pub(crate) max_sge_rd: u32,
}

impl Capabilities {
    /// Decided from a device's transport and attributes.
    pub fn from_attr(transport: Transport, attr: &DeviceAttr) -> Capabilities {
        Capabilities {
            transport,
            atomic_cap: attr.atomic_cap(),
            memory_windows: attr.has_mw(),
            max_rd_atomic: attr
                .max_qp_rd_atom()
                .min(attr.max_qp_init_rd_atom())
                .clamp(1, 16) as u8,
            max_sge_rd: attr.max_sge_rd(),
        }
    }

    /// What a device of `transport` is assumed to have when its attributes cannot be read:
    /// whatever the transport allows, so that only the device itself refuses.
    pub(crate) fn assumed(transport: Transport) -> Capabilities {
        Capabilities {
            transport,
            atomic_cap: AtomicCap::Hca,
            memory_windows: true,
            max_rd_atomic: 1,
            max_sge_rd: 0,
        }
    }

    /// The device's transport.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// How atomic the device's atomic operations are.
    pub fn atomic_cap(&self) -> AtomicCap {
        self.atomic_cap
    }

    /// Whether the device has `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        let ib = self.transport != Transport::Iwarp;
        match capability {
            Capability::UnreliableDatagram
            | Capability::UnreliableConnected
            | Capability::ImmediateData
            | Capability::ManualConnect => ib,
            Capability::Atomics => self.atomic_cap != AtomicCap::None,
            Capability::MemoryWindows => self.memory_windows,
            // Known only by trying: see the variant.
            Capability::DmabufMr => true,
        }
    }

    /// `Ok` if the device (called `device` in the error) has `capability`, else
    /// [`Error::MissingCapability`].
    pub fn require(&self, device: &str, capability: Capability) -> Result<()> {
        if self.has(capability) {
            return Ok(());
        }
        Err(Error::MissingCapability {
            device: device.to_owned(),
            transport: self.transport,
            capability,
            instead: capability.instead(),
        })
    }

    /// The capabilities the device lacks, in [`Capability::ALL`]'s order.
    pub fn missing(&self) -> impl Iterator<Item = Capability> + '_ {
        Capability::ALL.into_iter().filter(|c| !self.has(*c))
    }
}

impl Context {
    /// What the device can do, decided from its transport and attributes (queried once per
    /// context, then kept).
    pub fn capabilities(&self) -> Result<Capabilities> {
        if let Some(c) = self.inner.capabilities.get() {
            return Ok(*c);
        }
        let caps = Capabilities::from_attr(self.transport(), &self.query_device()?);
        Ok(*self.inner.capabilities.get_or_init(|| caps))
    }

    /// `Ok` if the device has `capability`, else [`Error::MissingCapability`] naming the device,
    /// its transport and what to do instead.
    pub fn require(&self, capability: Capability) -> Result<()> {
        self.capabilities()?.require(self.name(), capability)
    }

    /// The capabilities, or if the device cannot be queried, what its transport allows.
    pub(crate) fn capabilities_or_assumed(&self) -> Capabilities {
        self.capabilities()
            .unwrap_or_else(|_| Capabilities::assumed(self.transport()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(transport: Transport, atomic_cap: AtomicCap, memory_windows: bool) -> Capabilities {
        Capabilities {
            transport,
            atomic_cap,
            memory_windows,
            max_rd_atomic: 1,
            max_sge_rd: 0,
        }
    }

    #[test]
    fn iwarp_lacks_what_its_transport_has_not() {
        let siw = caps(Transport::Iwarp, AtomicCap::None, false);
        assert_eq!(
            siw.missing().collect::<Vec<_>>(),
            Capability::ALL[..Capability::ALL.len() - 1],
            "all but dma-buf regions, which only the device can tell"
        );
        let rxe = caps(Transport::Ib, AtomicCap::Hca, true);
        assert_eq!(rxe.missing().count(), 0);
        // Atomics and windows follow the attributes, not the transport.
        let bare_ib = caps(Transport::Ib, AtomicCap::None, false);
        assert_eq!(
            bare_ib.missing().collect::<Vec<_>>(),
            [Capability::Atomics, Capability::MemoryWindows]
        );
        let rich_iwarp = caps(Transport::Iwarp, AtomicCap::Glob, true);
        assert!(rich_iwarp.has(Capability::Atomics) && rich_iwarp.has(Capability::MemoryWindows));
        assert!(!rich_iwarp.has(Capability::ImmediateData));
    }

    #[test]
    fn the_error_names_device_transport_and_what_to_do() {
        let siw = caps(Transport::Iwarp, AtomicCap::None, false);
        assert!(siw.require("siw0", Capability::ImmediateData).is_err());
        let e = siw.require("siw0", Capability::Atomics).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("siw0") && msg.contains("iWARP") && msg.contains("atomic operations"),
            "{msg}"
        );
        assert!(msg.contains("READ and WRITE"), "{msg}");
        assert_eq!(e.missing_capability(), Some(Capability::Atomics));
    }
}
