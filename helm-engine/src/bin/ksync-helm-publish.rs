//! `ksync-helm-publish`: the real Helm engine's packaging and distribution calls, for building
//! test chart repositories: `helm package`, `helm repo index` and `helm push` (after a registry
//! login). One JSON request on stdin, one JSON answer on stdout:
//!
//! - `{"op":"package","chart":DIR,"destination":DIR}` → `{"ok":"<archive path>"}`
//! - `{"op":"index","dir":DIR,"baseUrl":URL?}` → `{"ok":"<index as JSON>"}` (writes `DIR/index.yaml`)
//! - `{"op":"push","archive":TGZ,"remote":"oci://host/path","host":"host:port","username":U,
//!   "password":P}` → `{"ok":"<push result JSON>"}`
//!
//! Failures answer `{"error":…}` and exit 1. Like `ksync-helm-render`, it loads `libhelm_c.so`
//! (`$KSYNC_LIBHELM`) in its own process, and the caller sets `SSL_CERT_FILE` and `HELM_*_HOME`
//! first (the Go runtime reads them when it starts). The password arrives on stdin, never in argv.
//!
//! Unsafe code: these are C calls into the library, bound here by their declaration-table
//! signatures (`helm_python/_native.py`); the render path's bindings stay in `ffi.rs`, and this
//! tool is kept apart because only tests publish charts.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_void};
use std::io::Read;
use std::path::PathBuf;

use libloading::Library;
use serde::Deserialize;

type FreeFn = unsafe extern "C" fn(*mut c_void);
type PathOptsOutFn =
    unsafe extern "C" fn(*const c_char, *const c_char, *mut *mut c_char, *mut *mut c_char) -> i32;
type ClientNewFn = unsafe extern "C" fn(*const c_char, *mut u64, *mut *mut c_char) -> i32;
type ClientFreeFn = unsafe extern "C" fn(u64, *mut *mut c_char) -> i32;
type LoginFn = unsafe extern "C" fn(
    u64,
    *const c_char,
    *const c_char,
    *const c_char,
    *const c_char,
    *mut *mut c_char,
) -> i32;
type PushFn = unsafe extern "C" fn(
    u64,
    *const c_char,
    *const c_char,
    *const c_char,
    *mut *mut c_char,
    *mut *mut c_char,
) -> i32;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Request {
    Package {
        chart: PathBuf,
        destination: PathBuf,
    },
    Index {
        dir: PathBuf,
        #[serde(default, rename = "baseUrl")]
        base_url: Option<String>,
    },
    Push {
        archive: PathBuf,
        remote: String,
        host: String,
        username: String,
        password: String,
    },
}

struct Helm {
    library: Library,
}

impl Helm {
    fn load() -> Result<Self, String> {
        let path = std::env::var_os(kuvryn_sync_helm::LIBHELM_ENV)
            .ok_or("KSYNC_LIBHELM must name libhelm_c.so")?;
        // SAFETY: loading runs the Helm library's initialisers (its Go runtime start).
        let library = unsafe { Library::new(&path) }.map_err(|e| e.to_string())?;
        Ok(Self { library })
    }

    /// SAFETY: `T` must be the exact signature of `name`.
    unsafe fn symbol<T: Copy>(&self, name: &[u8]) -> Result<T, String> {
        // SAFETY: upheld by the caller.
        unsafe { self.library.get::<T>(name) }.map(|s| *s).map_err(|e| e.to_string())
    }

    /// Copies and frees a library-owned string.
    fn take(&self, ptr: *mut c_char) -> Result<Option<String>, String> {
        if ptr.is_null() {
            return Ok(None);
        }
        // SAFETY: a non-NULL out-string is a valid NUL-terminated string owned by the library.
        let text = unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned();
        // SAFETY: the library's own free function, called once per out-string.
        let free: FreeFn = unsafe { self.symbol(b"helm_free_string\0") }?;
        // SAFETY: the pointer came from the library and is freed once.
        unsafe { free(ptr.cast()) };
        Ok(Some(text))
    }

    fn status(&self, code: i32, err: *mut c_char) -> Result<(), String> {
        let message = self.take(err)?;
        if code == 0 {
            Ok(())
        } else {
            Err(message.unwrap_or_else(|| format!("helm error code {code}")))
        }
    }

    fn path_opts_out(&self, symbol: &[u8], path: &str, opts: &str) -> Result<String, String> {
        // SAFETY: both package and index calls have this signature in the declaration table.
        let call: PathOptsOutFn = unsafe { self.symbol(symbol) }?;
        let (path, opts) = (cstring(path)?, cstring(opts)?);
        let (mut out, mut err) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: inputs are valid C strings for the call; out-pointers point to locals.
        let code = unsafe { call(path.as_ptr(), opts.as_ptr(), &mut out, &mut err) };
        let out = self.take(out)?;
        self.status(code, err)?;
        Ok(out.unwrap_or_default())
    }

    fn push(
        &self,
        archive: &str,
        remote: &str,
        host: &str,
        user: &str,
        pass: &str,
    ) -> Result<String, String> {
        // SAFETY (all four): signatures from the declaration table.
        let client_new: ClientNewFn = unsafe { self.symbol(b"helm_registry_client_new\0") }?;
        let client_free: ClientFreeFn = unsafe { self.symbol(b"helm_registry_client_free\0") }?;
        let login: LoginFn = unsafe { self.symbol(b"helm_registry_login\0") }?;
        let push: PushFn = unsafe { self.symbol(b"helm_push\0") }?;
        let home = std::env::var("HELM_CONFIG_HOME").map_err(|_| "HELM_CONFIG_HOME must be set")?;
        let client_opts = cstring(
            &serde_json::json!({"credentials_file": format!("{home}/registry.json")}).to_string(),
        )?;
        let mut handle = 0u64;
        let mut err = std::ptr::null_mut();
        // SAFETY: valid C string input; out-pointers point to locals.
        let code = unsafe { client_new(client_opts.as_ptr(), &mut handle, &mut err) };
        self.status(code, err)?;
        let result = (|| {
            let (host, user, pass, none) =
                (cstring(host)?, cstring(user)?, cstring(pass)?, cstring("{}")?);
            let mut err = std::ptr::null_mut();
            // SAFETY: live handle, valid C strings, out-pointer to a local.
            let code = unsafe {
                login(handle, host.as_ptr(), user.as_ptr(), pass.as_ptr(), none.as_ptr(), &mut err)
            };
            self.status(code, err)?;
            let (archive, remote) = (cstring(archive)?, cstring(remote)?);
            let (mut out, mut err) = (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: live handle, valid C strings, out-pointers to locals.
            let code = unsafe {
                push(handle, archive.as_ptr(), remote.as_ptr(), none.as_ptr(), &mut out, &mut err)
            };
            let out = self.take(out)?;
            self.status(code, err)?;
            Ok(out.unwrap_or_default())
        })();
        let mut err = std::ptr::null_mut();
        // SAFETY: the handle came from `helm_registry_client_new` and is freed once.
        let _ = unsafe { client_free(handle, &mut err) };
        let _ = self.take(err);
        result
    }
}

fn cstring(text: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| "an input contains a NUL byte".to_owned())
}

fn run() -> Result<String, String> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| e.to_string())?;
    let request: Request = serde_json::from_str(&input).map_err(|e| format!("bad request: {e}"))?;
    let helm = Helm::load()?;
    match request {
        Request::Package { chart, destination } => helm.path_opts_out(
            b"helm_package_run\0",
            &chart.to_string_lossy(),
            &serde_json::json!({"destination": destination}).to_string(),
        ),
        Request::Index { dir, base_url } => {
            let opts = match base_url {
                Some(url) => serde_json::json!({"base_url": url}),
                None => serde_json::json!({}),
            };
            helm.path_opts_out(
                b"helm_repo_index_generate\0",
                &dir.to_string_lossy(),
                &opts.to_string(),
            )
        }
        Request::Push { archive, remote, host, username, password } => {
            helm.push(&archive.to_string_lossy(), &remote, &host, &username, &password)
        }
    }
}

fn main() {
    match run() {
        Ok(out) => println!("{}", serde_json::json!({ "ok": out })),
        Err(error) => {
            println!("{}", serde_json::json!({ "error": error }));
            std::process::exit(1);
        }
    }
}
