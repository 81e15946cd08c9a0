use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    spate::cli::main(std::env::args_os())
}

/// A reader of spate's output that goes away (`spate ... | head`) ends spate the way it
/// ends `cat`, quietly with status 141 (128 + SIGPIPE), not with a panic's backtrace.
/// SIGPIPE itself stays ignored, so a peer that closes a socket is an error of that
/// session, never the end of the process; results are written before the summary is
/// printed.
fn quiet_on_closed_stdout() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        previous(info);
    }));
}
