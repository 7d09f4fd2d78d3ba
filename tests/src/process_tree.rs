//! Stopping a child process together with everything it started.
//!
//! Killing a server by its PID is not enough: `git daemon` is a wrapper whose `git-daemon` child
//! survives it, `git-daemon` and `sshd` fork one process per connection, lighttpd forks CGI
//! programs. [`kill_tree`] first freezes the whole tree (SIGSTOP, repeated until a scan of
//! `/proc` finds no process it has not stopped, so nothing can fork behind its back), then sends
//! SIGKILL to every member and waits, with a deadline, until each one is gone.
//!
//! The servers stay in the test's own process group on purpose: when nextest ends a test that
//! hangs, it signals that group, and the servers go with it even though no destructor runs.
//!
//! A process is identified by its PID *and* its start time, so a PID reused by an unrelated
//! process is never signalled. A zombie counts as gone: it has exited and holds nothing but a
//! process-table entry. So that the entries do not pile up either (init in a container may never
//! reap them), [`kill_tree`] makes the test process a child subreaper: the killed server's
//! orphans are handed to it, and it reaps them.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Child,
    time::{Duration, Instant},
};

use nix::{
    sys::{
        prctl::set_child_subreaper,
        signal::{Signal, kill},
        wait::{WaitPidFlag, waitpid},
    },
    unistd::Pid,
};

/// How long [`kill_tree`] waits for a frozen or killed process to change state.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// One process, as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process id.
    pub pid: i32,
    /// The parent's process id.
    pub ppid: i32,
    /// The process group id.
    pub pgid: i32,
    /// The state letter (`R`, `S`, `T`, `Z`, ...).
    pub state: char,
    /// Start time in clock ticks after boot: with the PID, a unique identity.
    pub start_ticks: u64,
    /// The command name (`comm`).
    pub name: String,
}

impl ProcessInfo {
    /// Read `/proc/PID/stat`; `None` when the process does not exist (any more).
    pub fn read(pid: i32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&stat)
    }

    /// Whether this very process (same PID and start time) still runs: it exists and is not a
    /// zombie.
    pub fn is_alive(&self) -> bool {
        ProcessInfo::read(self.pid)
            .is_some_and(|now| now.start_ticks == self.start_ticks && now.state != 'Z')
    }
}

/// Parse one `/proc/PID/stat` line. The command name sits in parentheses and may itself contain
/// spaces and parentheses, so the fields after it are found from the last `)`.
fn parse_stat(stat: &str) -> Option<ProcessInfo> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let pid = stat[..open].trim().parse().ok()?;
    let name = stat.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // `rest[0]` is field 3 (state) of proc(5); the start time is field 22.
    Some(ProcessInfo {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgid: rest.get(2)?.parse().ok()?,
        start_ticks: rest.get(19)?.parse().ok()?,
        name,
    })
}

/// Every process on the machine that `/proc` lists right now.
pub fn all_processes() -> Vec<ProcessInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(ProcessInfo::read)
        .collect()
}

/// `root` and all its living descendants (children, their children, ...), root first.
pub fn tree(root: u32) -> Vec<ProcessInfo> {
    let Some(root) = i32::try_from(root).ok().and_then(ProcessInfo::read) else {
        return Vec::new();
    };
    let mut members = BTreeMap::from([(root.pid, root.clone())]);
    add_descendants(&mut members);
    let mut out = vec![root.clone()];
    out.extend(members.into_values().filter(|p| p.pid != root.pid));
    out
}

/// Adds to `members` every process whose parent is a member, until nothing new turns up.
/// Returns the processes added.
fn add_descendants(members: &mut BTreeMap<i32, ProcessInfo>) -> Vec<ProcessInfo> {
    let all = all_processes();
    let mut added = Vec::new();
    loop {
        let new: Vec<ProcessInfo> = all
            .iter()
            .filter(|p| members.contains_key(&p.ppid) && !members.contains_key(&p.pid))
            .cloned()
            .collect();
        if new.is_empty() {
            return added;
        }
        for p in new {
            members.insert(p.pid, p.clone());
            added.push(p);
        }
    }
}

/// Send `signal` to `process` unless its PID now belongs to someone else.
fn signal(process: &ProcessInfo, signal: Signal) {
    if ProcessInfo::read(process.pid).is_some_and(|now| now.start_ticks == process.start_ticks) {
        let _ = kill(Pid::from_raw(process.pid), signal);
    }
}

/// Poll `/proc` until `done` holds for every process in `processes`, or the deadline passes;
/// returns the processes for which it does not hold.
fn wait_for(
    processes: &[ProcessInfo],
    deadline: Duration,
    done: impl Fn(&ProcessInfo) -> bool,
) -> Vec<ProcessInfo> {
    let start = Instant::now();
    loop {
        let pending: Vec<ProcessInfo> = processes.iter().filter(|p| !done(p)).cloned().collect();
        if pending.is_empty() || start.elapsed() > deadline {
            return pending;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stopped (by our SIGSTOP), exited, or replaced by another process under the same PID.
fn is_stopped_or_gone(process: &ProcessInfo) -> bool {
    match ProcessInfo::read(process.pid) {
        Some(now) if now.start_ticks == process.start_ticks => matches!(now.state, 'T' | 'Z'),
        _ => true,
    }
}

/// Reap `process` if it is a zombie child of this process, then tell whether it is finished with:
/// gone, replaced, or a zombie that is not ours to reap and whose parent is not a member of the
/// tree being killed (a dying member hands its zombies to us).
fn reaped(process: &ProcessInfo, members: &BTreeSet<i32>) -> bool {
    let _ = waitpid(Pid::from_raw(process.pid), Some(WaitPidFlag::WNOHANG));
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    match ProcessInfo::read(process.pid) {
        Some(now) if now.start_ticks == process.start_ticks => {
            now.state == 'Z' && now.ppid != me && !members.contains(&now.ppid)
        }
        _ => true,
    }
}

/// Stop `child` and all its descendants: freeze the tree, SIGKILL every member, reap `child` and
/// the members handed to this process, and wait until every member is gone. Returns the members
/// still alive at the deadline (empty on success); callers in `Drop` ignore it, the leak test
/// asserts on it.
pub fn kill_tree(child: &mut Child, deadline: Duration) -> Vec<ProcessInfo> {
    // Orphans of the killed tree come to us instead of init, so we can reap them.
    let _ = set_child_subreaper(true);
    if child.try_wait().ok().flatten().is_some() {
        // Already exited and reaped: its descendants (if any) were reparented and are out of
        // reach by parentage. Servers here do not detach, so there is nothing to find.
        return Vec::new();
    }
    let Some(root) = i32::try_from(child.id()).ok().and_then(ProcessInfo::read) else {
        let _ = child.kill();
        let _ = child.wait();
        return Vec::new();
    };
    let mut members = BTreeMap::from([(root.pid, root.clone())]);
    signal(&root, Signal::SIGSTOP);
    let _ = wait_for(&[root], deadline, is_stopped_or_gone);
    // Freeze generation by generation: a stopped process cannot fork, so once a scan adds
    // nobody new the tree is complete.
    let mut seen = BTreeSet::new();
    loop {
        let added = add_descendants(&mut members);
        let fresh: Vec<ProcessInfo> =
            added.into_iter().filter(|p| seen.insert((p.pid, p.start_ticks))).collect();
        if fresh.is_empty() {
            break;
        }
        for p in &fresh {
            signal(p, Signal::SIGSTOP);
        }
        let _ = wait_for(&fresh, deadline, is_stopped_or_gone);
    }
    let members: Vec<ProcessInfo> = members.into_values().collect();
    for p in &members {
        signal(p, Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
    let pids: BTreeSet<i32> = members.iter().map(|p| p.pid).collect();
    let _ = wait_for(&members, deadline, |p| reaped(p, &pids));
    members.into_iter().filter(ProcessInfo::is_alive).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let info = parse_stat(line).expect("parses");
        assert_eq!(info.pid, 4242);
        assert_eq!(info.name, "a (b) c");
        assert_eq!((info.state, info.ppid, info.pgid, info.start_ticks), ('S', 17, 4242, 987654));
    }

    #[test]
    fn this_process_is_alive_and_in_its_own_tree() {
        let me = ProcessInfo::read(i32::try_from(std::process::id()).expect("pid")).expect("me");
        assert!(me.is_alive());
        let root = &tree(std::process::id())[0];
        assert_eq!((root.pid, root.start_ticks), (me.pid, me.start_ticks));
    }
}
