//! The allocator's own statistics, for whichever allocator is loaded.
//!
//! soak starts nodes with an allocator preloaded (`LD_PRELOAD`), so the
//! node cannot know at build time which one it runs on. It asks the dynamic
//! linker at run time, in order: jemalloc (`mallctl`), mimalloc
//! (`mi_process_info`), tcmalloc (`MallocExtension_GetNumericProperty`), and
//! falls back to glibc (`mallinfo2`), which is always there. The first symbol
//! found names the allocator that serves `malloc`, because a preloaded
//! library comes first in the lookup order.

use std::ffi::{c_char, c_int, c_void, CStr};

type MallctlFn =
    unsafe extern "C" fn(*const c_char, *mut c_void, *mut usize, *mut c_void, usize) -> c_int;
type MiProcessInfoFn = unsafe extern "C" fn(
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
);
type MiVersionFn = unsafe extern "C" fn() -> c_int;
type TcGetPropFn = unsafe extern "C" fn(*const c_char, *mut usize) -> c_int;
type TcVersionFn =
    unsafe extern "C" fn(*mut c_int, *mut c_int, *mut *const c_char) -> *const c_char;

/// The allocator serving this process, with the entry points to its statistics.
#[derive(Clone, Copy)]
pub enum Allocator {
    Jemalloc(MallctlFn),
    Mimalloc(MiProcessInfoFn, Option<MiVersionFn>),
    Tcmalloc(TcGetPropFn, Option<TcVersionFn>),
    Glibc,
}

fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name is always sound.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Allocator {
    /// Finds the allocator loaded in this process.
    pub fn detect() -> Allocator {
        // SAFETY (all transmutes below): each symbol is the documented C entry
        // point of its library, with exactly the signature of the type alias.
        unsafe {
            if let Some(p) = lookup(c"mallctl") {
                return Allocator::Jemalloc(std::mem::transmute::<*mut c_void, MallctlFn>(p));
            }
            if let Some(p) = lookup(c"mi_process_info") {
                let v = lookup(c"mi_version")
                    .map(|v| std::mem::transmute::<*mut c_void, MiVersionFn>(v));
                return Allocator::Mimalloc(
                    std::mem::transmute::<*mut c_void, MiProcessInfoFn>(p),
                    v,
                );
            }
            if let Some(p) = lookup(c"MallocExtension_GetNumericProperty") {
                let v = lookup(c"tc_version")
                    .map(|v| std::mem::transmute::<*mut c_void, TcVersionFn>(v));
                return Allocator::Tcmalloc(std::mem::transmute::<*mut c_void, TcGetPropFn>(p), v);
            }
        }
        Allocator::Glibc
    }

    pub fn name(&self) -> &'static str {
        match self {
            Allocator::Jemalloc(_) => "jemalloc",
            Allocator::Mimalloc(..) => "mimalloc",
            Allocator::Tcmalloc(..) => "tcmalloc",
            Allocator::Glibc => "glibc",
        }
    }

    /// The library's own version string, where it tells one.
    pub fn version(&self) -> Option<String> {
        // SAFETY: see `detect`; returned strings are static in each library.
        unsafe {
            match *self {
                Allocator::Jemalloc(mallctl) => {
                    let mut p: *const c_char = std::ptr::null();
                    let mut len = std::mem::size_of::<*const c_char>();
                    let rc = mallctl(
                        c"version".as_ptr(),
                        (&mut p as *mut *const c_char).cast(),
                        &mut len,
                        std::ptr::null_mut(),
                        0,
                    );
                    (rc == 0 && !p.is_null())
                        .then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
                }
                Allocator::Mimalloc(_, Some(v)) => {
                    let n = v();
                    Some(format!("{}.{}.{}", n / 100, (n / 10) % 10, n % 10))
                }
                Allocator::Tcmalloc(_, Some(v)) => {
                    let (mut major, mut minor) = (0, 0);
                    let mut patch: *const c_char = std::ptr::null();
                    let s = v(&mut major, &mut minor, &mut patch);
                    (!s.is_null()).then(|| CStr::from_ptr(s).to_string_lossy().into_owned())
                }
                Allocator::Glibc => {
                    let p = libc::gnu_get_libc_version();
                    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
                }
                _ => None,
            }
        }
    }

    /// Current statistics as (metric suffix, bytes). Names are shared across
    /// allocators where the meaning is the same: `allocated` is memory handed
    /// to the program, `resident` memory the allocator holds in RAM.
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        // SAFETY: see `detect`; every out-pointer is a live local of the right size.
        unsafe {
            match *self {
                Allocator::Jemalloc(mallctl) => {
                    // jemalloc caches its statistics until the epoch advances.
                    let mut epoch: u64 = 1;
                    let mut len = std::mem::size_of::<u64>();
                    mallctl(
                        c"epoch".as_ptr(),
                        (&mut epoch as *mut u64).cast(),
                        &mut len,
                        (&mut epoch as *mut u64).cast(),
                        len,
                    );
                    let read = |name: &CStr| {
                        let mut v: usize = 0;
                        let mut len = std::mem::size_of::<usize>();
                        let rc = mallctl(
                            name.as_ptr(),
                            (&mut v as *mut usize).cast(),
                            &mut len,
                            std::ptr::null_mut(),
                            0,
                        );
                        (rc == 0).then_some(v as u64)
                    };
                    [
                        ("allocated", c"stats.allocated"),
                        ("active", c"stats.active"),
                        ("resident", c"stats.resident"),
                        ("retained", c"stats.retained"),
                        ("mapped", c"stats.mapped"),
                        ("metadata", c"stats.metadata"),
                    ]
                    .into_iter()
                    .filter_map(|(k, n)| read(n).map(|v| (k, v)))
                    .collect()
                }
                Allocator::Mimalloc(info, _) => {
                    let mut v = [0usize; 8];
                    let p = v.as_mut_ptr();
                    info(
                        p,
                        p.add(1),
                        p.add(2),
                        p.add(3),
                        p.add(4),
                        p.add(5),
                        p.add(6),
                        p.add(7),
                    );
                    vec![
                        ("resident", v[3] as u64),
                        ("peak_resident", v[4] as u64),
                        ("committed", v[5] as u64),
                        ("peak_committed", v[6] as u64),
                    ]
                }
                Allocator::Tcmalloc(get, _) => {
                    let read = |name: &CStr| {
                        let mut v: usize = 0;
                        (get(name.as_ptr(), &mut v) != 0).then_some(v as u64)
                    };
                    let mut out = vec![];
                    if let Some(a) = read(c"generic.current_allocated_bytes") {
                        out.push(("allocated", a));
                    }
                    let heap = read(c"generic.heap_size");
                    let unmapped = read(c"tcmalloc.pageheap_unmapped_bytes");
                    if let Some(h) = heap {
                        out.push(("heap", h));
                        out.push(("resident", h.saturating_sub(unmapped.unwrap_or(0))));
                    }
                    if let Some(f) = read(c"tcmalloc.pageheap_free_bytes") {
                        out.push(("free", f));
                    }
                    if let Some(u) = unmapped {
                        out.push(("unmapped", u));
                    }
                    out
                }
                Allocator::Glibc => {
                    let m = libc::mallinfo2();
                    vec![
                        // uordblks counts chunks in use in all arenas;
                        // hblkhd the chunks served by mmap directly.
                        ("allocated", (m.uordblks + m.hblkhd) as u64),
                        ("free", m.fordblks as u64),
                        ("heap", (m.arena + m.hblkhd) as u64),
                        ("mmapped", m.hblkhd as u64),
                    ]
                }
            }
        }
    }
}
