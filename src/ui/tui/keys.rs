//! The dashboard's keys: what each one asks for, and the thread that reads them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key (or a terminal event) asks the dashboard to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// q or Esc: stop the run cleanly; it is recorded as interrupted.
    Stop,
    /// Ctrl-C, which raw mode delivers as a key: raise SIGINT, as without the dashboard.
    Interrupt,
    /// p: pause or resume drawing.
    Pause,
    /// Tab or →: the next phase's histogram.
    NextPhase,
    /// Shift-Tab or ←: the previous phase's histogram.
    PrevPhase,
    /// ?: show or hide the help.
    Help,
    /// The terminal was resized: draw again at once.
    Redraw,
}

/// The action for one terminal event, if any (key releases and other keys do nothing).
pub fn action(ev: &Event) -> Option<Action> {
    let key = match ev {
        Event::Key(k) => k,
        Event::Resize(..) => return Some(Action::Redraw),
        _ => return None,
    };
    let KeyEvent {
        code,
        modifiers,
        kind,
        ..
    } = *key;
    if kind == KeyEventKind::Release {
        return None;
    }
    if modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(code, KeyCode::Char('c' | 'C')).then_some(Action::Interrupt);
    }
    Some(match code {
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => Action::Stop,
        KeyCode::Char('p' | 'P') => Action::Pause,
        KeyCode::Tab | KeyCode::Right => Action::NextPhase,
        KeyCode::BackTab | KeyCode::Left => Action::PrevPhase,
        KeyCode::Char('?') => Action::Help,
        _ => return None,
    })
}

/// Sends SIGINT to this process: the engine's Ctrl-C handling (clean stop, then a second
/// one stops at once) applies exactly as without the dashboard.
pub fn interrupt() {
    // SAFETY: kill with our own pid and a valid signal number has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGINT);
    }
}

/// Reads terminal events until `done`, handing each action to `on`. Polls every 100 ms so
/// that the dashboard's end is noticed promptly; a terminal that errors is retried
/// rather than spun on.
pub fn read_loop(done: &AtomicBool, mut on: impl FnMut(Action)) {
    while !done.load(Ordering::Relaxed) {
        match event::poll(Duration::from_millis(100)) {
            Ok(true) => match event::read() {
                Ok(ev) => {
                    if let Some(a) = action(&ev) {
                        on(a);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            },
            Ok(false) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyEventState;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Event {
        Event::Key(KeyEvent {
            code,
            modifiers,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        })
    }

    #[test]
    fn keys_map_to_actions() {
        let none = KeyModifiers::NONE;
        assert_eq!(action(&key(KeyCode::Char('q'), none)), Some(Action::Stop));
        assert_eq!(action(&key(KeyCode::Esc, none)), Some(Action::Stop));
        assert_eq!(
            action(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Interrupt)
        );
        // A plain c is nothing, nor is Ctrl-Q (q with Ctrl must not stop quietly).
        assert_eq!(action(&key(KeyCode::Char('c'), none)), None);
        assert_eq!(
            action(&key(KeyCode::Char('q'), KeyModifiers::CONTROL)),
            None
        );
        assert_eq!(action(&key(KeyCode::Char('p'), none)), Some(Action::Pause));
        assert_eq!(action(&key(KeyCode::Tab, none)), Some(Action::NextPhase));
        assert_eq!(action(&key(KeyCode::Right, none)), Some(Action::NextPhase));
        assert_eq!(
            action(&key(KeyCode::BackTab, KeyModifiers::SHIFT)),
            Some(Action::PrevPhase)
        );
        assert_eq!(action(&key(KeyCode::Left, none)), Some(Action::PrevPhase));
        assert_eq!(
            action(&key(KeyCode::Char('?'), KeyModifiers::SHIFT)),
            Some(Action::Help)
        );
        assert_eq!(action(&Event::Resize(100, 30)), Some(Action::Redraw));
        let release = Event::Key(KeyEvent {
            code: KeyCode::Char('q'),
            modifiers: none,
            kind: KeyEventKind::Release,
            state: KeyEventState::NONE,
        });
        assert_eq!(action(&release), None);
    }
}
