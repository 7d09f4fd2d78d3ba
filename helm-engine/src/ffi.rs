//! The C ABI of `libhelm_c.so` (Helm v4's SDK, shipped by the `helm-python-sdk` wheel).
//!
//! This is the only module of the workspace with `unsafe` code, and it is here for one reason:
//! no Rust crate renders Helm charts, and the only faithful Helm engine we can embed is the real
//! one, exported through a C ABI. Everything unsafe stays inside this file; callers see
//! [`HelmLibrary`] and [`LoadedChart`], which take and return owned Rust values.
//!
//! The ABI rules this module relies on (from `helm_python/_native.py`, the library's
//! declaration table): every call returns an `int32` status (0 = OK, negative = an error class);
//! handles are `uint64`; every `char**` out-parameter receives a library-owned, NUL-terminated
//! string (or NULL) that must be released exactly once with `helm_free_string`; the last `char**`
//! is the error text. Input `const char*` are only borrowed for the duration of a call.
//!
//! The library embeds a Go runtime: it cannot be unloaded safely (so it is never closed), it reads
//! `SSL_CERT_FILE` and `HELM_*_HOME` when it starts (so those must already be in the process
//! environment), and a crash inside it ends the process. Run it in the `ksync-helm-render`
//! helper process, not in a controller.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::HelmError;

type FreeStringFn = unsafe extern "C" fn(*mut c_char);
type VersionFn = unsafe extern "C" fn() -> *mut c_char;
type ChartLoadFn = unsafe extern "C" fn(*const c_char, *mut u64, *mut *mut c_char) -> i32;
type ChartFreeFn = unsafe extern "C" fn(u64, *mut *mut c_char) -> i32;
type RenderFn = unsafe extern "C" fn(
    u64,
    *const c_char,
    *const c_char,
    *mut *mut c_char,
    *mut *mut c_char,
) -> i32;

/// The loaded Helm engine with the few functions we call.
pub struct HelmLibrary {
    path: PathBuf,
    free_string: FreeStringFn,
    c_version: VersionFn,
    chart_load: ChartLoadFn,
    chart_free: ChartFreeFn,
    render: RenderFn,
    // Never dropped: a Go runtime does not support being unloaded (dlclose). The function
    // pointers above stay valid because the mapping stays for the life of the process.
    _library: ManuallyDrop<Library>,
}

impl std::fmt::Debug for HelmLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelmLibrary").field("path", &self.path).finish_non_exhaustive()
    }
}

/// A library-owned string: copied out and freed exactly once, on drop.
struct OwnedByLibrary<'a> {
    lib: &'a HelmLibrary,
    ptr: *mut c_char,
}

impl OwnedByLibrary<'_> {
    fn text(&self) -> Option<String> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: a non-NULL out-string from the library is a valid NUL-terminated C string
        // that stays alive until we free it in `drop`.
        let text = unsafe { CStr::from_ptr(self.ptr) };
        Some(text.to_string_lossy().into_owned())
    }
}

impl Drop for OwnedByLibrary<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the pointer came from this library as an out-string and is freed once.
            unsafe { (self.lib.free_string)(self.ptr) };
        }
    }
}

impl HelmLibrary {
    /// Loads `libhelm_c.so` from an absolute path.
    ///
    /// `SSL_CERT_FILE` and `HELM_CONFIG_HOME`/`HELM_CACHE_HOME`/`HELM_DATA_HOME` must be set in the
    /// process environment before this is called (the Go runtime reads them at start).
    pub fn load(path: &Path) -> Result<Self, HelmError> {
        let library_error =
            |message: String| HelmError::Library { path: path.to_path_buf(), message };
        if !path.is_absolute() {
            return Err(library_error("the library path must be absolute".to_owned()));
        }
        // SAFETY: loading runs the library's initialisers (the Go runtime start). The file is
        // the helm-c library found by absolute path; nothing else is loaded here.
        let library = unsafe { Library::new(path) }.map_err(|e| library_error(e.to_string()))?;
        // SAFETY (all `symbol` calls): each type below is the exact signature from the library's
        // declaration table; a wrong library fails on a missing symbol instead.
        let free_string: FreeStringFn =
            unsafe { symbol(&library, b"helm_free_string\0") }.map_err(&library_error)?;
        let c_version: VersionFn =
            unsafe { symbol(&library, b"helm_c_version\0") }.map_err(&library_error)?;
        let chart_load: ChartLoadFn =
            unsafe { symbol(&library, b"helm_chart_load\0") }.map_err(&library_error)?;
        let chart_free: ChartFreeFn =
            unsafe { symbol(&library, b"helm_chart_free\0") }.map_err(&library_error)?;
        let render: RenderFn =
            unsafe { symbol(&library, b"helm_render\0") }.map_err(&library_error)?;
        Ok(Self {
            path: path.to_path_buf(),
            free_string,
            c_version,
            chart_load,
            chart_free,
            render,
            _library: ManuallyDrop::new(library),
        })
    }

    /// The version of the helm-c library (not of Helm itself), e.g. `0.2.2`.
    pub fn version(&self) -> String {
        // SAFETY: takes no arguments and returns a library-owned string (or NULL).
        let ptr = unsafe { (self.c_version)() };
        self.own(ptr).text().unwrap_or_default()
    }

    /// Loads a chart directory (or archive path) into a library handle.
    pub fn load_chart(&self, chart: &Path) -> Result<LoadedChart<'_>, HelmError> {
        let path = c_string(&chart.to_string_lossy(), "chart path")?;
        let mut handle: u64 = 0;
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: `path` is a valid C string for the call; both out-pointers point to locals.
        let code = unsafe { (self.chart_load)(path.as_ptr(), &mut handle, &mut err) };
        let err = self.own(err);
        check(code, &err)?;
        Ok(LoadedChart { lib: self, handle })
    }

    fn own(&self, ptr: *mut c_char) -> OwnedByLibrary<'_> {
        OwnedByLibrary { lib: self, ptr }
    }
}

/// A chart held by the library; freed when dropped.
pub struct LoadedChart<'lib> {
    lib: &'lib HelmLibrary,
    handle: u64,
}

impl std::fmt::Debug for LoadedChart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedChart").field("handle", &self.handle).finish()
    }
}

impl LoadedChart<'_> {
    /// Renders the chart offline (`lookup` returns nothing). `values_json` is a JSON object;
    /// `options_json` is `{name, namespace, revision, is_install, is_upgrade}`. Returns the
    /// library's JSON map of template path to rendered YAML.
    pub fn render(&self, values_json: &str, options_json: &str) -> Result<String, HelmError> {
        let values = c_string(values_json, "values")?;
        let options = c_string(options_json, "render options")?;
        let mut out: *mut c_char = std::ptr::null_mut();
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: the handle is live (freed only in `drop`), the inputs are valid C strings for
        // the call and both out-pointers point to locals.
        let code = unsafe {
            (self.lib.render)(self.handle, values.as_ptr(), options.as_ptr(), &mut out, &mut err)
        };
        let out = self.lib.own(out);
        let err = self.lib.own(err);
        check(code, &err)?;
        out.text().ok_or_else(|| HelmError::Engine {
            code,
            message: "helm_render returned no output".to_owned(),
        })
    }
}

impl Drop for LoadedChart<'_> {
    fn drop(&mut self) {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: the handle came from `helm_chart_load` and is freed once; the error string,
        // if any, is released by `OwnedByLibrary`. A failure to free leaks one handle at most.
        let _code = unsafe { (self.lib.chart_free)(self.handle, &mut err) };
        drop(self.lib.own(err));
    }
}

/// Copies a function pointer out of the library.
///
/// # Safety
/// `T` must be the exact C signature of `name` in the library.
unsafe fn symbol<T: Copy>(library: &Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: upheld by the caller (the signature matches the symbol).
    let sym = unsafe { library.get::<T>(name) };
    sym.map(|s| *s).map_err(|e| e.to_string())
}

fn c_string(text: &str, what: &str) -> Result<CString, HelmError> {
    CString::new(text).map_err(|_| HelmError::InvalidRequest(format!("{what} contains a NUL byte")))
}

fn check(code: i32, err: &OwnedByLibrary<'_>) -> Result<(), HelmError> {
    if code == 0 {
        return Ok(());
    }
    Err(HelmError::Engine {
        code,
        message: err.text().unwrap_or_else(|| format!("error code {code} without a message")),
    })
}
