//! Device and port attributes (`ibv_query_device`, `ibv_query_port`) and their enums.
use verbs_sys as sys;

/// Path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
    /// A value this crate does not know (as a device reported it; passed on as is).
    Unknown(u32),
}

impl Mtu {
    /// The MTU in bytes (0 for an unknown value).
    pub fn bytes(self) -> u32 {
        match self {
            Mtu::Unknown(_) => 0,
            m => 128 << u32::from(m),
        }
    }

    /// The MTU of exactly `bytes` bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        Self::try_from(bytes.checked_ilog2()?.checked_sub(7)?)
            .ok()
            .filter(|m| m.bytes() == bytes)
    }
}

impl From<Mtu> for u32 {
    fn from(m: Mtu) -> u32 {
        match m {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
            Mtu::Unknown(v) => v,
        }
    }
}

impl TryFrom<u32> for Mtu {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        Ok(match v {
            1 => Self::Mtu256,
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            other => return Err(other),
        })
    }
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No state change.
    Nop,
    /// Down.
    Down,
    /// Initializing.
    Init,
    /// Armed.
    Armed,
    /// Active: ready for traffic.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// A state this crate does not know.
    Unknown(u32),
}

impl TryFrom<u32> for PortState {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        use sys::ibv_port_state as s;
        Ok(match v {
            s::IBV_PORT_NOP => Self::Nop,
            s::IBV_PORT_DOWN => Self::Down,
            s::IBV_PORT_INIT => Self::Init,
            s::IBV_PORT_ARMED => Self::Armed,
            s::IBV_PORT_ACTIVE => Self::Active,
            s::IBV_PORT_ACTIVE_DEFER => Self::ActiveDefer,
            other => return Err(other),
        })
    }
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Unspecified (treated as InfiniBand).
    Unspecified,
    /// InfiniBand: addressed by LID.
    InfiniBand,
    /// Ethernet (RoCE, rxe): addressed by GID, LID is 0.
    Ethernet,
    /// A link layer this crate does not know.
    Unknown(u8),
}

impl TryFrom<u8> for LinkLayer {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        // IBV_LINK_LAYER_{UNSPECIFIED,INFINIBAND,ETHERNET}: an anonymous enum in verbs.h.
        Ok(match v {
            0 => Self::Unspecified,
            1 => Self::InfiniBand,
            2 => Self::Ethernet,
            _ => return Err(v),
        })
    }
}

/// Atomic operation support (`enum ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic among this device's QPs only (rxe).
    Hca,
    /// Atomic also against CPU and other devices.
    Glob,
}

impl TryFrom<u32> for AtomicCap {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        use sys::ibv_atomic_cap as a;
        Ok(match v {
            a::IBV_ATOMIC_NONE => Self::None,
            a::IBV_ATOMIC_HCA => Self::Hca,
            a::IBV_ATOMIC_GLOB => Self::Glob,
            other => return Err(other),
        })
    }
}

/// Device capabilities and limits (`struct ibv_device_attr`). Query them rather than assume.
#[derive(Clone, Copy)]
pub struct DeviceAttr(pub(crate) sys::ibv_device_attr);

impl DeviceAttr {
    /// Firmware version string.
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self
            .0
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// Node GUID, host byte order.
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.0.node_guid)
    }
    /// Largest memory region, bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.0.max_mr_size
    }
    /// Most QPs.
    pub fn max_qp(&self) -> u32 {
        self.0.max_qp as u32
    }
    /// Deepest work queue.
    pub fn max_qp_wr(&self) -> u32 {
        self.0.max_qp_wr as u32
    }
    /// Most scatter/gather entries an RDMA READ may write (1 on iWARP devices such as siw).
    pub fn max_sge_rd(&self) -> u32 {
        self.0.max_sge_rd.max(0) as u32
    }
    /// Most scatter/gather entries per work request.
    pub fn max_sge(&self) -> u32 {
        self.0.max_sge as u32
    }
    /// Most CQ entries.
    pub fn max_cqe(&self) -> u32 {
        self.0.max_cqe as u32
    }
    /// Most outstanding RDMA READ/atomic requests a QP can target (responder side).
    pub fn max_qp_rd_atom(&self) -> u32 {
        self.0.max_qp_rd_atom as u32
    }
    /// Most outstanding RDMA READ/atomic requests a QP can initiate.
    pub fn max_qp_init_rd_atom(&self) -> u32 {
        self.0.max_qp_init_rd_atom as u32
    }
    /// Atomic operation support.
    pub fn atomic_cap(&self) -> AtomicCap {
        AtomicCap::try_from(self.0.atomic_cap).unwrap_or(AtomicCap::None)
    }
    /// Most SRQs (0: no SRQ support).
    pub fn max_srq(&self) -> u32 {
        self.0.max_srq as u32
    }
    /// Deepest SRQ.
    pub fn max_srq_wr(&self) -> u32 {
        self.0.max_srq_wr as u32
    }
    /// Most SGEs per SRQ receive.
    pub fn max_srq_sge(&self) -> u32 {
        self.0.max_srq_sge as u32
    }
    /// Number of physical ports (numbered from 1).
    pub fn phys_port_cnt(&self) -> u8 {
        self.0.phys_port_cnt
    }
    /// Most address handles.
    pub fn max_ah(&self) -> u32 {
        self.0.max_ah as u32
    }
    /// Capability flags (`device_cap_flags`, `enum ibv_device_cap_flags`).
    pub fn device_cap_flags(&self) -> u32 {
        self.0.device_cap_flags
    }
    /// Maximum number of memory windows (0: none).
    pub fn max_mw(&self) -> u32 {
        self.0.max_mw.max(0) as u32
    }
    /// Whether the device has memory windows (`IBV_DEVICE_MEM_WINDOW` and `max_mw` > 0).
    pub fn has_mw(&self) -> bool {
        self.device_cap_flags() & sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW.0 != 0
            && self.max_mw() > 0
    }
    /// Whether the device has type 2 memory windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2A` or
    /// `_2B`), bound by work requests.
    pub fn has_mw_type2(&self) -> bool {
        let t2 = sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A.0
            | sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0;
        self.has_mw() && self.device_cap_flags() & t2 != 0
    }
    /// The raw struct.
    pub fn as_raw(&self) -> &sys::ibv_device_attr {
        &self.0
    }
}

impl std::fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("node_guid", &format_args!("{:#018x}", self.node_guid()))
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_sge", &self.max_sge())
            .field("max_cqe", &self.max_cqe())
            .field("max_qp_rd_atom", &self.max_qp_rd_atom())
            .field("atomic_cap", &self.atomic_cap())
            .field("max_srq", &self.max_srq())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .finish_non_exhaustive()
    }
}

/// Extended device attributes (`struct ibv_device_attr_ex`): the basic ones plus capabilities
/// newer devices report (on-demand paging, completion timestamps, device memory).
#[derive(Clone, Copy)]
pub struct DeviceAttrEx(pub(crate) sys::ibv_device_attr_ex);

impl DeviceAttrEx {
    /// The basic attributes.
    pub fn orig(&self) -> DeviceAttr {
        DeviceAttr(self.0.orig_attr)
    }
    /// Extended capability flags (`device_cap_flags_ex`).
    pub fn device_cap_flags_ex(&self) -> u64 {
        self.0.device_cap_flags_ex
    }
    /// On-demand-paging general capabilities (0: no ODP).
    pub fn odp_general_caps(&self) -> u64 {
        self.0.odp_caps.general_caps
    }
    /// Valid bits of completion timestamps (0: no timestamps).
    pub fn completion_timestamp_mask(&self) -> u64 {
        self.0.completion_timestamp_mask
    }
    /// Device clock in kHz (for timestamps).
    pub fn hca_core_clock(&self) -> u64 {
        self.0.hca_core_clock
    }
    /// Largest device-memory allocation, bytes (0: none).
    pub fn max_dm_size(&self) -> u64 {
        self.0.max_dm_size
    }
    /// Number of ports, beyond the 255 of the basic struct.
    pub fn phys_port_cnt_ex(&self) -> u32 {
        self.0.phys_port_cnt_ex
    }
    /// The raw struct.
    pub fn as_raw(&self) -> &sys::ibv_device_attr_ex {
        &self.0
    }
}

impl std::fmt::Debug for DeviceAttrEx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAttrEx")
            .field("orig", &self.orig())
            .field(
                "device_cap_flags_ex",
                &format_args!("{:#x}", self.device_cap_flags_ex()),
            )
            .field("odp_general_caps", &self.odp_general_caps())
            .field(
                "completion_timestamp_mask",
                &self.completion_timestamp_mask(),
            )
            .field("max_dm_size", &self.max_dm_size())
            .finish_non_exhaustive()
    }
}

/// Port attributes (`struct ibv_port_attr`).
#[derive(Clone, Copy)]
pub struct PortAttr(pub(crate) sys::ibv_port_attr);

impl PortAttr {
    /// Logical state.
    pub fn state(&self) -> PortState {
        PortState::try_from(self.0.state).unwrap_or(PortState::Unknown(self.0.state))
    }
    /// Largest MTU the port supports.
    pub fn max_mtu(&self) -> Mtu {
        Mtu::try_from(self.0.max_mtu).unwrap_or(Mtu::Unknown(self.0.max_mtu))
    }
    /// MTU in use (1024 on a 1500-byte Ethernet netdev): the path MTU to give
    /// [`Qp::to_rtr`](crate::Qp::to_rtr) for a peer with the same.
    pub fn active_mtu(&self) -> Mtu {
        Mtu::try_from(self.0.active_mtu).unwrap_or(Mtu::Unknown(self.0.active_mtu))
    }
    /// Length of the GID table.
    pub fn gid_tbl_len(&self) -> u32 {
        self.0.gid_tbl_len as u32
    }
    /// Base LID (0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.0.lid
    }
    /// Link layer.
    pub fn link_layer(&self) -> LinkLayer {
        LinkLayer::try_from(self.0.link_layer).unwrap_or(LinkLayer::Unknown(self.0.link_layer))
    }
    /// Largest message, bytes.
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }
    /// The raw struct.
    pub fn as_raw(&self) -> &sys::ibv_port_attr {
        &self.0
    }
}

impl std::fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("active_mtu", &self.active_mtu())
            .field("max_mtu", &self.max_mtu())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .field("lid", &self.lid())
            .field("link_layer", &self.link_layer())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_round_trip() {
        for m in [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ] {
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
            assert_eq!(Mtu::try_from(u32::from(m)), Ok(m));
        }
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::from_bytes(1000), None);
        assert_eq!(Mtu::from_bytes(0), None);
        assert_eq!(Mtu::from_bytes(8192), None);
        assert_eq!(Mtu::try_from(0), Err(0));
        assert_eq!(Mtu::try_from(6), Err(6));
        assert_eq!(
            (u32::from(Mtu::Unknown(9)), Mtu::Unknown(9).bytes()),
            (9, 0)
        );
    }

    #[test]
    fn enum_conversions_reject_unknown_values() {
        assert_eq!(PortState::try_from(4), Ok(PortState::Active));
        assert_eq!(PortState::try_from(99), Err(99));
        assert_eq!(AtomicCap::try_from(1), Ok(AtomicCap::Hca));
        assert_eq!(AtomicCap::try_from(3), Err(3));
        assert_eq!(LinkLayer::try_from(2), Ok(LinkLayer::Ethernet));
        assert_eq!(LinkLayer::try_from(7), Err(7));
    }
}
