//! The bootstrap exchange over TCP, before any UCX traffic:
//!
//! ```text
//! client -> node   "DTXNUCX2" | token length u32 | token
//! node -> client   "DTXNUCX2" | status u8 (0 ok, 1 bad token, 2 bad request)
//!                  if ok: region size u64 | region base u64 | worker address length u32 |
//!                         worker address | rkey length u32 | rkey |
//!                         file-backed u8 (1: a FLUSH asks the node to write back)
//!                                                                      (little-endian)
//! ```
//!
//! The token keeps the rkey (the right to read and write the region) from whoever merely
//! reaches the port; it travels in clear, so use it on trusted networks only.

use crate::FabricError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const MAGIC: &[u8; 8] = b"DTXNUCX2";
/// Bounds what a peer can make us allocate.
const MAX_FIELD: u32 = 1 << 20;
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What a memory node publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    pub size: u64,
    pub base: u64,
    pub worker: Vec<u8>,
    pub rkey: Vec<u8>,
    /// The region is a file (`dtxn memnode --path`): a FLUSH is followed by a write-back
    /// request the node serves with `msync`.
    pub file_backed: bool,
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_field(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let n = read_u32(r)?;
    if n > MAX_FIELD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("field of {n} bytes"),
        ));
    }
    let mut v = vec![0u8; n as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Compares without an early exit, so that the time taken does not tell how much matched.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves one client on `s`. Errors are the client's problem (or a dropped connection).
pub(crate) fn serve(mut s: TcpStream, token: &str, info: &NodeInfo) -> std::io::Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut magic = [0u8; 8];
    s.read_exact(&mut magic)?;
    let status = if &magic != MAGIC {
        2u8
    } else {
        match read_field(&mut s) {
            Ok(t) if same(&t, token.as_bytes()) => 0,
            Ok(_) => 1,
            Err(_) => 2,
        }
    };
    let mut out = Vec::with_capacity(64 + info.worker.len() + info.rkey.len());
    out.extend_from_slice(MAGIC);
    out.push(status);
    if status == 0 {
        out.extend_from_slice(&info.size.to_le_bytes());
        out.extend_from_slice(&info.base.to_le_bytes());
        out.extend_from_slice(&(info.worker.len() as u32).to_le_bytes());
        out.extend_from_slice(&info.worker);
        out.extend_from_slice(&(info.rkey.len() as u32).to_le_bytes());
        out.extend_from_slice(&info.rkey);
        out.push(u8::from(info.file_backed));
    }
    s.write_all(&out)?;
    s.flush()
}

/// Whether anything accepts a connection at `addr` (a memory node whose bootstrap failed
/// for another reason than being gone).
pub(crate) fn reachable(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_ok()
}

/// Asks the memory node at `addr` for its region, presenting `token`.
pub(crate) fn fetch(addr: SocketAddr, token: &str) -> Result<NodeInfo, FabricError> {
    fetch_within(addr, token, IO_TIMEOUT)
}

/// [`fetch`], waiting at most `timeout` for the connection and for each read and write
/// (a reconnect, which blocks its worker thread, uses a short one).
pub(crate) fn fetch_within(
    addr: SocketAddr,
    token: &str,
    timeout: Duration,
) -> Result<NodeInfo, FabricError> {
    let err = |e: std::io::Error| {
        FabricError::Setup(format!("memory node {addr}: bootstrap failed: {e}"))
    };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(err)?;
    s.set_read_timeout(Some(timeout)).map_err(err)?;
    s.set_write_timeout(Some(timeout)).map_err(err)?;
    s.set_nodelay(true).map_err(err)?;
    let mut hello = Vec::with_capacity(12 + token.len());
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&(token.len() as u32).to_le_bytes());
    hello.extend_from_slice(token.as_bytes());
    s.write_all(&hello).map_err(err)?;
    let mut magic = [0u8; 8];
    s.read_exact(&mut magic).map_err(err)?;
    if &magic != MAGIC {
        return Err(FabricError::Setup(format!(
            "{addr} is not a dtxn memory node (bad bootstrap magic)"
        )));
    }
    let mut status = [0u8; 1];
    s.read_exact(&mut status).map_err(err)?;
    match status[0] {
        0 => {}
        1 => {
            return Err(FabricError::Setup(format!(
                "memory node {addr} refused the token"
            )))
        }
        other => {
            return Err(FabricError::Setup(format!(
                "memory node {addr} refused the bootstrap request (status {other})"
            )))
        }
    }
    let size = read_u64(&mut s).map_err(err)?;
    let base = read_u64(&mut s).map_err(err)?;
    let worker = read_field(&mut s).map_err(err)?;
    let rkey = read_field(&mut s).map_err(err)?;
    let mut file_backed = [0u8; 1];
    s.read_exact(&mut file_backed).map_err(err)?;
    Ok(NodeInfo {
        size,
        base,
        worker,
        rkey,
        file_backed: file_backed[0] == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn token_gates_the_rkey() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let info = NodeInfo {
            size: 4096,
            base: 0x1000,
            worker: vec![1, 2, 3],
            rkey: vec![9; 20],
            file_backed: true,
        };
        let srv = {
            let info = info.clone();
            std::thread::spawn(move || {
                for _ in 0..2 {
                    let (s, _) = l.accept().unwrap();
                    let _ = serve(s, "secret", &info);
                }
            })
        };
        assert_eq!(fetch(addr, "secret").unwrap(), info);
        let e = fetch(addr, "wrong").unwrap_err();
        assert!(e.to_string().contains("refused the token"), "{e}");
        srv.join().unwrap();
    }
}
