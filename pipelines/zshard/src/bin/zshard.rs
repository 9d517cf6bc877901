//! The `zshard` command (its logic is the library's [`zshard_cli::main`], which the Python package's
//! `zshard` command calls too).

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(zshard_cli::main(std::env::args_os()))
}
