//! The CPUs a test may run on, and pinning test threads to them, so that tests of the sharded
//! bucket (whose threads decide on their CPU's shard on Linux) choose which shards their
//! threads use.

/// Two CPUs this process may run on, if it may run on two (Linux; `None` elsewhere, where the
/// sharded bucket homes threads by thread slot and there is nothing to pin).
pub fn two() -> Option<[usize; 2]> {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{sched_getaffinity, CpuSet};
        let allowed = sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
        let mut cpus = (0..CpuSet::count()).filter(|&c| allowed.is_set(c).unwrap_or(false));
        Some([cpus.next()?, cpus.next()?])
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Every CPU this process may run on, in increasing order (Linux; empty elsewhere).
pub fn allowed() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{sched_getaffinity, CpuSet};
        match sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
            Ok(set) => (0..CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Whether the OS says which CPU the calling thread runs on (`sched_getcpu`, Linux). Where it
/// does not (elsewhere, or a sandbox that forbids the call), the sharded bucket homes threads
/// by thread slot, and pinning a thread chooses no shard.
pub fn known() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sched::sched_getcpu().is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Pins the calling thread to `cpu` (the OS moves it there before this returns). Panics if the
/// OS refuses: a test that pins must run where it asked. A no-op off Linux.
pub fn pin(cpu: usize) {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{sched_setaffinity, CpuSet};
        let mut set = CpuSet::new();
        set.set(cpu).expect("a CPU id within the set");
        sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}
