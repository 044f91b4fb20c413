//! The allocator on this machine: where a profile's library is, its
//! package version, and the proof, read from `/proc/PID/maps`, that the
//! library really got loaded. The profiles themselves are the suite's
//! language (`suite::allocator`).

use std::path::{Path, PathBuf};

pub use crate::suite::allocator::{Kind, Profile};

impl Profile {
    /// Finds the library on this machine: Debian's paths, then `ldconfig`.
    pub fn find_library(&self) -> Result<Option<PathBuf>, String> {
        if self.kind == Kind::Custom {
            let p = PathBuf::from(&self.options["preload"]);
            return if p.is_file() {
                Ok(Some(p))
            } else {
                Err(format!(
                    "allocator `{}`: the preload library {} does not exist",
                    self.name,
                    p.display()
                ))
            };
        }
        let ldconfig = std::process::Command::new("ldconfig")
            .arg("-p")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        self.find_library_in(&LIBRARY_DIRS, &ldconfig)
    }

    /// `find_library` over these folders and this `ldconfig -p` output.
    pub fn find_library_in(
        &self,
        dirs: &[&str],
        ldconfig: &str,
    ) -> Result<Option<PathBuf>, String> {
        let (names, package) = self.kind.library();
        if names.is_empty() {
            return Ok(None);
        }
        for name in names {
            for d in dirs {
                let p = Path::new(d).join(name);
                if p.is_file() {
                    return Ok(Some(p));
                }
            }
        }
        {
            let text = ldconfig;
            for name in names {
                if let Some(path) = text.lines().find_map(|l| {
                    let (lhs, rhs) = l.split_once("=>")?;
                    (lhs.split_whitespace().next()? == *name).then(|| rhs.trim().to_string())
                }) {
                    return Ok(Some(PathBuf::from(path)));
                }
            }
        }
        Err(format!(
            "allocator `{}`: no {} on this machine; install it with `apt-get install {package}`",
            self.name, names[0]
        ))
    }
}

/// Where Debian and other distributions keep shared libraries.
const LIBRARY_DIRS: [&str; 6] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// Checks, from `/proc/PID/maps`, that `library` is mapped into the process
/// (for glibc: that no other known allocator is).
pub fn prove_loaded(pid: i32, kind: Kind, library: Option<&Path>) -> Result<(), String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("cannot read /proc/{pid}/maps: {e}"))?;
    match library {
        Some(lib) => {
            let real = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
            let hit = maps.lines().any(|l| {
                l.ends_with(&*lib.to_string_lossy()) || l.ends_with(&*real.to_string_lossy())
            });
            if hit {
                Ok(())
            } else {
                Err(format!(
                    "the {} allocator is not loaded in the node (pid {pid}): {} is not in /proc/{pid}/maps. A statically linked or setuid node ignores LD_PRELOAD; so does a wrapper that clears the environment",
                    kind.as_str(),
                    lib.display()
                ))
            }
        }
        None => {
            let other = ["libjemalloc", "libmimalloc", "libtcmalloc"]
                .into_iter()
                .find(|o| maps.contains(o));
            match other {
                Some(o) => Err(format!(
                    "the node was meant to run on glibc's malloc, but {o} is loaded (pid {pid})"
                )),
                None => Ok(()),
            }
        }
    }
}

/// The Debian package version of a library file, where dpkg knows it.
pub fn library_version(lib: &Path) -> Option<String> {
    let real = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
    for p in [lib.to_path_buf(), real] {
        let out = std::process::Command::new("dpkg-query")
            .arg("-S")
            .arg(&p)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(pkg) = text.lines().next().and_then(|l| l.split(": ").next()) {
            let v = std::process::Command::new("dpkg-query")
                .args(["-W", "-f=${Version}", pkg])
                .output()
                .ok()?;
            let v = String::from_utf8_lossy(&v.stdout).trim().to_string();
            if !v.is_empty() {
                return Some(format!("{pkg} {v}"));
            }
        }
    }
    None
}
