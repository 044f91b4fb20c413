//! The mount's life: made over a data directory (labelled with the run,
//! so `soak cleanup` finds it), unmounted on drop, restored to a plain
//! directory after soak itself was killed.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use fuser::{INodeNo, MountOption};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::model::DiskStats;
use crate::suite::faults::{IoFault, IoOp};

use super::fs::*;
use super::state::*;
use super::Writes;

/// A mounted fault filesystem; unmounted when dropped.
pub struct Mounted {
    pub(super) shared: Arc<Shared>,
    pub(super) session: Option<fuser::BackgroundSession>,
    pub(super) notifier: fuser::Notifier,
    pub(super) mountpoint: PathBuf,
}

/// The mount source that labels soak's mounts with their run.
pub const SOURCE_PREFIX: &str = "soakfs-";

impl Mounted {
    /// Mounts the files of `backing` at `mountpoint` (both folders, made if
    /// missing), with the cell's `seed` for the faults' choices and a byte
    /// `limit` for the whole cell (`limits.disk`). `limit` needs
    /// [`Writes::Through`].
    pub fn mount(
        backing: &Path,
        mountpoint: &Path,
        run_id: &str,
        seed: u64,
        limit: Option<u64>,
        writes: Writes,
    ) -> io::Result<Mounted> {
        std::fs::create_dir_all(backing)?;
        std::fs::create_dir_all(mountpoint)?;
        let used = crate::telemetry::disk_usage(backing);
        let mut inodes = Inodes {
            paths: HashMap::new(),
            inos: HashMap::new(),
            next: 2,
        };
        inodes.paths.insert(1, PathBuf::new());
        inodes.inos.insert(PathBuf::new(), 1);
        let shared = Arc::new(Shared {
            backing: backing.canonicalize()?,
            inodes: Mutex::new(inodes),
            handles: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            unsynced: Mutex::new(HashMap::new()),
            faults: RwLock::new(Faults {
                limit,
                ..Faults::default()
            }),
            used: AtomicU64::new(used),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats: Mutex::new(DiskStats::default()),
            gate: RwLock::new(()),
            cached: AtomicBool::new(false),
            wants: writes,
        });
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("{SOURCE_PREFIX}{run_id}")),
            MountOption::Subtype("soak".into()),
            MountOption::DefaultPermissions,
        ];
        config.acl = fuser::SessionACL::All;
        config.n_threads = Some(4);
        config.clone_fd = true;
        let session = fuser::spawn_mount(FaultFs(shared.clone()), mountpoint, &config)?;
        let notifier = session.notifier();
        Ok(Mounted {
            shared,
            session: Some(session),
            notifier,
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The folder that holds the files.
    pub fn backing(&self) -> &Path {
        &self.shared.backing
    }

    /// Puts a power cut's loss on every file (see [`Shared::power_cut`]);
    /// the node must be dead. Returns the bytes dropped.
    pub fn power_cut(&self, torn: bool) -> u64 {
        let cached = self.shared.cached.load(Relaxed);
        if cached {
            self.write_back();
        }
        let (changed, dropped) = self.shared.power_cut(torn);
        for ino in &changed {
            let _ = self.notifier.inval_inode(INodeNo(*ino), 0, 0);
        }
        if cached {
            // With the writeback cache the kernel keeps its own idea of a
            // cached file's size and never takes soak's: the files cut
            // shorter get new inode numbers, so that the next lookup
            // starts from what is on disk.
            for (parent, name) in self
                .shared
                .inodes
                .lock()
                .expect("inodes")
                .renumber(&changed)
            {
                let _ = self.notifier.inval_entry(INodeNo(parent), &name);
            }
        }
        dropped
    }

    /// Has the kernel send every page of the node's writes it still holds
    /// (they then count as unsynced writes, as they are): closing a file
    /// writes its dirty pages back and waits for them.
    fn write_back(&self) {
        let files: Vec<PathBuf> = self
            .shared
            .inodes
            .lock()
            .expect("inodes")
            .inos
            .keys()
            .cloned()
            .collect();
        for rel in files {
            let backing = self.shared.full(&rel);
            if std::fs::symlink_metadata(&backing).is_ok_and(|m| m.is_file()) {
                drop(File::open(self.mountpoint.join(&rel)));
            }
        }
    }

    /// `disk_full`: the budget becomes what is used now plus `room`
    /// (`None`: lifted, back to the cell's limit).
    pub fn set_room(&self, room: Option<u64>) {
        let used = self.shared.used.load(Relaxed);
        self.shared.faults.write().expect("faults").full = room.map(|r| used + r);
    }

    pub fn set_errors(&self, f: Option<IoFault>) {
        let reads = f.as_ref().is_some_and(|f| f.ops.contains(&IoOp::Read));
        self.shared.faults.write().expect("faults").errors = f;
        if reads {
            self.drop_page_cache();
        }
    }

    pub fn set_delay(&self, f: Option<IoFault>) {
        let reads = f.as_ref().is_some_and(|f| f.ops.contains(&IoOp::Read));
        self.shared.faults.write().expect("faults").delay = f;
        if reads {
            self.drop_page_cache();
        }
    }

    /// Drops the kernel's cached pages of every file, so that reads reach
    /// the faults at least once (a file the node keeps open would
    /// otherwise be read from memory, as on a real disk).
    fn drop_page_cache(&self) {
        let inos: Vec<u64> = self
            .shared
            .inodes
            .lock()
            .expect("inodes")
            .paths
            .keys()
            .copied()
            .collect();
        for ino in inos {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
        }
    }

    /// Bytes the files take on disk, as soak counts them for the budget.
    pub fn used(&self) -> u64 {
        self.shared.used.load(Relaxed)
    }

    pub fn unsynced_bytes(&self) -> u64 {
        self.shared.unsynced_bytes()
    }

    pub fn stats(&self) -> DiskStats {
        DiskStats {
            writeback_cache: self.shared.cached.load(Relaxed),
            ..self.shared.stats.lock().expect("stats").clone()
        }
    }
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("mountpoint", &self.mountpoint)
            .field("backing", &self.shared.backing)
            .finish()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if s.umount_and_join().is_err() {
                unmount(&self.mountpoint);
            }
        }
    }
}

/// Detaches the mount at `path` (idempotent: a path that is no mount is
/// left alone).
pub fn unmount(path: &Path) -> bool {
    nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH).is_ok()
}

/// Where the files of a fault filesystem mounted at `mountpoint` live:
/// `data.files` beside `data`.
pub fn backing_of(mountpoint: &Path) -> PathBuf {
    let mut name = mountpoint.file_name().unwrap_or_default().to_os_string();
    name.push(".files");
    mountpoint.with_file_name(name)
}

/// After the unmount: the files back where the node wrote them (the
/// mountpoint, empty now), so that `soak verify` and the user's own tools
/// find them there.
pub fn restore(mountpoint: &Path) {
    let backing = backing_of(mountpoint);
    if backing.is_dir() && std::fs::remove_dir(mountpoint).is_ok() {
        let _ = std::fs::rename(&backing, mountpoint);
    }
}

/// soak's fault filesystems mounted on this machine: (mountpoint, run id).
pub fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return vec![];
    };
    text.lines()
        .filter_map(|l| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
            let (left, right) = l.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next()?;
            let run = source.strip_prefix(SOURCE_PREFIX)?;
            (fstype == "fuse" || fstype == "fuse.soak")
                .then(|| (PathBuf::from(unescape(mountpoint)), run.to_string()))
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
