//! Container images built by `scripts/image`, run without a container runtime: the OCI layout is
//! read (index → manifest → config), its layers unpacked into a root filesystem, and a command
//! started in it the way a runtime with the chart's securityContext would: a private mount
//! namespace where the root filesystem is bound read-only, `/tmp` and the image's other volumes
//! are fresh tmpfs, `/proc` and a minimal `/dev` are mounted, then `unshare --root` enters it
//! with the image's user (uid and gid set, supplementary groups dropped) and only the image's
//! environment.
//!
//! Needs root and `unshare` (util-linux); [`unshare_unavailable`] says why not, for the test to
//! print as its skip reason.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::helm::workspace_root;

/// One image as `scripts/image` reported it, plus its OCI config.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    /// `REPOSITORY:TAG`.
    pub reference: String,
    /// The manifest digest.
    pub digest: String,
    /// Layer + config + manifest bytes.
    pub compressed_bytes: u64,
    /// The OCI layout directory.
    pub layout: PathBuf,
    /// The image config (`config` member of the OCI config blob).
    pub config: Value,
}

impl BuiltImage {
    /// The image's user as (uid, gid); numeric `UID:GID` is required (no passwd lookup).
    pub fn user(&self) -> Result<(u32, u32)> {
        let user = self.config["User"].as_str().context("the image config has no User")?;
        let (uid, gid) = user.split_once(':').context("User is not UID:GID")?;
        Ok((uid.parse()?, gid.parse()?))
    }

    /// The image's environment as `NAME=value` strings.
    pub fn env(&self) -> Vec<String> {
        self.config["Env"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// The declared volumes (writable mount points).
    pub fn volumes(&self) -> Vec<String> {
        self.config["Volumes"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }

    /// One OCI label.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.config["Labels"][name].as_str()
    }
}

/// Why this machine cannot run images (not root, no `unshare`, mount namespaces refused), or
/// `None` when it can.
pub fn unshare_unavailable() -> Option<String> {
    if process_uid(std::process::id() as i32) != Some(0) {
        return Some("running an image needs root (mount namespaces and chroot)".into());
    }
    match Command::new("unshare").args(["--mount", "--fork", "true"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`unshare --mount` is refused here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("`unshare` (util-linux) cannot run: {e}")),
    }
}

/// Run `scripts/image --profile debug --no-build` on the binaries in `bin_dir` into `out`, with
/// `extra` arguments and environment (`--push …`); the images it reports, by name
/// (`kuvryn-sync-controller`, `kuvryn-sync-webhook`).
pub fn build_images(
    bin_dir: &Path,
    out: &Path,
    extra: &[&std::ffi::OsStr],
    env: &[(&str, &Path)],
) -> Result<BTreeMap<String, BuiltImage>> {
    let output = Command::new(workspace_root().join("scripts/image"))
        .args(["--profile", "debug", "--no-build", "--bin-dir"])
        .arg(bin_dir)
        .arg("--out")
        .arg(out)
        .args(extra)
        .envs(env.iter().copied())
        .env(kuvryn_sync_helm::LIBHELM_ENV, crate::helm::libhelm())
        .output()
        .context("running scripts/image")?;
    if !output.status.success() {
        bail!("scripts/image failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let mut images = BTreeMap::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let report: Value = serde_json::from_str(line).with_context(|| format!("line {line:?}"))?;
        let layout = PathBuf::from(report["layout"].as_str().context("layout")?);
        let name = layout.file_name().context("layout name")?.to_string_lossy().into_owned();
        let config = read_config(&layout)?;
        images.insert(
            name,
            BuiltImage {
                reference: report["image"].as_str().context("image")?.to_owned(),
                digest: report["digest"].as_str().context("digest")?.to_owned(),
                compressed_bytes: report["compressed_bytes"].as_u64().context("size")?,
                layout,
                config,
            },
        );
    }
    Ok(images)
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_slice(&text)?)
}

fn manifest(layout: &Path) -> Result<Value> {
    let index = read_json(&layout.join("index.json"))?;
    let digest = index["manifests"][0]["digest"].as_str().context("index has no manifest")?;
    read_json(&blob(layout, digest))
}

fn read_config(layout: &Path) -> Result<Value> {
    let manifest = manifest(layout)?;
    let digest = manifest["config"]["digest"].as_str().context("manifest has no config")?;
    Ok(read_json(&blob(layout, digest))?["config"].clone())
}

/// Unpack every layer of the image at `layout` into `rootfs`, owners kept.
pub fn unpack(layout: &Path, rootfs: &Path) -> Result<()> {
    std::fs::create_dir_all(rootfs)?;
    for layer in manifest(layout)?["layers"].as_array().context("layers")? {
        let digest = layer["digest"].as_str().context("layer digest")?;
        let status = Command::new("tar")
            .args(["--same-owner", "--numeric-owner", "-xzf"])
            .arg(blob(layout, digest))
            .arg("-C")
            .arg(rootfs)
            .status()?;
        if !status.success() {
            bail!("tar could not unpack layer {digest}");
        }
    }
    Ok(())
}

/// Every entry of `rootfs` with (mode, uid, size, mtime, link target): what a write would change.
pub fn snapshot(rootfs: &Path) -> Result<BTreeMap<PathBuf, String>> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![rootfs.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            let link = std::fs::read_link(&path).map(|t| t.display().to_string()).ok();
            entries.insert(
                path.strip_prefix(rootfs)?.to_owned(),
                format!(
                    "{:o} {} {} {} {link:?}",
                    meta.mode(),
                    meta.uid(),
                    meta.size(),
                    meta.mtime()
                ),
            );
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(entries)
}

/// The shell script that prepares the mount namespace, then enters the image (`$1` is the root
/// filesystem, `$2:$3` the user, `$4` a host folder whose files are copied into `/tmp`, the
/// volumes follow up to `--`, then the command).
const ENTER: &str = r#"set -eu
R=$1; uid=$2; gid=$3; files=$4; shift 4
mount --make-rprivate /
mount --bind "$R" "$R"
mount -o remount,bind,ro "$R"
while [ "$1" != -- ]; do
    mount -t tmpfs -o "mode=1777,size=512m" tmpfs "$R$1"
    shift
done
shift
if [ -n "$files" ]; then cp -a "$files/." "$R/tmp/"; chown -R "$uid:$gid" "$R/tmp"; fi
mount -t proc proc "$R/proc"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$R/dev"
for d in null zero random urandom; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
exec /usr/bin/env -u IMAGE_PATH PATH="$IMAGE_PATH" /usr/bin/unshare --root="$R" --wd=/ \
    --setgid "$gid" --setuid "$uid" -- "$@"
"#;

/// A command running `argv` inside `rootfs` as the image's user with the image's environment
/// plus `env`; the files of `tmp_files` (a host folder) are copied into the image's `/tmp`
/// first.
pub fn command_in(
    image: &BuiltImage,
    rootfs: &Path,
    tmp_files: Option<&Path>,
    env: &[(&str, &str)],
    argv: &[&str],
) -> Result<Command> {
    let (uid, gid) = image.user()?;
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-c", ENTER, "enter"])
        .arg(rootfs)
        .args([uid.to_string(), gid.to_string()])
        .arg(tmp_files.map(|p| p.as_os_str().to_owned()).unwrap_or_default())
        .args(image.volumes())
        .arg("--")
        .args(argv)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    for pair in image.env() {
        if let Some((name, value)) = pair.split_once('=') {
            command.env(if name == "PATH" { "IMAGE_PATH" } else { name }, value);
        }
    }
    // The image's PATH (IMAGE_PATH here) becomes PATH on entering the image.
    command.envs(env.iter().copied());
    Ok(command)
}

/// Run `argv` in the image to completion; (success, stdout + stderr).
pub fn run_in(image: &BuiltImage, rootfs: &Path, argv: &[&str]) -> Result<(bool, String)> {
    let out = command_in(image, rootfs, None, &[], argv)?.output()?;
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

/// The real uid (first field of `Uid:`) of process `pid`.
pub fn process_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}
