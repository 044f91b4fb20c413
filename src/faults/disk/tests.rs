use super::*;
use crate::suite::faults::{IoFault, IoOp};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

fn mounted(seed: u64, limit: Option<u64>) -> (tempfile::TempDir, Mounted) {
    mounted_with(seed, limit, Writes::Through)
}

pub(super) fn mounted_with(
    seed: u64,
    limit: Option<u64>,
    writes: Writes,
) -> (tempfile::TempDir, Mounted) {
    let dir = tempfile::tempdir().unwrap();
    let m = Mounted::mount(
        &dir.path().join("backing"),
        &dir.path().join("data"),
        "test",
        seed,
        limit,
        writes,
    )
    .expect("mount the fault filesystem (needs root and /dev/fuse)");
    (dir, m)
}

fn read(p: &Path) -> Vec<u8> {
    let mut v = vec![];
    File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

#[test]
fn a_power_cut_drops_what_was_written_after_the_last_fsync() {
    for writes in [Writes::Through, Writes::Cached] {
        let (_dir, m) = mounted_with(1, None, writes);
        let p = m.mountpoint().join("wal.log");
        let mut f = File::create(&p).unwrap();
        f.write_all(b"synced-").unwrap();
        f.sync_data().unwrap();
        f.write_all(b"lost").unwrap();
        // An overwrite of synced bytes is put back too.
        f.write_all_at(b"SYN", 0).unwrap();
        let other = m.mountpoint().join("never-synced");
        std::fs::write(&other, b"gone").unwrap();
        assert_eq!(read(&p), b"SYNced-lost");
        // The node dies with the file open and its last writes, with
        // the writeback cache, still in the kernel's pages.
        let dropped = m.power_cut(false);
        drop(f);
        assert_eq!(m.shared.cached.load(Relaxed), writes == Writes::Cached);
        if writes == Writes::Through {
            assert_eq!(dropped, 4 + 3 + 4);
        } else {
            // The kernel sends whole pages: the cut puts back at least
            // the bytes written.
            assert!(dropped >= 4 + 3 + 4, "{dropped}");
        }
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 7, "{writes:?}");
        assert_eq!(read(&p), b"synced-", "{writes:?}");
        assert_eq!(read(&other), b"", "metadata survives, data does not");
        let s = m.stats();
        assert_eq!((s.power_cuts, s.files_cut), (1, 2));
        // Nothing more to lose now, and nothing comes back later.
        assert_eq!(m.power_cut(false), 0);
        assert_eq!(read(&p), b"synced-", "{writes:?}");
    }
}

#[test]
fn renames_keep_their_unsynced_state_and_unlinks_their_durability() {
    let (_dir, m) = mounted(2, None);
    let tmp = m.mountpoint().join("CURRENT.tmp");
    std::fs::write(&tmp, b"MANIFEST-1\n").unwrap();
    File::open(&tmp).unwrap().sync_all().unwrap();
    std::fs::rename(&tmp, m.mountpoint().join("CURRENT")).unwrap();
    std::fs::create_dir(m.mountpoint().join("sub")).unwrap();
    std::fs::write(m.mountpoint().join("sub/x"), b"unsynced").unwrap();
    std::fs::rename(m.mountpoint().join("sub"), m.mountpoint().join("sub2")).unwrap();
    std::fs::write(m.mountpoint().join("gone"), b"x").unwrap();
    std::fs::remove_file(m.mountpoint().join("gone")).unwrap();
    m.power_cut(false);
    assert_eq!(read(&m.mountpoint().join("CURRENT")), b"MANIFEST-1\n");
    assert_eq!(read(&m.mountpoint().join("sub2/x")), b"");
    assert!(!m.mountpoint().join("gone").exists());
    let mut names: Vec<String> = std::fs::read_dir(m.mountpoint())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["CURRENT", "sub2"]);
}

#[test]
fn a_torn_power_cut_keeps_part_of_the_tail_the_same_way_for_a_seed() {
    let cut = |seed| {
        let (_dir, m) = mounted(seed, None);
        let p = m.mountpoint().join("log");
        let mut f = File::create(&p).unwrap();
        f.write_all(&[b'a'; 100]).unwrap();
        f.sync_all().unwrap();
        f.write_all(&[b'b'; 1000]).unwrap();
        drop(f);
        m.power_cut(true);
        read(&p).len()
    };
    let (a, b) = (cut(7), cut(7));
    assert_eq!(a, b);
    assert!((100..=1100).contains(&a));
    let lens: Vec<usize> = (0..8).map(cut).collect();
    assert!(lens.iter().any(|l| *l != lens[0]), "{lens:?}");
}

#[test]
fn a_full_disk_refuses_growth_with_enospc_until_space_returns() {
    let (_dir, m) = mounted(3, Some(64 * 1024));
    let p = m.mountpoint().join("f");
    let mut f = File::create(&p).unwrap();
    f.write_all(&[0; 60 * 1024]).unwrap();
    let e = f.write_all(&[0; 8 * 1024]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    // Overwrites in place take no room.
    f.write_all_at(&[1; 1024], 0).unwrap();
    drop(f);
    // `disk_full: true`: full now, even under the limit.
    std::fs::remove_file(&p).unwrap();
    m.set_room(Some(0));
    let e = std::fs::write(m.mountpoint().join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    // Space comes back as on a real disk: by deleting, or the fault
    // lifted.
    std::fs::write(m.mountpoint().join("h"), b"").unwrap();
    m.set_room(None);
    std::fs::write(m.mountpoint().join("g"), b"x").unwrap();
    assert_eq!(m.stats().refused_writes, 2);
    let vfs = nix::sys::statvfs::statvfs(m.mountpoint()).unwrap();
    assert!(vfs.blocks() * vfs.fragment_size() <= 64 * 1024);
}

#[test]
fn io_errors_hit_their_share_of_the_matching_files_only() {
    let (_dir, m) = mounted(4, None);
    std::fs::write(m.mountpoint().join("1.sst"), b"table").unwrap();
    std::fs::write(m.mountpoint().join("LOG"), b"log").unwrap();
    m.set_errors(Some(IoFault {
        rate: 0.5,
        delay: Duration::ZERO,
        ops: vec![IoOp::Read],
        path: Some("*.sst".into()),
    }));
    let mut failed = 0;
    for _ in 0..200 {
        match std::fs::read(m.mountpoint().join("1.sst")) {
            Ok(b) => assert_eq!(b, b"table"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO));
                failed += 1;
            }
        }
        assert_eq!(std::fs::read(m.mountpoint().join("LOG")).unwrap(), b"log");
    }
    // A read of the file may be more than one read of the filesystem.
    assert!((30..200).contains(&failed), "{failed} of 200 failed");
    assert!(m.stats().read_errors >= failed);
    m.set_errors(None);
    assert_eq!(
        std::fs::read(m.mountpoint().join("1.sst")).unwrap(),
        b"table"
    );
}

#[test]
fn io_delay_holds_the_operations_it_names() {
    let (_dir, m) = mounted(5, None);
    let p = m.mountpoint().join("f");
    let f = File::create(&p).unwrap();
    m.set_delay(Some(IoFault {
        rate: 1.0,
        delay: Duration::from_millis(50),
        ops: vec![IoOp::Fsync],
        path: None,
    }));
    let t = std::time::Instant::now();
    f.sync_all().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert_eq!(m.stats().delayed, 1);
}

#[test]
fn the_mount_is_labelled_with_its_run_and_gone_when_dropped() {
    let (dir, m) = mounted(6, None);
    let at = m.mountpoint().canonicalize().unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mounts().contains(&(at.clone(), "test".into())),
        "{at:?} in {:?}: {info}",
        mounts()
    );
    drop(m);
    assert!(!mounts().iter().any(|(p, _)| *p == at));
    drop(dir);
}
