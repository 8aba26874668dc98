//! The readiness endpoint: `GET /ready` is 200 while the handler is loaded
//! and its shim alive, 503 otherwise (kubelet's probe; a tiny HTTP/1.1
//! answer per connection, nothing else is served).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves readiness on `listener` until the process ends.
pub async fn serve(listener: TcpListener, ready: Arc<AtomicBool>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            // The request line is enough; a probe sends a few hundred bytes.
            let mut buf = [0u8; 1024];
            let read = tokio::time::timeout(std::time::Duration::from_secs(2), stream.read(&mut buf)).await;
            let Ok(Ok(n)) = read else { return };
            let asks_ready = buf[..n].starts_with(b"GET /ready ");
            let answer: &[u8] = match (asks_ready, ready.load(Ordering::SeqCst)) {
                (true, true) => b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nready\n",
                (true, false) => {
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 10\r\nconnection: close\r\n\r\nnot ready\n"
                }
                (false, _) => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            };
            let _ = stream.write_all(answer).await;
        });
    }
}
