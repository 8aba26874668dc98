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

/// Bytes before a headed frame's head: length, kind, id, head length.
const HEADED_PREFIX: usize = 4 + 1 + 4 + 4;

/// Encodes a frame whose payload is `head` as JSON and `body` behind its
/// length, serialized in place into one buffer. The id is left zero for
/// [`set_id`] to fill in when the frame is sent.
pub fn encode_with_head(kind: u8, head: &impl serde::Serialize, body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::with_capacity(HEADED_PREFIX + 512 + body.len());
    buf.put_bytes(0, HEADED_PREFIX);
    serde_json::to_writer((&mut buf).writer(), head).expect("JSON of plain values");
    let head_len = buf.len() - HEADED_PREFIX;
    buf.put_slice(body);
    let len = buf.len() - 4;
    buf[0..4].copy_from_slice(&(len as u32).to_be_bytes());
    buf[4] = kind;
    buf[9..13].copy_from_slice(&(head_len as u32).to_be_bytes());
    buf
}

/// Sets the id of a frame made by [`encode_with_head`].
pub fn set_id(frame: &mut BytesMut, id: u32) {
    frame[5..9].copy_from_slice(&id.to_be_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_headed_frame_reads_back_with_its_id_head_and_body() {
        let head = serde_json::json!({"request_id": "r1", "headers": {"a": "b"}});
        let mut frame = encode_with_head(kind::INVOKE, &head, b"the body");
        set_id(&mut frame, 7);
        let mut wire: &[u8] = &frame;
        let read = read(&mut wire).await.unwrap().unwrap();
        assert!(wire.is_empty(), "the length prefix covers the frame exactly");
        assert_eq!((read.kind, read.id), (kind::INVOKE, 7));
        let (h, body) = split_head(read.payload).unwrap();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&h).unwrap(), head);
        assert_eq!(&body[..], b"the body");
    }
}
