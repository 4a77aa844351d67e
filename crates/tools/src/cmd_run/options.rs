//! A model of GNU `getopt_long`, so the write guard sees options the way the
//! program will: combined short options (`-ni`), attached arguments (`-ofile`,
//! `-i.bak`), `--opt=value`, `--opt value`, unique abbreviations (`--in-pl`),
//! options after operands (GNU permutes) and `--`.
//!
//! Where the model could be wrong it errs towards seeing *more* options: an
//! unknown short option is taken as a flag, so the rest of its cluster is
//! still inspected; an unknown or ambiguous long option is reported, and the
//! guard refuses the command rather than guessing its arity.

/// Whether an option takes an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    None,
    Required,
    /// Only attached: `-i.bak`, `--in-place=.bak`.
    Optional,
}

/// One program's option table.
pub struct OptionSpec {
    /// Short options that take an argument.
    pub short_required: &'static str,
    /// Short options whose argument may only be attached.
    pub short_optional: &'static str,
    /// Every long option the program accepts, with its arity.
    pub long: &'static [(&'static str, Arity)],
}

/// What the parser saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// `-x` (as written in the cluster, e.g. `-ni` yields `n` then `i`).
    Short {
        name: char,
        value: Option<String>,
    },
    /// The full long name the (possibly abbreviated) option resolved to.
    Long {
        name: &'static str,
        value: Option<String>,
    },
    Operand(String),
}

/// An option the model cannot place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionProblem {
    UnknownLong(String),
    AmbiguousLong {
        given: String,
        candidates: Vec<&'static str>,
    },
}

/// Parses `args` (without the program name) against `spec`.
pub fn parse(spec: &OptionSpec, args: &[String]) -> Result<Vec<Parsed>, OptionProblem> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            out.extend(iter.by_ref().map(|a| Parsed::Operand(a.clone())));
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (given, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let (name, arity) = resolve_long(spec, given)?;
            let value = match (arity, attached) {
                (_, Some(v)) => Some(v),
                (Arity::Required, None) => iter.next().cloned(),
                _ => None,
            };
            out.push(Parsed::Long { name, value });
        } else if arg.len() > 1 && arg.starts_with('-') {
            let cluster: Vec<char> = arg.chars().skip(1).collect();
            let mut i = 0;
            while i < cluster.len() {
                let name = cluster[i];
                let rest: String = cluster[i + 1..].iter().collect();
                if spec.short_required.contains(name) {
                    let value = if rest.is_empty() {
                        iter.next().cloned()
                    } else {
                        Some(rest)
                    };
                    out.push(Parsed::Short { name, value });
                    break;
                }
                if spec.short_optional.contains(name) {
                    let value = (!rest.is_empty()).then_some(rest);
                    out.push(Parsed::Short { name, value });
                    break;
                }
                out.push(Parsed::Short { name, value: None });
                i += 1;
            }
        } else {
            out.push(Parsed::Operand(arg.clone()));
        }
    }
    Ok(out)
}

/// An exact match wins; otherwise a prefix must match exactly one option.
fn resolve_long(spec: &OptionSpec, given: &str) -> Result<(&'static str, Arity), OptionProblem> {
    if let Some(&(name, arity)) = spec.long.iter().find(|(n, _)| *n == given) {
        return Ok((name, arity));
    }
    let candidates: Vec<(&'static str, Arity)> = spec
        .long
        .iter()
        .filter(|(n, _)| !given.is_empty() && n.starts_with(given))
        .copied()
        .collect();
    match candidates.as_slice() {
        [] => Err(OptionProblem::UnknownLong(format!("--{given}"))),
        [one] => Ok(*one),
        many => Err(OptionProblem::AmbiguousLong {
            given: format!("--{given}"),
            candidates: many.iter().map(|(n, _)| *n).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SPEC: OptionSpec = OptionSpec {
        short_required: "e",
        short_optional: "i",
        long: &[
            ("in-place", Arity::Optional),
            ("expression", Arity::Required),
            ("silent", Arity::None),
            ("separate", Arity::None),
        ],
    };

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn clusters_attached_values_abbreviations_and_permutation() {
        let parsed = parse(
            &SPEC,
            &strings(&["f1", "-ni.bak", "-es", "--in-pl", "--expr", "x", "--", "-i"]),
        )
        .unwrap();
        assert_eq!(
            parsed,
            vec![
                Parsed::Operand("f1".into()),
                Parsed::Short {
                    name: 'n',
                    value: None
                },
                Parsed::Short {
                    name: 'i',
                    value: Some(".bak".into())
                },
                Parsed::Short {
                    name: 'e',
                    value: Some("s".into())
                },
                Parsed::Long {
                    name: "in-place",
                    value: None
                },
                Parsed::Long {
                    name: "expression",
                    value: Some("x".into())
                },
                Parsed::Operand("-i".into()),
            ]
        );
    }

    #[test]
    fn unknown_and_ambiguous_long_options_are_reported() {
        assert_eq!(
            parse(&SPEC, &strings(&["--bogus"])),
            Err(OptionProblem::UnknownLong("--bogus".into()))
        );
        assert_eq!(
            parse(&SPEC, &strings(&["--s"])),
            Err(OptionProblem::AmbiguousLong {
                given: "--s".into(),
                candidates: vec!["silent", "separate"]
            })
        );
    }
}
