//! The async I/O traits on the stream and its halves: `futures_io` always, tokio's with the
//! `tokio` feature. All of them delegate to the halves' cancel-safe poll functions.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{OwnedReadHalf, OwnedWriteHalf, Stream};

macro_rules! futures_read {
    ($t:ty, $($field:tt)*) => {
        impl futures_io::AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                self.get_mut()$($field)*.poll_read(cx, buf)
            }
        }
    };
}

macro_rules! futures_write {
    ($t:ty, $($field:tt)*) => {
        impl futures_io::AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.get_mut()$($field)*.poll_write(cx, buf)
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.get_mut()$($field)*.poll_shutdown(cx)
            }
        }
    };
}

futures_read!(OwnedReadHalf,);
futures_read!(Stream, .read);
futures_write!(OwnedWriteHalf,);
futures_write!(Stream, .write);

#[cfg(feature = "tokio")]
mod tokio_impls {
    use super::*;
    use tokio::io::ReadBuf;

    macro_rules! tokio_read {
        ($t:ty, $($field:tt)*) => {
            impl tokio::io::AsyncRead for $t {
                fn poll_read(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &mut ReadBuf<'_>,
                ) -> Poll<io::Result<()>> {
                    let dst = buf.initialize_unfilled();
                    match self.get_mut()$($field)*.poll_read(cx, dst) {
                        Poll::Ready(Ok(n)) => {
                            buf.advance(n);
                            Poll::Ready(Ok(()))
                        }
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        Poll::Pending => Poll::Pending,
                    }
                }
            }
        };
    }

    macro_rules! tokio_write {
        ($t:ty, $($field:tt)*) => {
            impl tokio::io::AsyncWrite for $t {
                fn poll_write(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &[u8],
                ) -> Poll<io::Result<usize>> {
                    self.get_mut()$($field)*.poll_write(cx, buf)
                }
                fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                    Poll::Ready(Ok(()))
                }
                fn poll_shutdown(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                ) -> Poll<io::Result<()>> {
                    self.get_mut()$($field)*.poll_shutdown(cx)
                }
            }
        };
    }

    tokio_read!(OwnedReadHalf,);
    tokio_read!(Stream, .read);
    tokio_write!(OwnedWriteHalf,);
    tokio_write!(Stream, .write);
}
