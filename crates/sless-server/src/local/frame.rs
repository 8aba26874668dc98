//! The shim wire format (runtimes/PROTOCOL.md): length-prefixed frames on the
//! shim's stdin and stdout.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frame types, one ASCII letter each.
pub mod kind {
    pub const HELLO: u8 = b'H';
    pub const LOAD: u8 = b'L';
    pub const READY: u8 = b'R';
    pub const INVOKE: u8 = b'I';
    pub const OUTPUT: u8 = b'O';
    pub const LOG: u8 = b'G';
}

/// Largest frame accepted from a shim (a response body over this is an error).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub id: u32,
    pub payload: Bytes,
}

/// Encodes a frame whose payload is `head` (JSON) and `body` behind a length.
pub fn encode_with_head(kind: u8, id: u32, head: &[u8], body: &[u8]) -> Bytes {
    let len = 1 + 4 + 4 + head.len() + body.len();
    let mut buf = BytesMut::with_capacity(4 + len);
    buf.put_u32(len as u32);
    buf.put_u8(kind);
    buf.put_u32(id);
    buf.put_u32(head.len() as u32);
    buf.put_slice(head);
    buf.put_slice(body);
    buf.freeze()
}

/// Encodes a frame with a plain payload.
pub fn encode(kind: u8, id: u32, payload: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(9 + payload.len());
    buf.put_u32((payload.len() + 5) as u32);
    buf.put_u8(kind);
    buf.put_u32(id);
    buf.put_slice(payload);
    buf.freeze()
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if !(5..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("shim sent a frame of {len} bytes (corrupt stream?)"),
        ));
    }
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let missing = len - buf.len();
        if reader.read_buf(&mut (&mut buf).limit(missing)).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    let mut buf = buf.freeze();
    let kind = buf.get_u8();
    let id = buf.get_u32();
    Ok(Some(Frame { kind, id, payload: buf }))
}

/// Splits a payload made by [`encode_with_head`] into head and body.
pub fn split_head(mut payload: Bytes) -> std::io::Result<(Bytes, Bytes)> {
    if payload.len() < 4 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame payload too short",
        ));
    }
    let head_len = payload.get_u32() as usize;
    if head_len > payload.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame head longer than payload",
        ));
    }
    let head = payload.split_to(head_len);
    Ok((head, payload))
}
