//! One TCP connection with a write buffer the codec encodes into and a
//! read buffer it parses in place: what the RESP and PostgreSQL sessions
//! share (neither allocates per request).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

use super::SessionError;

pub struct Pipe {
    pub stream: TcpStream,
    pub rbuf: Vec<u8>,
    pub wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    written: usize,
    /// [`Pipe::poll_progress`] read bytes that no drain has parsed yet.
    news: bool,
    /// The end of the stream (`Ok`) or its error, as a read met it.
    ended: Option<Result<(), String>>,
}

impl Pipe {
    pub fn new(stream: TcpStream) -> Pipe {
        let _ = stream.set_nodelay(true);
        Pipe {
            stream,
            rbuf: Vec::with_capacity(64 << 10),
            wbuf: Vec::with_capacity(64 << 10),
            written: 0,
            news: false,
            ended: None,
        }
    }

    /// Connects to `target` within `within`.
    pub async fn connect(target: &str, within: std::time::Duration) -> Result<Pipe, SessionError> {
        let stream = tokio::time::timeout(within, crate::net::netns::connect(target))
            .await
            .map_err(|_| {
                SessionError::Broken(format!("no connection to {target} within {within:?}"))
            })?
            .map_err(|e| SessionError::Broken(format!("cannot connect to {target}: {e}")))?;
        Ok(Pipe::new(stream))
    }

    /// Writes what the socket takes now.
    pub fn flush(&mut self) -> Result<(), SessionError> {
        while self.written < self.wbuf.len() {
            match self.stream.try_write(&self.wbuf[self.written..]) {
                Ok(0) => return Err(SessionError::Broken("the node stopped reading".into())),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(SessionError::Broken(e.to_string())),
            }
        }
        self.wbuf.clear();
        self.written = 0;
        Ok(())
    }

    /// What a session's drain does first: sends what it can; `false`
    /// once the peer has closed. What has come was read by
    /// [`Pipe::poll_progress`].
    pub fn pump(&mut self) -> Result<bool, SessionError> {
        self.flush()?;
        // The drain parses what came; poll_progress waits for more.
        self.news = false;
        match &self.ended {
            None => Ok(true),
            Some(Ok(())) => Ok(false),
            Some(Err(e)) => Err(SessionError::Broken(e.clone())),
        }
    }

    /// What a session's drain does last: drops the `used` bytes its
    /// replies took; an error if the peer closed, or, with nothing
    /// `awaited`, if bytes are left that answer no request.
    pub fn settle(&mut self, used: usize, closed: bool, awaited: bool) -> Result<(), SessionError> {
        self.rbuf.drain(..used);
        if !awaited && !self.rbuf.is_empty() {
            return Err(SessionError::Broken("a reply to no request".into()));
        }
        if closed {
            return Err(SessionError::Broken(
                "the node closed the connection".into(),
            ));
        }
        Ok(())
    }

    /// Ready when there is something to write and room for it, or, with
    /// replies `awaited`, bytes were read (or the stream ended).
    ///
    /// It reads here rather than in the drain: a read that does not fill
    /// the buffer has taken all the socket had, and tokio's `poll_read`
    /// then forgets the socket's readiness until the kernel says more
    /// came. A drain that read until `WouldBlock` made a second `recv`
    /// per reply that found nothing (a third of the load's syscalls).
    pub fn poll_progress(&mut self, cx: &mut Context<'_>, awaited: bool) -> Poll<()> {
        // With no reply awaited, what was read waits for a drain that
        // will parse it (a drain with nothing in flight reads nothing).
        if awaited && (self.news || self.ended.is_some()) {
            return Poll::Ready(());
        }
        if self.written < self.wbuf.len() && self.stream.poll_write_ready(cx).is_ready() {
            return Poll::Ready(());
        }
        if !awaited {
            return Poll::Pending;
        }
        loop {
            if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
                self.rbuf.reserve(64 << 10);
            }
            let len = self.rbuf.len();
            let mut buf = ReadBuf::uninit(self.rbuf.spare_capacity_mut());
            let spare = buf.remaining();
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    // SAFETY: poll_read initialised the first n bytes of
                    // the spare capacity.
                    unsafe { self.rbuf.set_len(len + n) };
                    if n == 0 {
                        self.ended = Some(Ok(()));
                        return Poll::Ready(());
                    }
                    self.news = true;
                    if n < spare {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(Err(e)) => {
                    self.ended = Some(Err(e.to_string()));
                    return Poll::Ready(());
                }
                Poll::Pending if self.news => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Writes everything and waits for it to go (a connection's setup).
    pub async fn send_all(&mut self) -> Result<(), SessionError> {
        use tokio::io::AsyncWriteExt;
        let out = std::mem::take(&mut self.wbuf);
        self.stream
            .write_all(&out[self.written..])
            .await
            .map_err(|e| SessionError::Broken(e.to_string()))?;
        self.wbuf = out;
        self.wbuf.clear();
        self.written = 0;
        Ok(())
    }

    /// Waits for more bytes (a connection's setup); an error at the end
    /// of the stream.
    pub async fn read_more(&mut self) -> Result<(), SessionError> {
        use tokio::io::AsyncReadExt;
        if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
            self.rbuf.reserve(64 << 10);
        }
        match self.stream.read_buf(&mut self.rbuf).await {
            Ok(0) => Err(SessionError::Broken(
                "the node closed the connection".into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(SessionError::Broken(e.to_string())),
        }
    }
}
