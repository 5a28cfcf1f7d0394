//! `tollgate-bench`: compare lock strategies around tollgate's exact decision function.
//! Run `tollgate-bench compare --help`.

fn main() -> std::process::ExitCode {
    tollgate_bench::cli::main_with(Vec::new())
}
