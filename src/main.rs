use std::process::ExitCode;

fn main() -> ExitCode {
    spate::cli::main(std::env::args_os())
}
