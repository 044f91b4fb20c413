//! A cluster: N members of one node definition, each a process tree in
//! its own network namespace and cgroup, with its own data directory, log
//! and readiness, driven as the one [`Node`] a cell runs (start brings
//! up every member that is down; the exit future fires when any member
//! dies) and, through [`Cluster`], one member at a time.

use std::time::{Duration, Instant};

use futures::future::{join_all, select_all};
use nix::sys::signal::Signal;

use super::process::ProcessNode;
use super::{Boxed, Cluster, Death, DriverError, Exit, Exited, Launch, MemberOp, Node};
use crate::net::netns::{Cut, Network};

/// The members and their network.
pub struct ClusterNode {
    members: Vec<ProcessNode>,
    net: Option<Network>,
    /// Per member, the command that exits 0 on the leader; and its timeout.
    leader: Vec<Vec<String>>,
    leader_timeout: Duration,
    dead: Option<usize>,
    /// Per member, its versions rendered for it (`upgrade` of a member).
    versions: Vec<std::collections::BTreeMap<String, Launch>>,
}

impl ClusterNode {
    pub fn new(
        members: Vec<ProcessNode>,
        net: Network,
        leader: Vec<Vec<String>>,
        leader_timeout: Duration,
        versions: Vec<std::collections::BTreeMap<String, Launch>>,
    ) -> ClusterNode {
        ClusterNode {
            members,
            net: Some(net),
            leader,
            leader_timeout,
            dead: None,
            versions,
        }
    }
}

/// A member's error, naming the member.
fn named(m: usize, e: DriverError) -> DriverError {
    named_beside(m, e, "")
}

/// A member's error, naming the member, with what else went wrong at the
/// same start (`also`, empty or starting with "; ") after its cause.
fn named_beside(m: usize, e: DriverError, also: &str) -> DriverError {
    match e {
        DriverError::NeverReady {
            timeout,
            probe,
            log,
            tail,
        } => DriverError::NeverReady {
            timeout,
            probe: format!("member {m} to join: {probe}{also}"),
            log,
            tail,
        },
        DriverError::ExitedBeforeReady {
            status,
            oom,
            log,
            tail,
        } => DriverError::ExitedBeforeReady {
            status: format!("member {m}: {status}{also}"),
            oom,
            log,
            tail,
        },
        DriverError::Spawn { program, source } => DriverError::Spawn {
            program: format!("{program}` (member {m})`"),
            source,
        },
        other => DriverError::Io(format!("member {m}: {other}")),
    }
}

/// Of the members that failed to start, the one that says most (one that
/// exited, such as a panic, before one still waiting for its peers), with
/// the others named beside it: a cluster that lost its configuration to a
/// power cut has every member up and none ready.
fn worst(mut failed: Vec<(usize, DriverError)>) -> Option<DriverError> {
    if failed.is_empty() {
        return None;
    }
    let first = failed
        .iter()
        .position(|(_, e)| matches!(e, DriverError::ExitedBeforeReady { .. }))
        .unwrap_or(0);
    let (m, e) = failed.remove(first);
    let others: Vec<String> = failed
        .iter()
        .map(|(o, e)| match e {
            DriverError::ExitedBeforeReady { status, .. } => {
                format!("member {o} exited ({status})")
            }
            DriverError::NeverReady { .. } => format!("member {o} did not join either"),
            other => format!("member {o}: {other}"),
        })
        .collect();
    let also = match others.is_empty() {
        true => String::new(),
        false => format!("; {}", others.join(", ")),
    };
    Some(named_beside(m, e, &also))
}

impl Node for ClusterNode {
    /// Starts every member that is down, together (members wait for each
    /// other to form a quorum), and waits until each is ready.
    async fn start(&mut self) -> Result<Duration, DriverError> {
        let t0 = Instant::now();
        let results = join_all(
            self.members
                .iter_mut()
                .enumerate()
                .filter(|(_, m)| !m.is_running())
                .map(|(i, m)| async move { (i + 1, m.start().await) }),
        )
        .await;
        let failed: Vec<(usize, DriverError)> = results
            .into_iter()
            .filter_map(|(m, r)| r.err().map(|e| (m, e)))
            .collect();
        match worst(failed) {
            None => Ok(t0.elapsed()),
            Some(e) => Err(e),
        }
    }

    async fn stop(&mut self) -> Result<Exit, DriverError> {
        let exits = join_all(
            self.members
                .iter_mut()
                .filter(|m| m.is_running())
                .map(|m| m.stop()),
        )
        .await;
        first_exit(exits)
    }

    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        let exits = join_all(
            self.members
                .iter_mut()
                .filter(|m| m.is_running())
                .map(|m| m.kill(sig)),
        )
        .await;
        first_exit(exits)
    }

    async fn pause(&mut self) -> Result<(), DriverError> {
        for m in self.members.iter().filter(|m| m.is_running()) {
            m.signal(Signal::SIGSTOP)?;
        }
        Ok(())
    }

    async fn resume(&mut self) -> Result<(), DriverError> {
        for m in self.members.iter().filter(|m| m.is_running()) {
            let _ = m.signal(Signal::SIGCONT);
        }
        Ok(())
    }

    fn exited(&self) -> Exited {
        let futs: Vec<Exited> = self
            .members
            .iter()
            .filter(|m| m.pid().is_some())
            .map(Node::exited)
            .collect();
        if futs.is_empty() {
            return Box::pin(std::future::pending());
        }
        Box::pin(async move { select_all(futs).await.0 })
    }

    fn exit(&self) -> Option<Exit> {
        self.members
            .iter()
            .find_map(|m| m.exit_status().map(Exit::from))
    }

    fn death(&mut self) -> Death {
        match self.members.iter().position(|m| m.exit_status().is_some()) {
            Some(i) => {
                self.dead = Some(i + 1);
                self.members[i].classify_death()
            }
            None => Death::Crash,
        }
    }

    fn running(&self) -> bool {
        self.members.iter().any(|m| m.is_running())
    }

    fn pid(&self) -> Option<i32> {
        self.members
            .iter()
            .find(|m| m.is_running())
            .and_then(|m| m.pid())
    }

    async fn set_memory_limit(&mut self, bytes: u64) -> Result<String, DriverError> {
        let mut said = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            said.push(format!(
                "member {}: {}",
                i + 1,
                Node::set_memory_limit(m, bytes).await?
            ));
        }
        Ok(said.join("; "))
    }

    fn use_version(&mut self, launch: &Launch) {
        for m in &mut self.members {
            m.use_version(launch);
        }
    }

    async fn shutdown(&mut self) {
        for m in &mut self.members {
            m.shutdown();
        }
        if let Some(mut n) = self.net.take() {
            n.teardown();
        }
    }

    fn cluster(&mut self) -> Option<&mut dyn Cluster> {
        Some(self)
    }
}

fn first_exit(
    exits: Vec<Result<std::process::ExitStatus, DriverError>>,
) -> Result<Exit, DriverError> {
    let mut first = None;
    for e in exits {
        let e = e?;
        first.get_or_insert(Exit::from(e));
    }
    first.ok_or(DriverError::NotRunning)
}

impl Cluster for ClusterNode {
    fn size(&self) -> usize {
        self.members.len()
    }

    fn is_up(&self, m: usize) -> bool {
        self.members.get(m - 1).is_some_and(|x| x.is_running())
    }

    fn member_pid(&self, m: usize) -> Option<i32> {
        self.members.get(m - 1).and_then(|x| x.pid())
    }

    fn leader(&mut self) -> Boxed<'_, Result<usize, String>> {
        Box::pin(async move {
            if self.leader.is_empty() {
                return Err("a fault targets the leader, and the suite's `cluster` has no `leader` probe: give `leader: { exec: [...] }`, a command that exits 0 on the leader".into());
            }
            // An election may be under way: ask again until the timeout.
            let deadline = Instant::now() + self.leader_timeout;
            loop {
                let asked = join_all(
                    self.leader
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| self.members[*i].is_running())
                        .map(|(i, argv)| async move {
                            let mut cmd = tokio::process::Command::new(&argv[0]);
                            crate::net::netns::enter_hub(&mut cmd);
                            cmd.args(&argv[1..])
                                .stdin(std::process::Stdio::null())
                                .stdout(std::process::Stdio::null())
                                .stderr(std::process::Stdio::null())
                                .kill_on_drop(true);
                            let ok = tokio::time::timeout(Duration::from_secs(5), cmd.status())
                                .await
                                .is_ok_and(|s| s.is_ok_and(|s| s.success()));
                            (i + 1, ok)
                        }),
                )
                .await;
                if let Some((m, _)) = asked.into_iter().find(|(_, ok)| *ok) {
                    return Ok(m);
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "no member is the leader by the suite's probe (`{}`) within {:?}",
                        self.leader[0].join(" "),
                        self.leader_timeout
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }

    fn act(&mut self, m: usize, op: MemberOp) -> Boxed<'_, Result<String, DriverError>> {
        Box::pin(async move {
            let versions = &self.versions;
            let node = self
                .members
                .get_mut(m - 1)
                .ok_or_else(|| DriverError::Io(format!("there is no member {m}")))?;
            match op {
                MemberOp::Kill(sig) => Ok(format!("{}", Exit::from(node.kill(sig).await?))),
                MemberOp::Stop => Ok(format!("{}", Exit::from(node.stop().await?))),
                MemberOp::Start => {
                    let took = node.start().await.map_err(|e| named(m, e))?;
                    Ok(format!("ready after {} ms", took.as_millis()))
                }
                MemberOp::Pause => node.signal(Signal::SIGSTOP).map(|_| "SIGSTOP".into()),
                MemberOp::Resume => node.signal(Signal::SIGCONT).map(|_| "SIGCONT".into()),
                MemberOp::Use(v) => {
                    let launch =
                        versions
                            .get(m - 1)
                            .and_then(|vs| vs.get(&v))
                            .ok_or_else(|| {
                                DriverError::Io(format!("member {m} has no version `{v}`"))
                            })?;
                    node.use_version(launch);
                    Ok(format!("runs `{v}` from its next start"))
                }
            }
        })
    }

    fn start_together<'a>(
        &'a mut self,
        ms: &'a [usize],
    ) -> Boxed<'a, Vec<(usize, Result<String, DriverError>)>> {
        Box::pin(async move {
            join_all(
                self.members
                    .iter_mut()
                    .enumerate()
                    .map(|(i, node)| (i + 1, node))
                    .filter(|(m, _)| ms.contains(m))
                    .map(|(m, node)| async move {
                        let r = match node.is_running() {
                            true => Ok("already running".to_string()),
                            false => node
                                .start()
                                .await
                                .map(|took| format!("ready after {} ms", took.as_millis()))
                                .map_err(|e| named(m, e)),
                        };
                        (m, r)
                    }),
            )
            .await
        })
    }

    fn set_cuts(&mut self, cuts: &[Cut]) -> Result<u64, String> {
        match &self.net {
            Some(n) => n.set_cuts(cuts),
            None => Err("the cluster's network is gone".into()),
        }
    }

    fn last_dead(&self) -> Option<usize> {
        self.dead
    }
}
