//! The shim wire format (runtimes/PROTOCOL.md): length-prefixed frames on the
//! shim's stdin and stdout.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Frame types, one ASCII letter each.
pub mod kind {
    pub const HELLO: u8 = b'H';
    pub const LOAD: u8 = b'L';
    pub const READY: u8 = b'R';
    pub const INVOKE: u8 = b'I';
    pub const OUTPUT: u8 = b'O';
    pub const LOG: u8 = b'G';
    /// `sless instance` -> gateway only (over TCP): an invocation ended without
    /// an answer (`{"error": "timeout" | "crashed", "reason": ...}`).
    pub const ERROR: u8 = b'E';
    /// Server -> a shim that serves connections itself: exit once no call
    /// has been in flight for `{"quiet_ms": N}`.
    pub const DRAIN: u8 = b'D';
    /// A shim that serves connections itself -> server, every second: the
    /// shim is not held (a handler in C code holding Python's lock, a Node
    /// loop that never yields cannot send it).
    pub const KEEPALIVE: u8 = b'K';
}

/// Largest frame accepted from a shim unless [`set_max_frame`] says otherwise.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// Room for an OUTPUT frame's head (status and headers) beside the body.
pub const HEAD_ROOM: usize = 1024 * 1024;

static FRAME_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(MAX_FRAME);

/// Sets the largest frame read from a shim, once at start: the response
/// limit the shims are told, plus [`HEAD_ROOM`]. A larger frame is refused
/// before it is read (the instance is then stopped): a handler that writes
/// to the frame channel itself cannot make the server buffer more.
pub fn set_max_frame(max_response_bytes: usize) {
    let limit = max_response_bytes.saturating_add(HEAD_ROOM).min(MAX_FRAME);
    FRAME_LIMIT.store(limit, std::sync::atomic::Ordering::Relaxed);
}

fn max_frame() -> usize {
    FRAME_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

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
    read_limited(reader, max_frame()).await
}

/// Reads one frame of at most `max` bytes; a larger one is an error before
/// any of it is buffered.
pub async fn read_limited<R: AsyncRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if !(5..=max).contains(&len) {
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

/// Frames written at once at most.
const WRITE_BATCH: usize = 64;

/// Owns one end of a frame stream (a shim's stdin, a TCP connection) and
/// writes the queued frames, all that are waiting in one write, so a busy
/// peer gets many frames per wake-up and per system call. A frame is
/// always written whole: callers that give up do not cut one short. Ends
/// when every sender is gone or a write fails.
pub async fn write_queued<W: AsyncWrite + Unpin>(mut out: W, mut frames: mpsc::UnboundedReceiver<Bytes>) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let mut buf = Vec::new();
    while frames.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let result = if batch.len() == 1 {
            out.write_all(&batch[0]).await
        } else {
            buf.clear();
            for frame in &batch {
                buf.extend_from_slice(frame);
            }
            out.write_all(&buf).await
        };
        batch.clear();
        if let Err(e) = result {
            tracing::debug!(error = %e, "writing frames failed");
            return;
        }
    }
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

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_before_it_is_read() {
        let frame = encode(kind::OUTPUT, 1, &[7; 100]);
        assert!(read_limited(&mut &frame[..], 105).await.unwrap().is_some());
        let refused = read_limited(&mut &frame[..], 104).await.unwrap_err();
        assert!(refused.to_string().contains("105 bytes"), "{refused}");
        // Only the length was read: a claimed 4 GiB frame costs nothing.
        let mut huge: &[u8] = &[0xff, 0xff, 0xff, 0xff, b'O'];
        assert!(read_limited(&mut huge, MAX_FRAME).await.is_err());
        assert_eq!(huge, b"O");
    }
}
