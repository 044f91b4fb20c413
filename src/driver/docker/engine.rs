//! A Docker engine, local or remote, through bollard: connected to the host
//! `--docker-host` or `DOCKER_HOST` names (unix, tcp, tcp with TLS when
//! `DOCKER_TLS_VERIFY` is set, https, ssh: see [`super::ssh`]), else the
//! local socket, at the API version both sides speak.

use bollard::Docker;

/// The local engine's socket, when nothing names another.
pub const LOCAL: &str = "unix:///var/run/docker.sock";

pub use crate::model::EngineInfo;

/// An engine soak can talk to.
#[derive(Debug, Clone)]
pub struct Engine {
    pub docker: Docker,
    pub info: EngineInfo,
}

/// Why no engine answered, with the fix.
#[derive(Debug, thiserror::Error)]
#[error("Docker engine {host} not reachable ({reason}); {fix}")]
pub struct EngineError {
    pub host: String,
    pub reason: String,
    pub fix: String,
}

/// The host to use: the option, else `DOCKER_HOST`, else the local socket.
fn host(option: Option<&str>) -> String {
    option
        .map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| LOCAL.to_string())
}

fn error(host: &str, reason: &dyn std::error::Error) -> EngineError {
    let fix = if host.starts_with("ssh://") {
        "check that `ssh HOST docker version` works for this user without a prompt (key, known host), and that the docker CLI is on the remote PATH".to_string()
    } else if host.starts_with("unix://") {
        if super::super::which("dockerd").is_some() {
            "start it: dockerd --iptables=false --bridge=none --storage-driver=vfs &".to_string()
        } else {
            "install it: apt-get install docker.io, then start dockerd".to_string()
        }
    } else {
        "check the address, and that the engine listens there (--docker-host or DOCKER_HOST)"
            .to_string()
    };
    EngineError {
        host: host.to_string(),
        reason: crate::net::error_chain(reason),
        fix,
    }
}

/// Connects, agrees on the API version (Debian's engine speaks 1.41, older
/// than bollard's own) and reads what the report names.
pub async fn connect(option: Option<&str>) -> Result<Engine, EngineError> {
    let host = host(option);
    let (docker, ssh) = if host.starts_with("ssh://") {
        let (docker, ssh) = over_ssh(&host).map_err(|reason| EngineError {
            host: host.clone(),
            reason,
            fix: "write it as ssh://[USER@]HOST[:PORT]".to_string(),
        })?;
        (docker, Some(ssh))
    } else {
        let docker = Docker::connect_with_host(&host).map_err(|e| error(&host, &e))?;
        (docker, None)
    };
    let work = async {
        let docker = docker.negotiate_version().await?;
        let info = docker.info().await?;
        let version = docker.version().await?;
        Ok::<_, bollard::errors::Error>((docker, info, version))
    };
    let mut err = match tokio::time::timeout(std::time::Duration::from_secs(10), work).await {
        Ok(Ok((docker, info, version))) => return Ok(engine(docker, host, info, version)),
        Ok(Err(e)) => error(&host, &e),
        Err(e) => error(&host, &e),
    };
    // What ssh said is the reason a connection over it failed.
    if let Some(ssh) = &ssh {
        if let Some(said) = ssh.said().await {
            err.reason = format!("ssh said: {said}; {}", err.reason);
        }
    }
    Err(err)
}

/// The engine connected, and what the report names of it.
fn engine(
    docker: Docker,
    host: String,
    info: bollard::models::SystemInfo,
    version: bollard::models::SystemVersion,
) -> Engine {
    let api = docker.client_version();
    let local = host.starts_with("unix://");
    Engine {
        docker,
        info: EngineInfo {
            host: host.clone(),
            version: version.version.unwrap_or_default(),
            api: format!("{}.{}", api.major_version, api.minor_version),
            kernel: info.kernel_version.unwrap_or_default(),
            os: info.operating_system.unwrap_or_default(),
            cgroup_version: info
                .cgroup_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            local,
        },
    }
}

/// A client whose connections are ssh children running `docker system
/// dial-stdio` on the remote machine.
fn over_ssh(host: &str) -> Result<(Docker, super::ssh::Connector), String> {
    let connector = super::ssh::Connector::new(super::ssh::Target::parse(host)?);
    let client = std::sync::Arc::new(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(60))
            .build(connector.clone()),
    );
    let docker = Docker::connect_with_custom_transport(
        move |req: bollard::BollardRequest| {
            let client = client.clone();
            Box::pin(async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        },
        // The docker CLI's name for an engine behind a dialer.
        Some("http://docker"),
        120,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| e.to_string())?;
    Ok((docker, connector))
}
