//! Latency on one link between two members: the packets `from` sends to
//! `to` are held for a while before they go. The kernel's `netem` does
//! this where it is built; where it is not (this project's CI kernel has
//! no `sch_netem`), and to need nothing but netfilter everywhere, soak
//! holds them itself: a rule in `from`'s namespace queues what goes to
//! `to` (`NFQUEUE`, with `--queue-bypass`: should soak be gone, packets
//! pass), and a thread of soak's, with a netlink socket made inside that
//! namespace, lets each packet go once its time has come. Packets leave
//! in the order they came (the jitter never reorders them), as on one
//! TCP path.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_META: u8 = 1;
const NF_ACCEPT: u32 = 1;
const NLMSG_ERROR: u16 = 2;
/// Packets the kernel holds for one link before it drops more.
const QUEUE_MAXLEN: u32 = 20_000;

/// One delayed link: its queue's thread, until dropped.
pub struct Delay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Packets held and let go so far.
    pub held: Arc<AtomicU64>,
}

impl Drop for Delay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What one link holds its packets for: `by`, give or take up to `jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    pub by: Duration,
    pub jitter: Duration,
}

impl Delay {
    /// Binds queue `queue` in the namespace `ns` and starts letting its
    /// packets go after `hold`. The rule that sends packets to the queue
    /// is the caller's. Fails if the queue cannot be bound (another
    /// process holds it, or the kernel has no `nfnetlink_queue`).
    pub fn start(ns: &Arc<File>, queue: u16, hold: Hold) -> Result<Delay, String> {
        let ns = ns.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let (stop2, held2) = (stop.clone(), held.clone());
        let thread = std::thread::Builder::new()
            .name(format!("soak-delay-{queue}"))
            .spawn(move || {
                // The socket belongs to the namespace this thread is in
                // when it makes it: the member's.
                // SAFETY: setns on this thread only, with a namespace file
                // that stays open for the call.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    let _ = tx.send(Err(format!(
                        "cannot enter the member's namespace: {}",
                        std::io::Error::last_os_error()
                    )));
                    return;
                }
                let q = match Queue::bind(queue) {
                    Ok(q) => q,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok(()));
                q.run(hold, &stop2, &held2);
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(Delay {
                stop,
                thread: Some(thread),
                held,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err("the delay's thread ended before it began".into()),
        }
    }
}

/// A netlink socket bound to one netfilter queue.
struct Queue {
    fd: OwnedFd,
    num: u16,
    seq: std::cell::Cell<u32>,
}

/// A netlink attribute: its type and payload, padded to 4 bytes.
fn attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len().next_multiple_of(4), 0);
}

impl Queue {
    fn bind(num: u16) -> Result<Queue, String> {
        // SAFETY: a plain socket(2); its fd is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(format!(
                "cannot open a netfilter netlink socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: fd was just returned by socket(2) and is not owned elsewhere.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_nl is valid; family set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: sa is a valid sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r != 0 {
            return Err(format!(
                "cannot bind a netlink socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Room for bursts of queued packets' messages.
        let size: libc::c_int = 4 << 20;
        // SAFETY: setsockopt with a c_int of its size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &size as *const libc::c_int as *const libc::c_void,
                4,
            );
        }
        let q = Queue {
            fd,
            num,
            seq: std::cell::Cell::new(0),
        };
        let mut a = vec![];
        attr(&mut a, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        q.request(NFQNL_MSG_CONFIG, &a, true)
            .map_err(|e| format!("cannot bind netfilter queue {num}: {e}"))?;
        let mut a = vec![];
        let mut params = 0u32.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_META);
        attr(&mut a, NFQA_CFG_PARAMS, &params);
        attr(&mut a, NFQA_CFG_QUEUE_MAXLEN, &QUEUE_MAXLEN.to_be_bytes());
        q.request(NFQNL_MSG_CONFIG, &a, true)
            .map_err(|e| format!("cannot set up netfilter queue {num}: {e}"))?;
        Ok(q)
    }

    /// Sends one message of the queue subsystem; with `ack`, waits for
    /// the kernel's answer and returns its error.
    fn request(&self, msg: u16, attrs: &[u8], ack: bool) -> Result<(), String> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let len = 16 + 4 + attrs.len();
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(&(len as u32).to_ne_bytes());
        b.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
        let flags = libc::NLM_F_REQUEST as u16 | if ack { libc::NLM_F_ACK as u16 } else { 0 };
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        // nfgenmsg: family, version, the queue's number (big-endian).
        b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
        b.extend_from_slice(&self.num.to_be_bytes());
        b.extend_from_slice(attrs);
        // SAFETY: b is a valid buffer of b.len() bytes.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), b.as_ptr().cast(), b.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        if !ack {
            return Ok(());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: buf is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            for (kind, body) in messages(&buf[..n as usize]) {
                if kind == NLMSG_ERROR && body.len() >= 4 {
                    let code = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                    return match code {
                        0 => Ok(()),
                        e => Err(std::io::Error::from_raw_os_error(-e).to_string()),
                    };
                }
            }
        }
    }

    fn verdict(&self, id: u32) {
        let mut a = vec![];
        let mut v = NF_ACCEPT.to_be_bytes().to_vec();
        v.extend_from_slice(&id.to_be_bytes());
        attr(&mut a, NFQA_VERDICT_HDR, &v);
        let _ = self.request(NFQNL_MSG_VERDICT, &a, false);
    }

    /// Holds each packet until its time, then lets it go; at `stop`, lets
    /// every packet still held go at once and unbinds.
    fn run(&self, hold: Hold, stop: &AtomicBool, held: &AtomicU64) {
        let mut waiting: VecDeque<(Instant, u32)> = VecDeque::new();
        let mut buf = vec![0u8; 65536];
        let mut last = Instant::now();
        let mut rng = rand::rng();
        while !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            while waiting.front().is_some_and(|w| w.0 <= now) {
                let (_, id) = waiting.pop_front().expect("a packet");
                self.verdict(id);
                held.fetch_add(1, Ordering::Relaxed);
            }
            let wait = waiting
                .front()
                .map(|w| w.0.saturating_duration_since(now))
                .unwrap_or(Duration::from_millis(100))
                .min(Duration::from_millis(100));
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, wait.as_millis().max(1) as i32) };
            if r <= 0 {
                continue;
            }
            loop {
                // SAFETY: buf is writable for its length.
                let n = unsafe {
                    libc::recv(
                        self.fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n <= 0 {
                    // EAGAIN: all read; ENOBUFS: the kernel dropped
                    // messages (their packets pass at the queue's end).
                    break;
                }
                for (kind, body) in messages(&buf[..n as usize]) {
                    if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                        continue;
                    }
                    let Some(id) = packet_id(body) else { continue };
                    let spread = if hold.jitter.is_zero() {
                        0.0
                    } else {
                        use rand::Rng;
                        rng.random_range(-1.0..=1.0) * hold.jitter.as_secs_f64()
                    };
                    let due = Instant::now()
                        + Duration::from_secs_f64((hold.by.as_secs_f64() + spread).max(0.0));
                    // In order: never before the packet ahead of it.
                    last = due.max(last);
                    waiting.push_back((last, id));
                }
            }
        }
        for (_, id) in waiting.drain(..) {
            self.verdict(id);
        }
        let mut a = vec![];
        attr(&mut a, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0]);
        let _ = self.request(NFQNL_MSG_CONFIG, &a, false);
    }
}

/// The netlink messages of one datagram: each one's type and body.
fn messages(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = vec![];
    while b.len() >= 16 {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        if len < 16 || len > b.len() {
            break;
        }
        out.push((kind, &b[16..len]));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    out
}

/// The packet id of a queued packet's message (its body: nfgenmsg, then
/// attributes).
fn packet_id(body: &[u8]) -> Option<u32> {
    let mut a = body.get(4..)?;
    while a.len() >= 4 {
        let len = u16::from_ne_bytes([a[0], a[1]]) as usize;
        let kind = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 || len > a.len() {
            return None;
        }
        if kind == NFQA_PACKET_HDR && len >= 8 {
            return Some(u32::from_be_bytes([a[4], a[5], a[6], a[7]]));
        }
        a = &a[len.next_multiple_of(4).min(a.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_packets_id_is_read_from_its_message() {
        // nlmsghdr (16), nfgenmsg (4), a packet header attribute, a mark.
        let mut m = vec![0u8; 16];
        let mut body = vec![2, 0, 0, 7];
        attr(&mut body, 5, &[0, 0, 0, 1]);
        attr(&mut body, NFQA_PACKET_HDR, &[0, 0, 1, 44, 8, 0, 3]);
        m.extend_from_slice(&body);
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m[4..6].copy_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET).to_ne_bytes());
        let two = [m.clone(), m].concat();
        let got = messages(&two);
        assert_eq!(got.len(), 2);
        assert_eq!(packet_id(got[1].1), Some(300));
    }
}
