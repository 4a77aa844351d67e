//! The write guard: per program, the options (and script commands) that
//! write files, set system state, or run another program.
//!
//! It reasons about options as the program parses them (see `options.rs`),
//! not about literal tokens: `sed -ni`, `sed --in-pl=.bak` and `sort -ro out`
//! are all caught. Two kinds of effect are told apart:
//!
//! - **Writes** (`sed -i`, `find -delete`, `sort -o`, `date -s`, …) are
//!   refused with [`CmdRefusal::WriteGuard`] unless `allow_writes` is on.
//! - **Running another program** (`find -exec`, `sed`'s `e`, `sort
//!   --compress-program`, `install --strip-program`, `split --filter`) is
//!   refused with [`CmdRefusal::NeverAllowed`] *always*: it would bypass the
//!   allowlist, and `allow_writes` is a permission to change files, not to run
//!   arbitrary programs. The same goes for a `sed` script the guard cannot
//!   read (`sed -f`, or a script it fails to parse): it could contain `e`.
//!
//! Programs not listed here have no such options (`ls`, `cat`, `grep`, …);
//! a program that gains one must be added here before it joins the default
//! allowlist.

use super::check::CmdRefusal;
use super::options::{Arity, OptionProblem, OptionSpec, Parsed, parse};
use super::sed::{SedEffect, inspect_script};

const SED: OptionSpec = OptionSpec {
    short_required: "efl",
    short_optional: "i",
    long: &[
        ("binary", Arity::None),
        ("debug", Arity::None),
        ("expression", Arity::Required),
        ("file", Arity::Required),
        ("follow-symlinks", Arity::None),
        ("help", Arity::None),
        ("in-place", Arity::Optional),
        ("line-length", Arity::Required),
        ("null-data", Arity::None),
        ("posix", Arity::None),
        ("quiet", Arity::None),
        ("regexp-extended", Arity::None),
        ("sandbox", Arity::None),
        ("separate", Arity::None),
        ("silent", Arity::None),
        ("unbuffered", Arity::None),
        ("version", Arity::None),
        ("zero-terminated", Arity::None),
    ],
};

const SORT: OptionSpec = OptionSpec {
    short_required: "koStT",
    short_optional: "",
    long: &[
        ("batch-size", Arity::Required),
        ("buffer-size", Arity::Required),
        ("check", Arity::Optional),
        ("compress-program", Arity::Required),
        ("debug", Arity::None),
        ("dictionary-order", Arity::None),
        ("field-separator", Arity::Required),
        ("files0-from", Arity::Required),
        ("general-numeric-sort", Arity::None),
        ("help", Arity::None),
        ("human-numeric-sort", Arity::None),
        ("ignore-case", Arity::None),
        ("ignore-leading-blanks", Arity::None),
        ("ignore-nonprinting", Arity::None),
        ("key", Arity::Required),
        ("merge", Arity::None),
        ("month-sort", Arity::None),
        ("numeric-sort", Arity::None),
        ("output", Arity::Required),
        ("parallel", Arity::Required),
        ("random-sort", Arity::None),
        ("random-source", Arity::Required),
        ("reverse", Arity::None),
        ("sort", Arity::Required),
        ("stable", Arity::None),
        ("temporary-directory", Arity::Required),
        ("unique", Arity::None),
        ("version", Arity::None),
        ("version-sort", Arity::None),
        ("zero-terminated", Arity::None),
    ],
};

const UNIQ: OptionSpec = OptionSpec {
    short_required: "fsw",
    short_optional: "",
    long: &[
        ("all-repeated", Arity::Optional),
        ("check-chars", Arity::Required),
        ("count", Arity::None),
        ("group", Arity::Optional),
        ("help", Arity::None),
        ("ignore-case", Arity::None),
        ("repeated", Arity::None),
        ("skip-chars", Arity::Required),
        ("skip-fields", Arity::Required),
        ("unique", Arity::None),
        ("version", Arity::None),
        ("zero-terminated", Arity::None),
    ],
};

const DATE: OptionSpec = OptionSpec {
    short_required: "dfrs",
    short_optional: "I",
    long: &[
        ("date", Arity::Required),
        ("debug", Arity::None),
        ("file", Arity::Required),
        ("help", Arity::None),
        ("iso-8601", Arity::Optional),
        ("reference", Arity::Required),
        ("resolution", Arity::None),
        ("rfc-2822", Arity::None),
        ("rfc-3339", Arity::Required),
        ("rfc-822", Arity::None),
        ("rfc-email", Arity::None),
        ("set", Arity::Required),
        ("universal", Arity::None),
        ("utc", Arity::None),
        ("version", Arity::None),
    ],
};

/// net-tools `hostname` (the one Debian ships).
const HOSTNAME: OptionSpec = OptionSpec {
    short_required: "F",
    short_optional: "",
    long: &[
        ("alias", Arity::None),
        ("all-fqdns", Arity::None),
        ("all-ip-addresses", Arity::None),
        ("boot", Arity::None),
        ("domain", Arity::None),
        ("file", Arity::Required),
        ("fqdn", Arity::None),
        ("help", Arity::None),
        ("ip-address", Arity::None),
        ("long", Arity::None),
        ("nis", Arity::None),
        ("short", Arity::None),
        ("verbose", Arity::None),
        ("version", Arity::None),
        ("yp", Arity::None),
    ],
};

/// What an allowed command should run with beyond its own arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hardening {
    None,
    /// `sed --sandbox`, where the sed has it: sed itself then refuses
    /// `e`, `r` and `w`, whatever the script parser made of the script.
    SedSandbox,
}

/// Refuses the arguments of `program` that write (unless `allow_writes`)
/// or run another program (always); says how to harden what it allows.
pub(crate) fn guard_arguments(
    program: &str,
    args: &[String],
    allow_writes: bool,
) -> Result<Hardening, CmdRefusal> {
    let g = Guard {
        program,
        allow_writes,
    };
    let allowed = match program {
        "sed" => return g.sed(args),
        "find" => g.find(args),
        "sort" => g.sort(args),
        "uniq" => g.uniq(args),
        "date" => g.date(args),
        "hostname" => g.hostname(args),
        "install" => g.long_prefix_runs(args, "strip-program", "strip-", "runs the given program"),
        "split" => g.long_prefix_runs(args, "filter", "f", "runs a shell command per chunk"),
        _ => Ok(()),
    };
    allowed.map(|()| Hardening::None)
}

struct Guard<'a> {
    program: &'a str,
    allow_writes: bool,
}

impl Guard<'_> {
    fn write(&self, option: impl Into<String>, why: &'static str) -> Result<(), CmdRefusal> {
        if self.allow_writes {
            return Ok(());
        }
        Err(CmdRefusal::WriteGuard {
            program: self.program.to_string(),
            option: option.into(),
            why,
        })
    }

    fn never(&self, option: impl Into<String>, why: impl Into<String>) -> CmdRefusal {
        CmdRefusal::NeverAllowed {
            program: self.program.to_string(),
            option: option.into(),
            why: why.into(),
        }
    }

    fn parse(&self, spec: &OptionSpec, args: &[String]) -> Result<Vec<Parsed>, CmdRefusal> {
        parse(spec, args).map_err(|problem| match problem {
            OptionProblem::UnknownLong(option) => CmdRefusal::UnknownOption {
                program: self.program.to_string(),
                option,
                why: "is not one the guard knows".into(),
            },
            OptionProblem::AmbiguousLong { given, candidates } => CmdRefusal::UnknownOption {
                program: self.program.to_string(),
                option: given,
                why: format!("is ambiguous (--{})", candidates.join(", --")),
            },
        })
    }

    fn sed(&self, args: &[String]) -> Result<Hardening, CmdRefusal> {
        let mut scripts = Vec::new();
        let mut operands = Vec::new();
        for parsed in self.parse(&SED, args)? {
            match parsed {
                Parsed::Short { name: 'i', value }
                | Parsed::Long {
                    name: "in-place",
                    value,
                } => {
                    let shown = value
                        .map(|v| format!("-i{v}"))
                        .unwrap_or_else(|| "-i".into());
                    self.write(shown, "edits files in place")?;
                }
                Parsed::Short { name: 'f', .. } | Parsed::Long { name: "file", .. } => {
                    return Err(self.never(
                        "-f",
                        "reads its script from a file the guard cannot inspect (the script \
                         could run programs with `e`)",
                    ));
                }
                Parsed::Short { name: 'e', value }
                | Parsed::Long {
                    name: "expression",
                    value,
                } => {
                    scripts.push(value.unwrap_or_default());
                }
                Parsed::Operand(operand) => operands.push(operand),
                _ => {}
            }
        }
        if scripts.is_empty() {
            // Without -e the first operand is the script; the rest are files.
            scripts.extend(operands.into_iter().take(1));
        }
        let script = scripts.join("\n");
        let effects = inspect_script(&script).map_err(|e| {
            self.never(
                format!("'{script}'"),
                format!(
                    "is a script the guard cannot parse ({e}), so it cannot tell whether it \
                     writes files or runs programs"
                ),
            )
        })?;
        // The script runs under GNU sed's --sandbox wherever sed has it
        // (see `sed::has_sandbox`), which refuses e, r and w; so they are
        // refused here too, everywhere, and the parser never decides
        // whether the sandbox applies. Writes stay possible through -i.
        if let Some(effect) = effects.into_iter().next() {
            let (command, why) = match effect {
                SedEffect::Runs(command) => (command, "runs a program through the shell"),
                SedEffect::Writes(command) => (
                    command,
                    "writes a file named in the script; with writes allowed, edit in place \
                     with -i, or use files_write",
                ),
                SedEffect::Reads(command) => (
                    command,
                    "reads a file named in the script; read files with cat or files_read",
                ),
            };
            return Err(self.never(format!("script command `{command}`"), why));
        }
        Ok(Hardening::SedSandbox)
    }

    /// find's primaries are whole words. Every argument is checked, even one
    /// that is the value of `-name`: refusing `find -name -delete` costs
    /// little, parsing find's expression grammar wrongly could cost a lot.
    fn find(&self, args: &[String]) -> Result<(), CmdRefusal> {
        for arg in args {
            match arg.as_str() {
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    return Err(self.never(arg.as_str(), "runs another program"));
                }
                "-delete" => self.write(arg.as_str(), "deletes files")?,
                "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                    self.write(arg.as_str(), "writes its output to a file")?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn sort(&self, args: &[String]) -> Result<(), CmdRefusal> {
        for parsed in self.parse(&SORT, args)? {
            match parsed {
                Parsed::Short { name: 'o', .. } => {
                    self.write("-o", "writes its output to a file")?
                }
                Parsed::Long { name: "output", .. } => {
                    self.write("--output", "writes its output to a file")?
                }
                Parsed::Long {
                    name: "compress-program",
                    ..
                } => return Err(self.never("--compress-program", "runs the given program")),
                _ => {}
            }
        }
        Ok(())
    }

    /// `uniq [INPUT [OUTPUT]]`: a second operand is a file to write
    /// (`-` is standard output and harmless).
    fn uniq(&self, args: &[String]) -> Result<(), CmdRefusal> {
        // `+N` is GNU uniq's old spelling of `-s N` (with POSIXLY_CORRECT
        // unset, which the checker sees to), not a file: counted as the
        // input, it hid the output file behind it (`uniq +0 - FILE`
        // emptied FILE). Every file after the input is refused, not only
        // the second operand: which one uniq writes is then never guessed.
        let is_old_skip = |o: &str| {
            o.strip_prefix('+')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        let files: Vec<String> = self
            .parse(&UNIQ, args)?
            .into_iter()
            .filter_map(|p| match p {
                Parsed::Operand(o) if !is_old_skip(&o) => Some(o),
                _ => None,
            })
            .collect();
        match files.iter().skip(1).find(|f| *f != "-") {
            Some(output) => self.write(output.clone(), "is an output file uniq would write"),
            None => Ok(()),
        }
    }

    /// `date -s STRING` and `date MMDDhhmm…` set the clock; `date +FORMAT` prints.
    fn date(&self, args: &[String]) -> Result<(), CmdRefusal> {
        for parsed in self.parse(&DATE, args)? {
            match parsed {
                Parsed::Short { name: 's', .. } => self.write("-s", "sets the system clock")?,
                Parsed::Long { name: "set", .. } => self.write("--set", "sets the system clock")?,
                Parsed::Operand(o) if !o.starts_with('+') => {
                    self.write(o, "is a date operand, which sets the system clock")?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `hostname NAME`, `-F FILE` and `-b` set the host name.
    fn hostname(&self, args: &[String]) -> Result<(), CmdRefusal> {
        for parsed in self.parse(&HOSTNAME, args)? {
            match parsed {
                Parsed::Short { name: 'F', .. } | Parsed::Long { name: "file", .. } => {
                    self.write("-F", "sets the host name from a file")?
                }
                Parsed::Short { name: 'b', .. } | Parsed::Long { name: "boot", .. } => {
                    self.write("-b", "sets the host name")?
                }
                Parsed::Operand(o) => self.write(o, "is a new host name, which sets it")?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Refuses `--NAME` and every abbreviation of it at least as long as
    /// `--{shortest}` (the shortest prefix the program accepts for it).
    fn long_prefix_runs(
        &self,
        args: &[String],
        name: &str,
        shortest: &str,
        why: &str,
    ) -> Result<(), CmdRefusal> {
        for arg in args.iter().take_while(|a| *a != "--") {
            let Some(long) = arg.strip_prefix("--") else {
                continue;
            };
            let given = long.split_once('=').map_or(long, |(n, _)| n);
            if given.len() >= shortest.len() && name.starts_with(given) {
                return Err(self.never(arg.as_str(), why));
            }
        }
        Ok(())
    }
}
