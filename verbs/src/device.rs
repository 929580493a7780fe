//! Listing RDMA devices (`ibv_get_device_list`): name, GUID and node type of each.
use std::ffi::CStr;
use std::ptr::NonNull;

use verbs_sys as sys;

use crate::{Error, Result};

/// What kind of node a device is (`enum ibv_node_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeType {
    /// An InfiniBand or RoCE channel adapter (`IBV_NODE_CA`); rxe is one.
    Ca,
    /// A switch.
    Switch,
    /// A router.
    Router,
    /// An iWARP NIC.
    Rnic,
    /// A usNIC UDP device.
    UsnicUdp,
    /// Not a recognised type (`IBV_NODE_UNKNOWN` = -1).
    Unknown,
}

impl TryFrom<i32> for NodeType {
    type Error = i32;
    fn try_from(v: i32) -> std::result::Result<Self, i32> {
        use sys::ibv_node_type as t;
        Ok(match v {
            t::IBV_NODE_CA => Self::Ca,
            t::IBV_NODE_SWITCH => Self::Switch,
            t::IBV_NODE_ROUTER => Self::Router,
            t::IBV_NODE_RNIC => Self::Rnic,
            t::IBV_NODE_USNIC_UDP => Self::UsnicUdp,
            t::IBV_NODE_UNKNOWN => Self::Unknown,
            other => return Err(other),
        })
    }
}

/// The transport a device speaks (`enum ibv_transport_type`): what it can do and which rules
/// its queue pairs follow. RoCE devices (rxe among them) speak InfiniBand's transport over
/// Ethernet ([`Transport::Ib`], link layer Ethernet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// InfiniBand, or RoCE (`IBV_TRANSPORT_IB`).
    Ib,
    /// iWARP (`IBV_TRANSPORT_IWARP`): RC only, connected through the RDMA CM (no manual
    /// connect); its queue pairs take no P_Key, address vector or PSNs.
    Iwarp,
    /// Cisco usNIC (`IBV_TRANSPORT_USNIC`).
    Usnic,
    /// Cisco usNIC over UDP (`IBV_TRANSPORT_USNIC_UDP`).
    UsnicUdp,
    /// Not a recognised transport (`IBV_TRANSPORT_UNKNOWN`, `IBV_TRANSPORT_UNSPECIFIED`).
    Unknown,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Ib => "InfiniBand/RoCE",
            Transport::Iwarp => "iWARP",
            Transport::Usnic => "usNIC",
            Transport::UsnicUdp => "usNIC UDP",
            Transport::Unknown => "unknown transport",
        })
    }
}

impl From<i32> for Transport {
    fn from(v: i32) -> Self {
        use sys::ibv_transport_type as t;
        match v {
            t::IBV_TRANSPORT_IB => Self::Ib,
            t::IBV_TRANSPORT_IWARP => Self::Iwarp,
            t::IBV_TRANSPORT_USNIC => Self::Usnic,
            t::IBV_TRANSPORT_USNIC_UDP => Self::UsnicUdp,
            _ => Self::Unknown,
        }
    }
}

/// One entry of the device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name, e.g. `rxe0`.
    pub name: String,
    /// Node GUID, in host byte order.
    pub guid: u64,
    /// Node type.
    pub node_type: NodeType,
}

/// The list from `ibv_get_device_list`, freed on drop.
pub(crate) struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    #[doc(alias = "ibv_get_device_list")]
    pub(crate) fn get() -> Result<Self> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the returned list is owned by us until freed.
        let ptr = unsafe { sys::ibv_get_device_list(&mut n) };
        match sys::errno::check_ptr(ptr) {
            Ok(list) => Ok(Self {
                list,
                len: usize::try_from(n).unwrap_or(0),
            }),
            Err(e) => Err(match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::ENODEV) => Error::NoRdmaSupport { source: e },
                _ => Error::ListDevices(e),
            }),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = NonNull<sys::ibv_device>> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: the list has `len` valid entries (plus a terminating NULL).
            NonNull::new(unsafe { *self.list.as_ptr().add(i) })
        })
    }

    pub(crate) fn name_of(dev: NonNull<sys::ibv_device>) -> String {
        // SAFETY: `dev` comes from a live device list; the name is a NUL-terminated string
        // inside the device struct.
        let p = unsafe { sys::ibv_get_device_name(dev.as_ptr()) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated, lives as long as the list.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub(crate) fn info(dev: NonNull<sys::ibv_device>) -> DeviceInfo {
        // SAFETY: `dev` comes from a live device list.
        let guid = u64::from_be(unsafe { sys::ibv_get_device_guid(dev.as_ptr()) });
        // SAFETY: as above; node_type is a plain field.
        let node_type = unsafe { (*dev.as_ptr()).node_type };
        DeviceInfo {
            name: Self::name_of(dev),
            guid,
            node_type: NodeType::try_from(node_type).unwrap_or(NodeType::Unknown),
        }
    }

    pub(crate) fn find(&self, name: &str) -> Result<NonNull<sys::ibv_device>> {
        self.iter()
            .find(|d| Self::name_of(*d) == name)
            .ok_or_else(|| Error::NoSuchDevice {
                name: name.to_owned(),
                found: self
                    .iter()
                    .map(Self::name_of)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// Lists the RDMA devices of this host.
///
/// A kernel without RDMA support gives [`Error::NoRdmaSupport`]; a host with RDMA support but no
/// device gives an empty list.
#[doc(alias = "ibv_get_device_list")]
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    Ok(list.iter().map(DeviceList::info).collect())
}
