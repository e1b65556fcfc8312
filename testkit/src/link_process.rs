//! `klock-testkit link --to PORT`: one [`Link`] in a process of its own, driven over stdin,
//! so the remote scenario runners of every language (tests/remote-scenarios/) cut, delay,
//! freeze and restore the same link.
//!
//! Contract: the link's own port is printed first, as `klock-testkit: link on
//! 127.0.0.1:PORT`. Then each line read from stdin is one command, answered by one line on
//! stdout once it has taken effect: `ok`, or `error: WHY` for a line that is not a command
//! (the link is left as it was). The commands are [`Link`]'s: `cut`, `restore`, `delay MS`,
//! `freeze`, `drop-next`. The end of stdin ends the process (closing every connection), so a
//! runner that dies takes its link with it.

use crate::link::Link;
use std::io::{self, BufRead, Write};
use std::time::Duration;

/// One control line, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Cut,
    Restore,
    Delay(Duration),
    Freeze,
    DropNext,
}

fn parse(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["cut"] => Ok(Command::Cut),
        ["restore"] => Ok(Command::Restore),
        ["freeze"] => Ok(Command::Freeze),
        ["drop-next"] => Ok(Command::DropNext),
        ["delay", ms] => ms
            .parse::<u64>()
            .map(|ms| Command::Delay(Duration::from_millis(ms)))
            .map_err(|_| format!("delay takes whole milliseconds, got {ms:?}")),
        _ => Err(format!(
            "unknown command {line:?} (cut, restore, delay MS, freeze, drop-next)"
        )),
    }
}

/// Runs the link to `127.0.0.1:target` until stdin ends (module contract).
///
/// # Errors
/// No loopback port could be bound, or stdout is gone.
pub fn run(target: u16) -> io::Result<()> {
    let link = Link::open(target)?;
    let mut out = io::stdout().lock();
    writeln!(out, "klock-testkit: link on 127.0.0.1:{}", link.port())?;
    out.flush()?;
    for line in io::stdin().lock().lines() {
        let answer = match parse(&line?) {
            Ok(command) => {
                match command {
                    Command::Cut => link.cut(),
                    Command::Restore => link.restore(),
                    Command::Delay(by) => link.delay(by),
                    Command::Freeze => link.freeze(),
                    Command::DropNext => link.drop_next_requests(),
                }
                String::from("ok")
            }
            Err(why) => format!("error: {why}"),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse, Command};
    use std::time::Duration;

    #[test]
    fn commands_parse_and_anything_else_is_named() {
        assert_eq!(parse("cut"), Ok(Command::Cut));
        assert_eq!(parse(" restore "), Ok(Command::Restore));
        assert_eq!(parse("freeze"), Ok(Command::Freeze));
        assert_eq!(parse("drop-next"), Ok(Command::DropNext));
        assert_eq!(
            parse("delay 250"),
            Ok(Command::Delay(Duration::from_millis(250)))
        );
        assert!(parse("delay -1")
            .unwrap_err()
            .contains("whole milliseconds"));
        assert!(parse("delay").unwrap_err().contains("unknown command"));
        assert!(parse("thaw")
            .unwrap_err()
            .contains("unknown command \"thaw\""));
    }
}
