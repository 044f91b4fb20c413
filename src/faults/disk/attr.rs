//! Files as FUSE sees them: attributes, times, sizes in blocks, errors
//! as errnos. The fault state and the filesystem both use them.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};

/// Bytes of disk a file takes (its blocks), as `du` and soak's disk
/// figures count them.
pub(super) fn allocated(md: &std::fs::Metadata) -> u64 {
    md.blocks() * 512
}

/// Up to whole 4 KiB blocks.
pub(super) fn round_up(b: u64) -> u64 {
    b.div_ceil(4096) * 4096
}

pub(super) fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

pub(super) fn kind_of(ft: std::fs::FileType) -> FileType {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_fifo() {
        FileType::NamedPipe
    } else if ft.is_socket() {
        FileType::Socket
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else {
        FileType::RegularFile
    }
}

pub(super) fn time(s: i64, ns: i64) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns as u32)
    } else {
        UNIX_EPOCH
    }
}

pub(super) fn attr_of(ino: u64, md: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: time(md.ctime(), md.ctime_nsec()),
        kind: kind_of(md.file_type()),
        perm: (md.permissions().mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

pub(super) fn to_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}
