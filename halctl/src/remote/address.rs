//! Addresses of `halctl remote`: parsing them, and the node an importer
//! connects from.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use hal::remote::{Node, RemoteHandle};

use crate::fail::{CmdResult, Context, Fail};

/// An address given as `IP` or `IP:PORT` (port 0, the default, takes a
/// free one).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0));
    }
    Err(format!(
        "`{s}` is not an address (examples: 192.0.2.1, 192.0.2.1:7000, [2001:db8::1]:0)"
    ))
}

/// The address of this host that packets to `peer` leave from (the
/// routing table's choice, asked of a UDP socket: nothing is sent).
fn source_for(peer: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match peer {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        SocketAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let sock = UdpSocket::bind(any).ok()?;
    sock.connect(peer).ok()?;
    sock.local_addr().ok().map(|a| a.ip())
}

/// Decode `text` and make the node that connects to it: listening on the
/// address this host reaches the exporter from.
pub fn importer_node(text: &str) -> CmdResult<(RemoteHandle, Node)> {
    let handle = RemoteHandle::from_text(text.trim())
        .map_err(|e| Fail::hal("decoding the remote handle", hal::Error::InvalidHandle(e)))?;
    let peer = handle.listener;
    let ip = source_for(peer).ok_or_else(|| {
        Fail::failed(format!(
            "no route from this host to the exporter at {peer} (check the address the \
             exporter advertises, and this host's network)"
        ))
    })?;
    let node = Node::bind(SocketAddr::new(ip, 0)).ctx("starting a UCX node")?;
    Ok((handle, node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("192.0.2.1"), Ok("192.0.2.1:0".parse().unwrap()));
        assert_eq!(
            parse_addr("192.0.2.1:7000"),
            Ok("192.0.2.1:7000".parse().unwrap())
        );
        assert_eq!(parse_addr("::1"), Ok("[::1]:0".parse().unwrap()));
        assert!(parse_addr("host.example").is_err());
        assert!(parse_addr("192.0.2.1:99999").is_err());
    }

    #[test]
    fn the_source_of_loopback_is_loopback() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(source_for(peer), Some("127.0.0.1".parse().unwrap()));
    }
}
