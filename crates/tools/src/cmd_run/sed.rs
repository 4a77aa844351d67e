//! Enough of a `sed` script parser to find the commands that write files
//! (`w`, `W`, the `s///w` flag) or run programs (`e`, the `s///e` flag).
//!
//! A literal search for "w" or "e" would refuse `sed -n '/error/p'`; a
//! parser that is *wrong* would let `s/x/y/w /etc/passwd` through. So this
//! follows GNU sed 4.9's grammar (addresses, `!`, blocks, bracket-aware
//! regexes with any delimiter, text arguments of `a`/`i`/`c`, file names that
//! run to the end of the line) and, wherever it is unsure where an argument
//! ends, ends it *early* so the rest is still inspected as commands. Anything
//! it does not understand is an error, and the guard refuses the command.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

/// A command in the script with an effect beyond printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SedEffect {
    /// Writes a file: `w`, `W` or the `s` command's `w` flag.
    Writes(&'static str),
    /// Runs a program: `e` or the `s` command's `e` flag.
    Runs(&'static str),
    /// Reads a file into the output: `r` or `R` (refused: GNU sed's
    /// `--sandbox`, which every sed script runs under where it exists,
    /// refuses them, and `cat` reads files).
    Reads(&'static str),
}

/// Whether the `sed` at `executable` is GNU sed with `--sandbox` (which
/// refuses `e`, `r` and `w` in the script). Every sed command runs with it
/// where it exists, so a mistake in the script parser (one let a shell
/// through before: labels end at a blank in GNU sed) is caught by sed
/// itself. Busybox sed has no such option; there the parser alone guards.
///
/// Asked once per executable (`--sandbox --version` must succeed and name
/// GNU sed). Only a clear answer is remembered: a probe that could not run
/// or timed out is logged and asked again next time.
pub(crate) async fn has_sandbox(executable: &Path) -> bool {
    static KNOWN: LazyLock<Mutex<HashMap<PathBuf, bool>>> = LazyLock::new(Mutex::default);
    let remembered = KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(executable)
        .copied();
    if let Some(answer) = remembered {
        return answer;
    }
    let probe = tokio::process::Command::new(executable)
        .args(["--sandbox", "--version"])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    let answer = match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Ok(output)) => {
            output.status.success() && String::from_utf8_lossy(&output.stdout).contains("GNU sed")
        }
        Ok(Err(error)) => {
            tracing::warn!(sed = %executable.display(), %error, "could not ask sed whether it has --sandbox; running this command without it");
            return false;
        }
        Err(_) => {
            tracing::warn!(sed = %executable.display(), "sed did not say within 2 s whether it has --sandbox; running this command without it");
            return false;
        }
    };
    KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(executable.to_owned(), answer);
    answer
}

/// Where and why the parser gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at character {at}")]
pub struct SedScriptError {
    pub at: usize,
    pub what: &'static str,
}

/// The effects of every command in `script`.
pub fn inspect_script(script: &str) -> Result<Vec<SedEffect>, SedScriptError> {
    let mut p = Parser {
        s: script.chars().collect(),
        i: 0,
        effects: Vec::new(),
    };
    p.script()?;
    Ok(p.effects)
}

struct Parser {
    s: Vec<char>,
    i: usize,
    effects: Vec<SedEffect>,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek();
        self.i += 1;
        c
    }

    fn err(&self, what: &'static str) -> SedScriptError {
        SedScriptError { at: self.i, what }
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
    }

    fn script(&mut self) -> Result<(), SedScriptError> {
        loop {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | ';')) {
                self.i += 1;
            }
            let Some(c) = self.peek() else {
                return Ok(());
            };
            if c == '#' {
                self.skip_to_line_end();
                continue;
            }
            self.addresses()?;
            self.skip_blanks();
            while self.peek() == Some('!') {
                self.i += 1;
                self.skip_blanks();
            }
            // `{` opens a block: the next command may follow right away.
            if self.peek() == Some('{') {
                self.i += 1;
                continue;
            }
            self.command()?;
            self.end_of_command()?;
        }
    }

    /// After a command: blanks, then `;`, a newline, `}`, `#` or the end.
    fn end_of_command(&mut self) -> Result<(), SedScriptError> {
        self.skip_blanks();
        match self.peek() {
            None | Some(';' | '\n' | '}' | '#') => Ok(()),
            Some(_) => Err(self.err("extra characters after a command")),
        }
    }

    fn addresses(&mut self) -> Result<(), SedScriptError> {
        if self.address()? {
            self.skip_blanks();
            if self.peek() == Some(',') {
                self.i += 1;
                self.skip_blanks();
                if matches!(self.peek(), Some('+' | '~')) {
                    self.i += 1;
                }
                if !self.address()? {
                    return Err(self.err("missing second address"));
                }
            }
        }
        Ok(())
    }

    /// One address, if there is one here.
    fn address(&mut self) -> Result<bool, SedScriptError> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                self.digits();
                if self.peek() == Some('~') {
                    self.i += 1;
                    self.digits();
                }
                Ok(true)
            }
            Some('$') => {
                self.i += 1;
                Ok(true)
            }
            Some('/') => {
                self.i += 1;
                self.regex('/')?;
                self.regex_flags();
                Ok(true)
            }
            Some('\\') => {
                self.i += 1;
                let delim = self
                    .bump()
                    .ok_or_else(|| self.err("missing regex delimiter"))?;
                if delim == '\n' || delim == '\\' {
                    return Err(self.err("bad regex delimiter"));
                }
                self.regex(delim)?;
                self.regex_flags();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn regex_flags(&mut self) {
        while matches!(self.peek(), Some('I' | 'M')) {
            self.i += 1;
        }
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// Consumes up to and including the closing `delim`, skipping escapes and
    /// bracket expressions (GNU sed treats `s/[/]/x/` as one regex).
    fn regex(&mut self, delim: char) -> Result<(), SedScriptError> {
        loop {
            match self.bump() {
                None => return Err(self.err("unterminated regex")),
                Some('\\') => {
                    if self.bump().is_none() {
                        return Err(self.err("unterminated regex"));
                    }
                }
                Some('[') => self.bracket()?,
                Some(c) if c == delim => return Ok(()),
                Some('\n') => return Err(self.err("newline inside a regex")),
                Some(_) => {}
            }
        }
    }

    /// After `[`: up to the `]` that closes the bracket expression.
    fn bracket(&mut self) -> Result<(), SedScriptError> {
        if self.peek() == Some('^') {
            self.i += 1;
        }
        if self.peek() == Some(']') {
            self.i += 1;
        }
        loop {
            match self.bump() {
                None | Some('\n') => return Err(self.err("unterminated bracket expression")),
                Some('[') if matches!(self.peek(), Some(':' | '.' | '=')) => {
                    let kind = self.bump().unwrap_or(':');
                    loop {
                        match self.bump() {
                            None | Some('\n') => {
                                return Err(self.err("unterminated character class"));
                            }
                            Some(c) if c == kind && self.peek() == Some(']') => {
                                self.i += 1;
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                }
                Some(']') => return Ok(()),
                Some(_) => {}
            }
        }
    }

    /// The replacement of `s`: up to the unescaped delimiter.
    fn replacement(&mut self, delim: char) -> Result<(), SedScriptError> {
        loop {
            match self.bump() {
                None => return Err(self.err("unterminated replacement")),
                Some('\\') => {
                    if self.bump().is_none() {
                        return Err(self.err("unterminated replacement"));
                    }
                }
                Some(c) if c == delim => return Ok(()),
                Some(_) => {}
            }
        }
    }

    fn skip_to_line_end(&mut self) {
        while !matches!(self.peek(), None | Some('\n')) {
            self.i += 1;
        }
    }

    /// A file name. Ends at `;` as well as at the newline (GNU reads on past
    /// `;`): ending early only means more is checked.
    fn word_argument(&mut self) {
        self.skip_blanks();
        while !matches!(self.peek(), None | Some('\n' | ';')) {
            self.i += 1;
        }
    }

    /// A label (of `:`, `b`, `t`, `T`) or `v`'s version. GNU sed 4.9 ends
    /// a label at a blank as well as at `;` or the newline, so in `:x e id`
    /// the label is `x` and `e id` is a command that runs `id` through the
    /// shell. Reading the label to `;` would hide that command; ending at
    /// the blank leaves `e id` to be checked (and refused).
    fn label_argument(&mut self) {
        self.skip_blanks();
        while !matches!(self.peek(), None | Some('\n' | ';' | ' ' | '\t')) {
            self.i += 1;
        }
    }

    /// The text of `a`, `i`, `c`: to the end of the line, where a backslash
    /// continues it onto the next line (both `a\` and the one-line `a text`).
    fn text_argument(&mut self) {
        self.skip_blanks();
        loop {
            match self.bump() {
                None | Some('\n') => return,
                Some('\\') => {
                    self.bump();
                }
                Some(_) => {}
            }
        }
    }

    fn command(&mut self) -> Result<(), SedScriptError> {
        let c = self.bump().ok_or_else(|| self.err("missing command"))?;
        match c {
            '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z'
            | 'F' => {}
            'l' | 'L' | 'q' | 'Q' => {
                self.skip_blanks();
                self.digits();
            }
            ':' | 'b' | 't' | 'T' | 'v' => self.label_argument(),
            'r' => {
                self.effects.push(SedEffect::Reads("r"));
                self.word_argument();
            }
            'R' => {
                self.effects.push(SedEffect::Reads("R"));
                self.word_argument();
            }
            'a' | 'i' | 'c' => self.text_argument(),
            'w' => {
                self.effects.push(SedEffect::Writes("w"));
                self.word_argument();
            }
            'W' => {
                self.effects.push(SedEffect::Writes("W"));
                self.word_argument();
            }
            'e' => {
                self.effects.push(SedEffect::Runs("e"));
                self.skip_to_line_end();
            }
            's' => self.substitute()?,
            'y' => {
                let delim = self.delimiter()?;
                self.replacement(delim)?;
                self.replacement(delim)?;
            }
            _ => return Err(self.err("unknown sed command")),
        }
        Ok(())
    }

    fn delimiter(&mut self) -> Result<char, SedScriptError> {
        match self.bump() {
            None | Some('\n' | '\\') => Err(self.err("bad delimiter")),
            Some(d) => Ok(d),
        }
    }

    fn substitute(&mut self) -> Result<(), SedScriptError> {
        let delim = self.delimiter()?;
        self.regex(delim)?;
        self.replacement(delim)?;
        loop {
            match self.peek() {
                Some('g' | 'p' | 'i' | 'I' | 'm' | 'M') => self.i += 1,
                Some(c) if c.is_ascii_digit() => self.i += 1,
                Some('e') => {
                    self.i += 1;
                    self.effects.push(SedEffect::Runs("s///e"));
                }
                Some('w') => {
                    self.i += 1;
                    self.effects.push(SedEffect::Writes("s///w"));
                    self.word_argument();
                    return Ok(());
                }
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(script: &str) -> Result<Vec<SedEffect>, SedScriptError> {
        inspect_script(script)
    }

    #[test]
    fn harmless_scripts_have_no_effects() {
        for script in [
            "s/a/b/g",
            "/error/p",
            "/[/]/d",
            "s/[/]/X/",
            "s|/usr|/opt|g",
            "s/x/w/",
            "1,5p",
            "$!N;P;D",
            "/start/,/end/{s/e/E/;p}",
            "a hello; w not a command",
            "y/abc/xyz/",
            "10q",
            ":a;N;ba",
            "s/[[:alpha:]/]/X/g",
            "# w comment\np",
        ] {
            assert_eq!(effects(script), Ok(vec![]), "script {script:?}");
        }
    }

    #[test]
    fn writing_and_running_commands_are_found() {
        assert_eq!(effects("w /tmp/x"), Ok(vec![SedEffect::Writes("w")]));
        assert_eq!(effects("1W out"), Ok(vec![SedEffect::Writes("W")]));
        assert_eq!(effects("s/a/b/w out"), Ok(vec![SedEffect::Writes("s///w")]));
        assert_eq!(
            effects("s/a/b/gw out"),
            Ok(vec![SedEffect::Writes("s///w")])
        );
        assert_eq!(effects("e id"), Ok(vec![SedEffect::Runs("e")]));
        assert_eq!(effects("s/.*/id/e"), Ok(vec![SedEffect::Runs("s///e")]));
        assert_eq!(effects("p;$!{w x\n}"), Ok(vec![SedEffect::Writes("w")]));
        assert_eq!(effects("s/[/]/x/;w f"), Ok(vec![SedEffect::Writes("w")]));
        assert_eq!(effects("/x/!e"), Ok(vec![SedEffect::Runs("e")]));
        // A file name ends early at `;`, so what follows is still checked.
        assert_eq!(
            effects("r /dev/null; e id"),
            Ok(vec![SedEffect::Reads("r"), SedEffect::Runs("e")])
        );
    }

    /// A label ends at a blank (GNU sed 4.9), so a command hidden after it
    /// is seen: these ran `id` through the shell when labels ran to `;`.
    #[test]
    fn a_command_after_a_label_is_checked() {
        for script in [":x e id", "t x e id\n:x", "$!b x e id", "b x\te id"] {
            let found = effects(script);
            assert!(
                found.is_err() || found == Ok(vec![SedEffect::Runs("e")]),
                "{script:?}: {found:?}"
            );
        }
        assert_eq!(effects(":x;e id"), Ok(vec![SedEffect::Runs("e")]));
        assert_eq!(effects(":a;N;$!ba;s/\\n/ /g"), Ok(vec![]));
        assert_eq!(effects("b end\np\n:end"), Ok(vec![]));
    }

    /// Every form of address, and regexes whose brackets and escapes hold
    /// the delimiter: a misread address or regex would end it in the wrong
    /// place and read (or hide) the wrong command after it.
    #[test]
    fn addresses_and_regexes_end_where_gnu_sed_ends_them() {
        let writes = Ok(vec![SedEffect::Writes("w")]);
        for script in [
            "1,+3w f",
            "1,~4w f",
            "0~2w f",
            "$w f",
            "\\,x,w f",
            "\\%a\\%b%w f",
            "/x/I,/y/Mw f",
            "/x/IM w f",
            "\\,a,I,\\;b;w f",
            "/a\\/b/w f",
            "/[^]/]/w f",
            "/[]/]/w f",
            "/[[:alpha:]/]/w f",
            "/[[.-.]/]/w f",
            "/[[=e=]/]/w f",
            "/[[a]/w f",
        ] {
            assert_eq!(effects(script), writes, "script {script:?}");
        }
        // A collating symbol runs to its own `.]`: the `]` and `/` inside
        // it do not close the bracket or the regex.
        assert_eq!(effects("s/[[.a]]/w x/.]]/Y/"), Ok(vec![]));
        // The numeric flag picks the match to replace; a flag after it
        // still counts.
        assert_eq!(effects("s/a/b/2w f"), Ok(vec![SedEffect::Writes("s///w")]));
        assert_eq!(effects("s/a/b/g3e"), Ok(vec![SedEffect::Runs("s///e")]));
        for (script, what) in [
            ("\\\\x\\\\p", "bad regex delimiter"),
            ("\\\nx\np", "bad regex delimiter"),
            ("\\", "missing regex delimiter"),
            ("1,p", "missing second address"),
            ("/abc", "unterminated regex"),
            ("/a\nb/p", "newline inside a regex"),
            ("/[abc/p", "unterminated bracket expression"),
            ("/[[:alpha/]/p", "unterminated character class"),
        ] {
            assert_eq!(
                effects(script).map_err(|error| error.what),
                Err(what),
                "script {script:?}"
            );
        }
    }

    #[test]
    fn scripts_it_cannot_read_are_errors() {
        assert!(effects("s/a/b").is_err());
        assert!(effects("k").is_err());
        assert!(effects("s/a/b/x").is_err());
    }
}
