//! One TCP connection with a write buffer the codec encodes into and a
//! read buffer it parses in place: what the RESP and PostgreSQL sessions
//! share (neither allocates per request).

use std::task::{Context, Poll};

use tokio::net::TcpStream;

use super::SessionError;

pub struct Pipe {
    pub stream: TcpStream,
    pub rbuf: Vec<u8>,
    pub wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    written: usize,
}

impl Pipe {
    pub fn new(stream: TcpStream) -> Pipe {
        let _ = stream.set_nodelay(true);
        Pipe {
            stream,
            rbuf: Vec::with_capacity(64 << 10),
            wbuf: Vec::with_capacity(64 << 10),
            written: 0,
        }
    }

    /// Connects to `target` within `within`.
    pub async fn connect(target: &str, within: std::time::Duration) -> Result<Pipe, SessionError> {
        let stream = tokio::time::timeout(within, TcpStream::connect(target))
            .await
            .map_err(|_| {
                SessionError::Broken(format!("no connection to {target} within {within:?}"))
            })?
            .map_err(|e| SessionError::Broken(format!("cannot connect to {target}: {e}")))?;
        Ok(Pipe::new(stream))
    }

    /// Reads what the socket has now; `Ok(false)` at end of stream.
    pub fn fill_reads(&mut self) -> std::io::Result<bool> {
        loop {
            if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
                self.rbuf.reserve(64 << 10);
            }
            match self.stream.try_read_buf(&mut self.rbuf) {
                Ok(0) => return Ok(false),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) => return Err(e),
            }
        }
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

    /// What a session's drain does first: sends what it can, then reads
    /// what has come; `false` once the peer has closed.
    pub fn pump(&mut self) -> Result<bool, SessionError> {
        self.flush()?;
        self.fill_reads()
            .map_err(|e| SessionError::Broken(e.to_string()))
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
    /// replies `awaited`, something to read.
    pub fn poll_progress(&mut self, cx: &mut Context<'_>, awaited: bool) -> Poll<()> {
        if self.written < self.wbuf.len() && self.stream.poll_write_ready(cx).is_ready() {
            return Poll::Ready(());
        }
        if awaited && self.stream.poll_read_ready(cx).is_ready() {
            return Poll::Ready(());
        }
        Poll::Pending
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
