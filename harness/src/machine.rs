//! What the numbers were measured on: the CPU model, the logical CPUs and the load average,
//! printed with the table (`tollgate-bench compare`) so that a table pasted elsewhere says which
//! machine it came from.

/// The CPU model as the OS names it (Linux: the first `model name` of `/proc/cpuinfo`, with its
/// x86 family, model and stepping numbers where given — a virtual machine's name may be as
/// vague as "Intel(R) Xeon(R) Processor" — and "virtual" where the `hypervisor` flag is set; on
/// AArch64 Linux, which has no model name, its `CPU implementer`/`CPU part` codes), or `None`.
///
/// ```
/// // Whatever the machine, never an empty name.
/// assert!(tollgate_bench::machine::cpu_model().map_or(true, |m| !m.is_empty()));
/// ```
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpuinfo(&info)
}

/// [`cpu_model`] from the text of a `/proc/cpuinfo`.
///
/// ```
/// use tollgate_bench::machine::parse_cpuinfo;
/// let amd = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n";
/// assert_eq!(parse_cpuinfo(amd).as_deref(), Some("AMD EPYC 7B13"));
/// let intel = "processor\t: 0\ncpu family\t: 6\nmodel\t\t: 167\nmodel name\t: Intel(R) Xeon(R) Processor\n\
///              stepping\t: 1\nflags\t\t: fpu hypervisor lahf_lm\n";
/// assert_eq!(
///     parse_cpuinfo(intel).as_deref(),
///     Some("Intel(R) Xeon(R) Processor (family 6, model 167, stepping 1; virtual)")
/// );
/// let arm = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";
/// assert_eq!(parse_cpuinfo(arm).as_deref(), Some("CPU implementer 0x41, part 0xd0c"));
/// assert_eq!(parse_cpuinfo(""), None);
/// ```
pub fn parse_cpuinfo(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name && !v.trim().is_empty()).then(|| v.trim().to_owned())
        })
    };
    let numbers = match (field("cpu family"), field("model"), field("stepping")) {
        (Some(f), Some(m), Some(s)) => Some(format!("family {f}, model {m}, stepping {s}")),
        _ => None,
    };
    let virtual_ = field("flags").is_some_and(|f| f.split_whitespace().any(|f| f == "hypervisor"));
    let details = match (numbers, virtual_) {
        (Some(n), true) => format!(" ({n}; virtual)"),
        (Some(n), false) => format!(" ({n})"),
        (None, true) => " (virtual)".to_owned(),
        (None, false) => String::new(),
    };
    let name = field("model name").map(|name| name + &details);
    name.or_else(|| {
        let (imp, part) = (field("CPU implementer")?, field("CPU part")?);
        Some(format!("CPU implementer {imp}, part {part}"))
    })
}

/// One line: `machine: <cpu model>, <n> logical CPUs, load average <1, 5, 15 min>` (each part
/// `unknown` where the OS does not say).
///
/// ```
/// assert!(tollgate_bench::machine::describe().starts_with("machine: "));
/// ```
pub fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty());
    format!(
        "machine: {}, {} logical CPUs, load average {}",
        cpu_model().unwrap_or_else(|| "unknown CPU".to_owned()),
        if cpus == 0 {
            "unknown".to_owned()
        } else {
            cpus.to_string()
        },
        load.unwrap_or_else(|| "unknown".to_owned())
    )
}
