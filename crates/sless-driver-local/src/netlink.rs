//! The few rtnetlink requests that join an instance's network namespace to
//! its tenant's hub (a veth pair, addresses, routes, links up), written as
//! bytes on a netlink socket: no `ip` process per instance. A socket acts
//! in the network namespace it was opened in.
//!
//! Also [`new_netns`]: a network namespace made by `unshare` on a thread of
//! its own and bound at a path, as `ip netns add` does, with a socket in it
//! ([`NetnsMaker`]: one such thread making many).

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const IFF_UP: u32 = 0x1;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const RTNH_F_ONLINK: u32 = 0x4;

/// The interface index of loopback in every network namespace.
pub const LOOPBACK: i32 = 1;

/// A route netlink socket in one network namespace.
pub struct Rtnl {
    fd: OwnedFd,
}

impl Rtnl {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> std::io::Result<Rtnl> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None, // NETLINK_ROUTE
        )?;
        Ok(Rtnl { fd })
    }

    /// Sets the link at `index` up.
    pub fn link_up(&self, index: i32) -> std::io::Result<()> {
        let mut msg = Message::new(RTM_NEWLINK, 0);
        msg.ifinfo(index, IFF_UP, IFF_UP);
        self.request(msg)
    }

    /// A veth pair: `name` at `index` here, `peer` at `peer_index` in the
    /// namespace `peer_netns`. Both start down.
    pub fn add_veth(
        &self,
        name: &str,
        index: i32,
        peer: &str,
        peer_index: i32,
        peer_netns: BorrowedFd<'_>,
    ) -> std::io::Result<()> {
        let mut msg = Message::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        msg.ifinfo(index, 0, 0);
        msg.attr_str(IFLA_IFNAME, name);
        let info = msg.begin(IFLA_LINKINFO);
        msg.attr_str(IFLA_INFO_KIND, "veth");
        let data = msg.begin(IFLA_INFO_DATA);
        let peer_info = msg.begin(VETH_INFO_PEER);
        msg.ifinfo(peer_index, 0, 0);
        msg.attr_str(IFLA_IFNAME, peer);
        msg.attr(
            IFLA_NET_NS_FD,
            &rustix::fd::AsRawFd::as_raw_fd(&peer_netns).to_ne_bytes(),
        );
        msg.end(peer_info);
        msg.end(data);
        msg.end(info);
        self.request(msg)
    }

    /// `address/prefix` on the link at `index`.
    pub fn add_address(&self, index: i32, address: Ipv4Addr, prefix: u8) -> std::io::Result<()> {
        let mut msg = Message::new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
        msg.bytes(&[AF_INET, prefix, 0, RT_SCOPE_UNIVERSE]);
        msg.bytes(&index.to_ne_bytes());
        msg.attr(IFA_LOCAL, &address.octets());
        msg.attr(IFA_ADDRESS, &address.octets());
        self.request(msg)
    }

    /// A route to `dest/prefix` out of the link at `index`: directly, or
    /// through `gateway`, which is taken to be on that link (onlink).
    pub fn add_route(&self, dest: Ipv4Addr, prefix: u8, gateway: Option<Ipv4Addr>, index: i32) -> std::io::Result<()> {
        let mut msg = Message::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
        let (scope, flags) = match gateway {
            Some(_) => (RT_SCOPE_UNIVERSE, RTNH_F_ONLINK),
            None => (RT_SCOPE_LINK, 0),
        };
        msg.bytes(&[AF_INET, prefix, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, scope, RTN_UNICAST]);
        msg.bytes(&flags.to_ne_bytes());
        if prefix > 0 {
            msg.attr(RTA_DST, &dest.octets());
        }
        if let Some(gateway) = gateway {
            msg.attr(RTA_GATEWAY, &gateway.octets());
        }
        msg.attr(RTA_OIF, &index.to_ne_bytes());
        self.request(msg)
    }

    /// Sends one request and reads the kernel's acknowledgement.
    fn request(&self, msg: Message) -> std::io::Result<()> {
        let bytes = msg.finish();
        rustix::net::sendto(&self.fd, &bytes, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
        let mut reply = [0u8; 1024];
        let (_, len) = rustix::net::recv(&self.fd, &mut reply, RecvFlags::empty())?;
        let reply = &reply[..len.min(reply.len())];
        let field = |at: usize, n: usize| {
            reply
                .get(at..at + n)
                .ok_or_else(|| std::io::Error::other("short netlink reply"))
        };
        let kind = u16::from_ne_bytes(field(4, 2)?.try_into().unwrap_or_default());
        if kind != NLMSG_ERROR {
            return Err(std::io::Error::other(format!("unexpected netlink reply type {kind}")));
        }
        match i32::from_ne_bytes(field(16, 4)?.try_into().unwrap_or_default()) {
            0 => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(-errno)),
        }
    }
}

/// One netlink request being written: header, fixed part, attributes.
struct Message {
    buf: Vec<u8>,
}

impl Message {
    fn new(kind: u16, flags: u16) -> Message {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        buf.extend_from_slice(&1u32.to_ne_bytes()); // sequence: one request at a time
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel assigns it
        Message { buf }
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A `struct ifinfomsg`.
    fn ifinfo(&mut self, index: i32, flags: u32, change: u32) {
        self.bytes(&[0, 0, 0, 0]); // family unspecified, padding, type
        self.bytes(&index.to_ne_bytes());
        self.bytes(&flags.to_ne_bytes());
        self.bytes(&change.to_ne_bytes());
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        let at = self.begin(kind);
        self.bytes(value);
        self.end(at);
    }

    fn attr_str(&mut self, kind: u16, value: &str) {
        let at = self.begin(kind);
        self.bytes(value.as_bytes());
        self.bytes(&[0]);
        self.end(at);
    }

    /// Starts an attribute whose value follows (nested ones included).
    fn begin(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.bytes(&0u16.to_ne_bytes());
        self.bytes(&kind.to_ne_bytes());
        at
    }

    /// Sets the length of the attribute begun at `at` and pads to 4 bytes.
    fn end(&mut self, at: usize) {
        let len = u16::try_from(self.buf.len() - at).unwrap_or(u16::MAX);
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self.buf.resize(self.buf.len().next_multiple_of(4), 0);
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// A new network namespace bound at `path` (a new file) with its loopback
/// up, and a route socket in it. `inside` runs in the namespace first
/// (e.g. to set its sysctls). Made on a thread of its own: the caller's
/// thread stays where it is.
pub fn new_netns(path: &Path, inside: fn() -> std::io::Result<()>) -> std::io::Result<Rtnl> {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("sless-netns".into())
        .stack_size(64 << 10)
        .spawn(move || make_netns_here(&path, inside))?
        .join()
        .map_err(|_| std::io::Error::other("the thread making a network namespace panicked"))?
}

/// [`new_netns`] on the calling thread, which is left in the new namespace
/// (see [`NetnsMaker`] for a thread that makes one after another).
fn make_netns_here(path: &Path, inside: fn() -> std::io::Result<()>) -> std::io::Result<Rtnl> {
    #[allow(deprecated)] // a new network namespace touches no file table
    rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNET)?;
    inside()?;
    let rtnl = Rtnl::open()?;
    rtnl.link_up(LOOPBACK)?;
    // The file may be one a namespace that is gone was bound on.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if let Err(e) = rustix::mount::mount_bind("/proc/thread-self/ns/net", path) {
        let _ = std::fs::remove_file(path);
        return Err(e.into());
    }
    Ok(rtnl)
}

/// Makes namespaces as [`new_netns`] does, one after another on the thread
/// it was made on (no thread per namespace), returning that thread to the
/// namespace it started in after each: it holds none of those it made.
pub struct NetnsMaker {
    home: OwnedFd,
}

impl NetnsMaker {
    /// On the thread that will make the namespaces.
    pub fn here() -> std::io::Result<NetnsMaker> {
        Ok(NetnsMaker {
            home: std::fs::File::open("/proc/thread-self/ns/net")?.into(),
        })
    }

    pub fn make(&self, path: &Path, inside: fn() -> std::io::Result<()>) -> std::io::Result<Rtnl> {
        let made = make_netns_here(path, inside);
        rustix::thread::move_into_link_name_space(self.home.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))?;
        made
    }
}

/// The namespace bound at `path`, as a descriptor.
pub fn open_netns(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open(path)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_nested_lengths_cover_their_children() {
        let mut msg = Message::new(RTM_NEWLINK, 0);
        msg.ifinfo(7, 0, 0);
        let outer = msg.begin(IFLA_LINKINFO);
        msg.attr_str(IFLA_INFO_KIND, "veth");
        msg.end(outer);
        let bytes = msg.finish();
        assert_eq!(bytes.len(), 16 + 16 + 4 + 12);
        assert_eq!(u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize, bytes.len());
        // The nested attribute: 4 of its own + "veth\0" in an attribute of 9, padded to 12.
        assert_eq!(u16::from_ne_bytes(bytes[32..34].try_into().unwrap()), 16);
        assert_eq!(u16::from_ne_bytes(bytes[36..38].try_into().unwrap()), 9);
        assert_eq!(&bytes[40..45], b"veth\0");
    }
}
