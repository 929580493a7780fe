//! The I/O traits on the stream and its halves (owned and borrowed): std's `Read`/`Write`
//! (blocking, with the halves' timeouts), `futures_io` always, tokio's with the `tokio`
//! feature. All of them delegate to the halves' cancel-safe poll functions.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, Stream, WriteHalf};

macro_rules! std_read {
    ($t:ty, $($field:tt)*) => {
        impl io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self$($field)*.read_blocking(buf)
            }
        }
    };
}

macro_rules! std_write {
    ($t:ty, $($field:tt)*) => {
        impl io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self$($field)*.write_blocking(buf)
            }

            /// Written bytes are queued on the connection; the engine sends them without a
            /// flush.
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
    };
}

std_read!(OwnedReadHalf,);
std_read!(Stream, .read);
std_read!(ReadHalf<'_>, .0);
std_write!(OwnedWriteHalf,);
std_write!(Stream, .write);
std_write!(WriteHalf<'_>, .0);

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
futures_read!(ReadHalf<'_>, .0);
futures_write!(OwnedWriteHalf,);
futures_write!(Stream, .write);
futures_write!(WriteHalf<'_>, .0);

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
    tokio_read!(ReadHalf<'_>, .0);
    tokio_write!(OwnedWriteHalf,);
    tokio_write!(Stream, .write);
    tokio_write!(WriteHalf<'_>, .0);
}
