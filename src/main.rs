use std::process::ExitCode;

fn main() -> ExitCode {
    spate::main_with_args(std::env::args_os())
}
