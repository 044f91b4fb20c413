//! Another machine's Docker engine over ssh, reached as the docker CLI
//! reaches it: `ssh -T [-l USER] [-p PORT] -- HOST docker system
//! dial-stdio`, the engine's API on the ssh channel's stdin and stdout.
//!
//! One ssh per HTTP connection, each a child of soak in a process group of
//! its own (a Ctrl-C at the terminal must not cut the connection that
//! removes the run's containers) that dies with soak (`PR_SET_PDEATHSIG`,
//! and the closed stdin ends the remote side). No control master is
//! started: a master forks away from soak and would outlive a SIGKILLed
//! run. Keys, known hosts and options come from the user's ssh
//! configuration, as for `docker -H ssh://...`; `BatchMode` makes a host
//! that would ask for a password or a new host key fail instead of wait.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where `ssh://[USER@]HOST[:PORT]` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("ssh://")
            .ok_or_else(|| format!("{url:?} is not an ssh:// address"))?;
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') {
            return Err(format!(
                "{url:?}: an ssh engine address has no path (ssh://[USER@]HOST[:PORT])"
            ));
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, rest),
        };
        // `[v6]:PORT`, `[v6]`, `HOST:PORT` or `HOST`.
        let (host, port) = match hostport.strip_prefix('[') {
            Some(v6) => {
                let (h, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{url:?}: no closing ] after the IPv6 host"))?;
                (h, after.strip_prefix(':'))
            }
            None => match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            },
        };
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| format!("{url:?}: {p:?} is not a port"))
            })
            .transpose()?;
        if host.is_empty() || user.as_deref() == Some("") {
            return Err(format!("{url:?}: no host (ssh://[USER@]HOST[:PORT])"));
        }
        Ok(Target {
            user,
            host: host.to_string(),
            port,
        })
    }

    /// The command that opens one connection to the engine.
    fn command(&self) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args([
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-T",
        ]);
        if let Some(user) = &self.user {
            cmd.arg("-l").arg(user);
        }
        if let Some(port) = self.port {
            cmd.arg("-p").arg(port.to_string());
        }
        cmd.arg("--")
            .arg(&self.host)
            .args(["docker", "system", "dial-stdio"]);
        cmd
    }
}

/// Opens connections for hyper's client: each an ssh child. What the
/// last ssh wrote to its stderr is kept for the error message.
#[derive(Clone)]
pub struct Connector {
    target: Arc<Target>,
    said: Arc<Mutex<String>>,
    /// The task reading the last ssh's stderr: a failed connection's
    /// reason is whole only once it has read to the end.
    reader: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Connector {
    pub fn new(target: Target) -> Connector {
        Connector {
            target: Arc::new(target),
            said: Arc::default(),
            reader: Arc::default(),
        }
    }

    /// What ssh said last on its stderr (why a connection closed), if
    /// anything. Waits (a few seconds at most) for that ssh to close its
    /// stderr: hyper sees the connection close as ssh exits, before the
    /// words ssh wrote on the way out have been read.
    pub async fn said(&self) -> Option<String> {
        let reader = self.reader.lock().ok()?.take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), reader).await;
        }
        let said = self.said.lock().ok()?.trim().to_string();
        (!said.is_empty()).then_some(said)
    }

    fn open(&self) -> io::Result<Stream> {
        let mut cmd = self.target.command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let parent = std::process::id() as i32;
        // SAFETY: between fork and exec only async-signal-safe calls:
        // prctl(2), getppid(2), _exit(2).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("ssh could not be started ({e}): apt-get install openssh-client"),
            )
        })?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io::Error::other("ssh without its pipes"));
        };
        let said = self.said.clone();
        let reader = tokio::spawn(async move {
            let mut text = String::new();
            let mut buf = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if let Ok(mut s) = said.lock() {
                    s.clone_from(&text);
                }
            }
        });
        if let Ok(mut last) = self.reader.lock() {
            *last = Some(reader);
        }
        Ok(Stream {
            _child: child,
            stdin: TokioIo::new(stdin),
            stdout: TokioIo::new(stdout),
        })
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let opened = self.open();
        Box::pin(async move { opened })
    }
}

/// One connection: ssh's stdout read, its stdin written. Dropping it kills
/// the ssh.
pub struct Stream {
    _child: Child,
    stdin: TokioIo<ChildStdin>,
    stdout: TokioIo<ChildStdout>,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdout).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stdin).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdin).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdin).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn ssh_addresses_are_read_as_the_docker_cli_reads_them() {
        let t = |s: &str| Target::parse(s);
        assert_eq!(
            t("ssh://root@10.0.0.2").unwrap(),
            Target {
                user: Some("root".into()),
                host: "10.0.0.2".into(),
                port: None
            }
        );
        assert_eq!(
            t("ssh://ci@build-3.example:2222").unwrap(),
            Target {
                user: Some("ci".into()),
                host: "build-3.example".into(),
                port: Some(2222)
            }
        );
        assert_eq!(t("ssh://engine").unwrap().user, None);
        assert_eq!(t("ssh://[fe80::1]:22").unwrap().port, Some(22));
        assert_eq!(t("ssh://[fe80::1]").unwrap().host, "fe80::1");
        assert!(t("ssh://").unwrap_err().contains("no host"));
        assert!(t("ssh://a@b/var/run").unwrap_err().contains("no path"));
        assert!(t("ssh://a@b:x").unwrap_err().contains("not a port"));
    }
}
