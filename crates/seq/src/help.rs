//! The guide `seq_help` returns. Its example is parsed, created and run by
//! the tests, so it cannot drift from the format.

/// The line before the complete example.
pub const EXAMPLE_MARKER: &str = "Complete example (copy it as is):";

/// The format guide.
pub const GUIDE: &str = r##"Tool sequences: save a multi-step procedure once (seq_create), run it by name (seq_run).

A sequence: {"name": "...", "description": "...", "groups": [ group, ... ]}. Groups run in array order.
A group (unknown fields are errors):
- name: unique in the sequence (seq_call targets it)
- description: free text
- in: an object {"key": "type"} of the $args the group reads; no inputs = {}; checked when the
  group starts ("3" passes for integer, "true" for boolean, null for any type)
- out: an object {"slot": "type"} of the slots its calls write; no outputs = {}
  types: string, integer, number, boolean, object, array, array<T>
- when: a condition (default "true"); false skips the group (no calls, no slots)
- parallel: true (default) runs the calls concurrently; every tool must be parallel-safe
- unsafe_serial: true is required with "parallel": false when a tool is not parallel-safe
- missing: fail (default) | skip | degrade (the slot gets the call's "fallback")
- timeout: "30s" (default), also "500ms", "2m", "1h"
- on_error: abort (default) | continue | retry (with "retries": 1..10, backoff between tries)
- tools: a STRING of JSON objects, each followed by ";" (the last one too):
  "{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"$args.host\"},\"as\":\"echo\"} ;"
  tool fields: tool (name), args (object), as (an out slot), fallback (any JSON, for degrade)

Rules checked at create time: `as` must name an `out` slot; every $args.K must be declared in `in`;
a slot written by several calls must be an array (values append in declaration order); a group of
several calls with a tool that is not parallel-safe needs "parallel": false and "unsafe_serial": true;
seq_call targets a group of the same sequence or "#OtherSequence"; output_send__*, spawn_child,
seq_run, seq_create, seq_delete and tool reloads may not run inside a sequence.

$args: the run's args overlaid with the slots written by earlier groups. A string that is exactly
"$args.K" becomes K's value with its type (3 stays 3); inside longer text it is interpolated.
A reference goes on into objects and arrays as in conditions ($args.r.count, $args.items.0.name).

Conditions: literals ("text", 'text', 3, 2.5, true, false, null), $args.key, field access
($args.result.count, $args.items.0.name), == != > < >= <= contains, && || ! and parentheses.
An unknown reference or a comparison that makes no sense is an error, never false.
== reads a string as a number or boolean only against one ("3" == 3, "true" == true), as tool arguments are read;
two strings compare as text ("1.10" != "1.1"). false, null, 0, "", "false", [] and {} are false.

seq_call {target, sequence?, args?}: target = a group name (from outside a sequence, `sequence` names
which one) or "#Name" to run a whole sequence. seq_when_call adds `when`, checked on `args` first.
Nested sequence calls may go 4 levels deep (a run is one level, each seq_call entry one more); a sequence
that would make a deeper chain, or calls that would form a cycle (between sequences, or between groups of
one), are refused, so a seq_call target is written out ("group" or "#Name"), never computed from $args.
seq_create takes the groups as `groups` or, as `file`, a file in the sequence sources directory
(<data dir>/sequence-sources; the sequences directory is the store) (exactly one).

Complete example (copy it as is):
{"name":"host_report","description":"Echo a host twice in parallel, then note the facts when verbose","groups":[{"name":"gather","in":{"host":"string"},"out":{"facts":"array<object>"},"tools":"{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"uptime on $args.host\"},\"as\":\"facts\"} ; {\"tool\":\"demo_sleep\",\"args\":{\"ms\":10,\"tag\":\"$args.host\"},\"as\":\"facts\"} ;"},{"name":"note","in":{"facts":"array<object>","verbose":"boolean"},"out":{"count":"object"},"when":"$args.verbose == true","tools":"{\"tool\":\"demo_note\",\"args\":{\"text\":\"facts: $args.facts\"},\"as\":\"count\"} ;"}]}
Run it with: seq_run {"name":"host_report","args":{"host":"nas","verbose":true}}
"##;

/// The example line of [`GUIDE`].
pub fn example() -> Option<&'static str> {
    let mut lines = GUIDE.lines();
    lines.find(|l| *l == EXAMPLE_MARKER)?;
    lines.next()
}
