//! A Pod on its own network, reached at the node's ports on this machine's
//! loopback, as every other driver offers its node: the suite's
//! `127.0.0.1:${PORT}` (the load, the readiness probe, the metrics) works
//! unchanged. Each port soak gave the node is listened on here; each
//! connection accepted is carried to the current Pod's same port, one of
//! two ways:
//!
//! - **port-forward**: through the API server and the kubelet (a
//!   WebSocket per connection, `kubectl port-forward`'s path), so soak
//!   reaches the Pod from anywhere it reaches the API;
//! - **pod-ip**: a TCP connection to the Pod's address, as a client inside
//!   the cluster (soak as a Job, or on one of its nodes) connects.
//!
//! A connection made while no Pod runs is closed at once, as a refused one
//! would be. The Pod's port is the same number as the local one: the Pod
//! has a network of its own, so the two do not collide.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// How a connection reaches the Pod.
pub enum Way {
    PortForward(Box<Api<Pod>>),
    PodIp,
}

/// The Pod connections go to now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pod: String,
    pub ip: Option<IpAddr>,
}

/// The listeners on this machine's loopback; dropping it closes them and
/// every connection they carry.
pub struct Forwarder {
    target: watch::Sender<Option<Target>>,
    listeners: Vec<JoinHandle<()>>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Forwarder {
    /// Listens on `127.0.0.1:P` for each of `ports`.
    pub async fn start(ports: &[u16], way: Way) -> Result<Forwarder, String> {
        let (target, rx) = watch::channel(None);
        let way = Arc::new(way);
        let last_error = Arc::new(Mutex::new(None));
        let mut listeners = vec![];
        for &port in ports {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                .await
                .map_err(|e| {
                    format!("cannot listen on 127.0.0.1:{port} to reach the Pod's port: {e}")
                })?;
            listeners.push(tokio::spawn(accept(
                l,
                port,
                way.clone(),
                rx.clone(),
                last_error.clone(),
            )));
        }
        Ok(Forwarder {
            target,
            listeners,
            last_error,
        })
    }

    /// Sends new connections to `t` (none: closes them).
    pub fn point(&self, t: Option<Target>) {
        self.target.send_replace(t);
    }

    /// Why the last connection that failed to reach the Pod did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        for l in &self.listeners {
            l.abort();
        }
    }
}

async fn accept(
    l: TcpListener,
    port: u16,
    way: Arc<Way>,
    target: watch::Receiver<Option<Target>>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    // Aborted with the listener, so no connection outlives the forwarder.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = l.accept() => {
                let Ok((tcp, _)) = accepted else {
                    // Out of descriptors, say: let connections end first.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let Some(t) = target.borrow().clone() else { continue };
                connections.spawn(carry(tcp, port, t, way.clone(), last_error.clone()));
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Carries one connection to the Pod's `port` until either side closes it.
async fn carry(
    mut tcp: TcpStream,
    port: u16,
    t: Target,
    way: Arc<Way>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    let _ = tcp.set_nodelay(true);
    let failed = |e: String| {
        if let Ok(mut l) = last_error.lock() {
            *l = Some(e);
        }
    };
    match &*way {
        Way::PodIp => {
            let Some(ip) = t.ip else {
                return failed(format!("the Pod {} has no address yet", t.pod));
            };
            match TcpStream::connect((ip, port)).await {
                Ok(mut up) => {
                    let _ = up.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut up).await;
                }
                Err(e) => failed(format!(
                    "connecting to the Pod {} at {ip}:{port}: {e}{}",
                    t.pod,
                    if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        " (on a network of its own, the node must listen on 0.0.0.0 or the Pod's address, not 127.0.0.1)"
                    } else {
                        ""
                    }
                )),
            }
        }
        Way::PortForward(pods) => {
            let mut pf = match pods.portforward(&t.pod, &[port]).await {
                Ok(pf) => pf,
                Err(e) => {
                    return failed(format!(
                        "port-forward to the Pod {}:{port} through the API server: {}",
                        t.pod,
                        crate::net::error_chain(&e)
                    ))
                }
            };
            let (Some(mut up), Some(error)) = (pf.take_stream(port), pf.take_error(port)) else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut tcp, &mut up) => {}
                Some(e) = error => failed(format!(
                    "port-forward to the Pod {}:{port}, the kubelet said: {e}",
                    t.pod
                )),
            }
            pf.abort();
        }
    }
}
