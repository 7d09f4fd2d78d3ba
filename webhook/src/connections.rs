//! Per-listener connection limits below TLS: a cap on open connections and an idle timeout.
//!
//! Hand-written because neither axum-server, hyper, hyper-util nor tower has them: tower's
//! concurrency limits count requests (a permit ends with the response), while a connection cap
//! must hold its permit from `accept` until the socket closes, TLS handshake included. The
//! [`LimitedAcceptor`] is axum-server's [`Accept`] under its rustls acceptor; each accepted
//! socket takes a permit of one semaphore per listener, or is **accepted and closed at once**
//! when none is left (an over-cap client gets a quick connection reset instead of waiting, in
//! the kernel backlog, past the API server's webhook timeout). The permit lives in the
//! [`Limited`] stream and is returned when hyper drops it.
//!
//! The same stream closes a connection on which nothing was read or written for the idle
//! timeout: an HTTP/2 connection without streams, or any connection hyper's own timers do not
//! cover. (For HTTP/1.1, hyper's header read timeout already closes a keep-alive connection
//! that does not start its next request in time.)

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Accepts while a connection permit is free; see the module documentation.
#[derive(Clone, Debug)]
pub struct LimitedAcceptor {
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl LimitedAcceptor {
    /// At most `max_connections` open at once (at least one), each closed after `idle_timeout`
    /// without traffic.
    pub fn new(max_connections: usize, idle_timeout: Duration) -> Self {
        LimitedAcceptor { permits: Arc::new(Semaphore::new(max_connections.max(1))), idle_timeout }
    }

    /// Connections that could still be accepted now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl<I, S> Accept<I, S> for LimitedAcceptor
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    type Stream = Limited<I>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Limited<I>, S)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok((Limited::new(stream, permit, self.idle_timeout), service)),
            // Dropping `stream` closes the socket.
            Err(_) => Err(io::Error::other("connection cap reached; connection closed")),
        };
        std::future::ready(accepted)
    }
}

/// An accepted connection holding its permit, closed after the idle timeout.
#[derive(Debug)]
pub struct Limited<I> {
    inner: I,
    _permit: OwnedSemaphorePermit,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
}

impl<I> Limited<I> {
    fn new(inner: I, permit: OwnedSemaphorePermit, idle_timeout: Duration) -> Self {
        let idle = Box::pin(tokio::time::sleep(idle_timeout));
        Limited { inner, _permit: permit, idle_timeout, idle }
    }

    /// Note traffic: the idle clock starts again.
    fn active(&mut self) {
        self.idle.as_mut().reset(Instant::now() + self.idle_timeout);
    }

    /// While waiting: an error once the connection was idle for the timeout.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.idle.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle past the idle timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Limited<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx),
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Limited<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx).map_ok(|()| 0),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx).map_ok(|()| 0),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn connections_beyond_the_cap_are_refused_until_one_closes() {
        let acceptor = LimitedAcceptor::new(2, Duration::from_secs(60));
        let accept = |acceptor: &LimitedAcceptor| {
            let (server, client) = tokio::io::duplex(64);
            (Accept::<_, ()>::accept(acceptor, server, ()).into_inner(), client)
        };
        let (first, _c1) = accept(&acceptor);
        let (second, _c2) = accept(&acceptor);
        let (third, _c3) = accept(&acceptor);
        assert!(first.is_ok() && second.is_ok());
        assert!(third.is_err(), "the third connection is over the cap");
        assert_eq!(acceptor.available(), 0);
        drop(first);
        assert_eq!(acceptor.available(), 1, "a closed connection frees its permit");
        assert!(accept(&acceptor).0.is_ok());
    }

    #[tokio::test]
    async fn an_idle_connection_fails_after_the_idle_timeout_and_traffic_resets_it() {
        let acceptor = LimitedAcceptor::new(1, Duration::from_millis(400));
        let (server, mut client) = tokio::io::duplex(64);
        let (mut stream, ()) =
            Accept::<_, ()>::accept(&acceptor, server, ()).into_inner().expect("accepted");
        let started = Instant::now();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            let mut got = Vec::new();
            let err = loop {
                match stream.read(&mut buf).await {
                    Ok(0) => panic!("unexpected end of stream"),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(err) => break err,
                }
            };
            (got, err.kind(), Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.write_all(b"hi").await.expect("write");
        let (got, kind, failed_at) = reader.await.expect("join");
        assert_eq!(got, b"hi");
        assert_eq!(kind, io::ErrorKind::TimedOut);
        // 300 ms until the bytes (which reset the clock), then 400 ms of silence.
        let failed_after = failed_at.duration_since(started);
        assert!(failed_after >= Duration::from_millis(700), "{failed_after:?}");
        assert!(failed_after < Duration::from_secs(5), "{failed_after:?}");
    }
}
