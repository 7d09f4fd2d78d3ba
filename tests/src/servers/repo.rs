//! Bare repositories with commits, made and pushed to with the real `git` CLI.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{git, run};

/// A bare repository `ROOT/NAME.git` plus a work tree that pushes to it over the filesystem.
#[derive(Debug)]
pub struct BareRepo {
    /// The bare repository.
    pub path: PathBuf,
    /// The repository name relative to the server root (`NAME.git`).
    pub name: String,
    work: PathBuf,
    home: tempfile::TempDir,
}

impl BareRepo {
    /// Create `root/NAME.git` (branch `main`) with one commit holding `README.md`.
    pub fn create(root: &Path, name: &str) -> Result<Self> {
        let home = tempfile::Builder::new().prefix("ksync-git-home-").tempdir()?;
        let name = format!("{name}.git");
        let path = root.join(&name);
        let mut init = git(home.path());
        init.args(["init", "--quiet", "--bare", "--initial-branch=main"]).arg(&path);
        run(init)?;
        let work = home.path().join("work");
        let mut init = git(home.path());
        init.args(["init", "--quiet", "--initial-branch=main"]).arg(&work);
        run(init)?;
        let repo = Self { path, name, work, home };
        repo.commit(&[("README.md", "hello\n")], "initial commit")?;
        Ok(repo)
    }

    fn git_in_work(&self) -> std::process::Command {
        let mut cmd = git(self.home.path());
        cmd.current_dir(&self.work);
        cmd
    }

    fn git_run(&self, args: &[&str]) -> Result<String> {
        let mut cmd = self.git_in_work();
        cmd.args(args);
        run(cmd)
    }

    /// Write `files` (path, content) in the work tree, commit them on the current branch and push
    /// the branch; returns the new commit id.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> Result<String> {
        for (path, content) in files {
            let file = self.work.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, content)
                .with_context(|| format!("writing {}", file.display()))?;
        }
        self.git_run(&["add", "--all"])?;
        self.git_run(&["commit", "--quiet", "--allow-empty", "-m", message])?;
        let branch = self.git_run(&["rev-parse", "--abbrev-ref", "HEAD"])?;
        self.push(&format!("HEAD:refs/heads/{}", branch.trim()))?;
        self.head()
    }

    /// Delete `paths` from the work tree, commit and push; returns the new commit id.
    pub fn remove(&self, paths: &[&str], message: &str) -> Result<String> {
        for path in paths {
            let file = self.work.join(path);
            std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
        }
        self.commit(&[], message)
    }

    /// Add a symlink and commit it; returns the commit id.
    pub fn commit_symlink(&self, link: &str, target: &str, message: &str) -> Result<String> {
        std::os::unix::fs::symlink(target, self.work.join(link))?;
        self.commit(&[], message)
    }

    /// The work tree's HEAD commit.
    pub fn head(&self) -> Result<String> {
        Ok(self.git_run(&["rev-parse", "HEAD"])?.trim().to_owned())
    }

    /// Push `refspec` from the work tree to the bare repository.
    pub fn push(&self, refspec: &str) -> Result<()> {
        let mut cmd = self.git_in_work();
        cmd.args(["push", "--quiet", "--force"]).arg(&self.path).arg(refspec);
        run(cmd).map(|_| ())
    }

    /// Tag HEAD (annotated when `annotated`) and push the tag; returns the tag object id (the
    /// commit id for a lightweight tag).
    pub fn tag(&self, name: &str, annotated: bool) -> Result<String> {
        if annotated {
            self.git_run(&["tag", "-a", "-m", name, name])?;
        } else {
            self.git_run(&["tag", name])?;
        }
        self.push(&format!("refs/tags/{name}:refs/tags/{name}"))?;
        Ok(self.git_run(&["rev-parse", &format!("refs/tags/{name}")])?.trim().to_owned())
    }

    /// Switch the work tree to a new branch at HEAD and push it.
    pub fn branch(&self, name: &str) -> Result<()> {
        self.git_run(&["checkout", "--quiet", "-b", name])?;
        self.push(&format!("HEAD:refs/heads/{name}"))
    }

    /// Switch the work tree to an existing branch.
    pub fn checkout(&self, name: &str) -> Result<()> {
        self.git_run(&["checkout", "--quiet", name]).map(|_| ())
    }

    /// Run `git` with `args` in the work tree (for benchmarks and ad-hoc checks).
    pub fn git(&self, args: &[&str]) -> Result<String> {
        self.git_run(args)
    }

    /// Make `main` of the bare repository a "git bomb": trees nesting `levels` levels of `width`
    /// entries, every entry of a level the same subtree, over `width` copies of one small file,
    /// so `width^(levels + 1)` paths in `levels + 2` objects (a few kilobytes). Written with
    /// `git mktree` and `git commit-tree` straight into the bare repository (the work tree is
    /// left behind); returns the commit.
    pub fn push_bomb(&self, levels: usize, width: usize) -> Result<String> {
        let blob = self.bare_with_input(&["hash-object", "-w", "--stdin"], "kind: bomb\n")?;
        let leaves: String =
            (0..width).map(|i| format!("100644 blob {blob}\tf{i}.yaml\n")).collect();
        let mut tree = self.bare_with_input(&["mktree"], &leaves)?;
        for _ in 0..levels {
            let dirs: String = (0..width).map(|i| format!("040000 tree {tree}\td{i}\n")).collect();
            tree = self.bare_with_input(&["mktree"], &dirs)?;
        }
        let parent = self.bare_with_input(&["rev-parse", "refs/heads/main"], "")?;
        let commit = self.bare_with_input(&["commit-tree", &tree, "-p", &parent], "bomb\n")?;
        self.bare_with_input(&["update-ref", "refs/heads/main", &commit], "")?;
        Ok(commit)
    }

    /// Run `git args` in the bare repository with `input` on stdin; its trimmed stdout.
    fn bare_with_input(&self, args: &[&str], input: &str) -> Result<String> {
        use std::io::Write;
        use std::process::Stdio;
        let mut cmd = git(self.home.path());
        cmd.current_dir(&self.path).args(args);
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
        let output = child.wait_with_output()?;
        anyhow::ensure!(output.status.success(), "git {args:?} failed");
        Ok(String::from_utf8(output.stdout)?.trim().to_owned())
    }

    /// A clean HOME for other `git` invocations against this repository.
    pub fn home(&self) -> &Path {
        self.home.path()
    }
}
