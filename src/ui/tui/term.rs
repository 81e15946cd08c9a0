//! Taking the terminal over and giving it back: raw mode, the alternate screen and a hidden
//! cursor through crossterm, and a ratatui terminal drawing on stdout. [`restore`] is
//! idempotent and needs no lock on the dashboard, so that the panic hook can call it
//! whatever state the dashboard is in.

use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use anyhow::Context as _;
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

/// The dashboard's terminal.
pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// The terminal is in raw mode on the alternate screen and must be put back.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Puts the terminal back as it was: cooked mode, the normal screen, a visible cursor.
/// Does nothing when the dashboard does not hold the terminal (safe from a panic hook).
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(
            std::io::stdout(),
            terminal::LeaveAlternateScreen,
            cursor::Show
        );
    }
}

/// The size of the screen we draw on (stdout's terminal, which crossterm's own query does
/// not ask first); 80×24 when the terminal does not say (a pseudo-terminal never sized).
pub fn screen() -> Rect {
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we pass.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 && ws.ws_row > 0 {
        Rect::new(0, 0, ws.ws_col, ws.ws_row)
    } else {
        Rect::new(0, 0, 80, 24)
    }
}

/// Takes the terminal over. Without a terminal on stdin and stdout this is the user's
/// mistake (`--tui` in a pipe): a usage error, before anything was changed.
pub fn enter() -> anyhow::Result<Term> {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return crate::usage("--tui needs a terminal on stdin and stdout");
    }
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
    terminal::enable_raw_mode().context("--tui: cannot switch the terminal to raw mode")?;
    ACTIVE.store(true, Ordering::SeqCst);
    let entered = execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        cursor::Hide
    )
    .context("--tui: cannot switch to the alternate screen")
    .and_then(|()| {
        let options = TerminalOptions {
            viewport: Viewport::Fixed(screen()),
        };
        Terminal::with_options(CrosstermBackend::new(std::io::stdout()), options)
            .context("--tui: cannot set up the screen")
    });
    if entered.is_err() {
        restore();
    }
    entered
}

/// Follows the screen's size (the viewport is fixed so that the size is stdout's, not
/// that of whichever terminal /dev/tty is).
pub fn follow_size(term: &mut Term) -> std::io::Result<()> {
    let now = screen();
    if term.get_frame().area() != now {
        term.resize(now)?;
    }
    Ok(())
}
