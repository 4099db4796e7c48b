//! Keeps `docs/contract.md` honest against the code: every case is cited by a rule, every cited
//! case exists where its link says, every `§` citation in the workspace's Rust code resolves to
//! a heading (or rule) of the document, every link finds its file and every link into
//! `docs/decisions.md` its section, every rule is either proven or listed as not yet proven,
//! and the generated lists at the end (unproven rules, rules proven only outside the suite, the
//! case index) match the rules above them.
//!
//! Reads files only; no backend runs. `cargo test -p brokertest --test contract_doc`. The
//! generated lists are rewritten by `ci/contract_index.py` after a rule or case is added.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The marker a rule carries when no test proves it.
const UNPROVEN: &str = "*Not yet proven by a case.*";
/// The heading of the list of unproven rules.
const UNPROVEN_HEADING: &str = "## Not yet proven by a case";
/// The heading of the list of rules proven only by backend-specific or unit tests.
const OUTSIDE_HEADING: &str = "### Proven only outside the shared suite";
/// The heading of the case index.
const INDEX_HEADING: &str = "## Case index";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("brokertest lives in the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn doc() -> String {
    read(&root().join("docs/contract.md"))
}

/// The part of the document above the generated lists.
fn body(doc: &str) -> &str {
    doc.find(&format!("\n{UNPROVEN_HEADING}\n")).map_or(doc, |at| &doc[..at])
}

/// A section or rule number after `§` at the start of `s` (`E3`, `7.4`, `3.4.12`), without
/// trailing punctuation.
fn section_id(s: &str) -> Option<String> {
    let mut id = String::new();
    let mut chars = s.chars().peekable();
    if chars.peek() == Some(&'E') {
        id.push('E');
        chars.next();
    }
    loop {
        let digits: String = std::iter::from_fn(|| chars.next_if(char::is_ascii_digit)).collect();
        if digits.is_empty() {
            break;
        }
        id.push_str(&digits);
        // A dot continues the number only when a digit follows it.
        let mut ahead = chars.clone();
        if ahead.next() == Some('.') && ahead.peek().is_some_and(char::is_ascii_digit) {
            chars.next();
            id.push('.');
        } else {
            break;
        }
    }
    (id.len() > usize::from(id.starts_with('E'))).then_some(id)
}

/// Every section number cited with `§` in `text` (a range `§E3–E5` cites both ends).
fn citations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('§') {
        let rest = &text[at + '§'.len_utf8()..];
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        if let Some(id) = section_id(rest) {
            let after = &rest[id.len()..];
            if let Some(end) = after.strip_prefix('–').and_then(section_id) {
                out.push(end);
            }
            out.push(id);
        }
    }
    out
}

/// A numbered heading: its level and number.
fn heading_id(line: &str) -> Option<String> {
    let text = line.trim_start_matches('#');
    if text.len() == line.len() || !text.starts_with(" §") {
        return None;
    }
    section_id(&text[" §".len()..])
}

/// One numbered rule: its number, its text with whitespace collapsed, and the number of the
/// heading it sits under.
#[derive(Debug)]
struct Rule {
    id: String,
    text: String,
    section: String,
}

fn rules(body: &str) -> Vec<Rule> {
    let mut out: Vec<Rule> = Vec::new();
    let mut section = String::new();
    let mut open = false;
    for line in body.lines() {
        if let Some(id) = heading_id(line) {
            section = id;
            open = false;
        } else if let Some(rest) = line.strip_prefix("- **§") {
            let id = section_id(rest).unwrap_or_else(|| panic!("a rule without a number: {line}"));
            let text = rest[id.len()..].trim_start_matches("**").to_string();
            out.push(Rule { id, text, section: section.clone() });
            open = true;
        } else if open && line.starts_with("  ") {
            let rule = out.last_mut().expect("an open rule");
            rule.text.push(' ');
            rule.text.push_str(line.trim());
        } else {
            open = false;
        }
    }
    for rule in &mut out {
        rule.text = rule.text.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    out
}

/// Names of cases and scenarios cited as reference links (`[c07_lease_reap]`) in `text`.
fn cited_cases(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('[') {
        let rest = &text[at + 1..];
        let Some(end) = rest.find(']') else { continue };
        let name = &rest[..end];
        let follows = rest[end + 1..].chars().next();
        if is_case_name(name) && !matches!(follows, Some('(' | ':' | '[')) {
            out.push(name.to_string());
        }
    }
    out
}

fn is_case_name(name: &str) -> bool {
    let (prefix, tail) = match name.split_once('_') {
        Some(split) => split,
        None => return false,
    };
    let digits = match prefix.chars().next() {
        Some('c' | 'w') => 2,
        Some('q') => 1,
        _ => return false,
    };
    prefix.len() == digits + 1
        && prefix[1..].chars().all(|c| c.is_ascii_digit())
        && !tail.is_empty()
        && tail.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether a rule is proven by the shared suite (a case, a scenario, the model, the history
/// checker, the forced races, or every case).
fn proven_by_suite(rule: &Rule) -> bool {
    !cited_cases(&rule.text).is_empty()
        || ["[model]", "[history]", "[races]", "every case"].iter().any(|s| rule.text.contains(s))
}

/// The broker cases (from the suite itself) followed by the worker scenarios (from
/// `workertest`'s list, read as text: `workertest` depends on this crate).
fn all_cases() -> Vec<String> {
    let mut out: Vec<String> = brokertest::CASES.iter().map(|c| c.name.to_string()).collect();
    let list = read(&root().join("workertest/src/lib.rs"));
    let scenarios: Vec<String> = list
        .lines()
        .filter_map(|l| l.trim().strip_suffix(','))
        .filter(|name| name.starts_with('w') && is_case_name(name))
        .map(str::to_string)
        .collect();
    assert!(
        scenarios.len() >= 40,
        "found only {} scenarios in workertest/src/lib.rs",
        scenarios.len()
    );
    out.extend(scenarios);
    out
}

/// Reference definitions `[name]: path` of the document.
fn definitions(doc: &str) -> BTreeMap<String, String> {
    doc.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (name, path) = rest.split_once("]: ")?;
            Some((name.to_string(), path.trim().to_string()))
        })
        .collect()
}

/// Targets of inline links `](target)` in `text`.
fn inline_links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| rest[..end].to_string())
        })
        .collect()
}

/// GitHub's anchor for a heading text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// `.rs` files of the workspace (no build output, no VCS data).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The bullet items (`- §3.3.10 — …`) of the list under `heading`, up to the next heading.
fn listed(doc: &str, heading: &str) -> Vec<String> {
    let start =
        doc.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no `{heading}` section"));
    doc[start + heading.len() + 2..]
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("- §").and_then(section_id))
        .collect()
}

#[test]
fn every_rule_is_numbered_in_its_section_and_proven_or_listed() {
    let doc = doc();
    let rules = rules(body(&doc));
    assert!(rules.len() > 100, "found only {} rules", rules.len());
    let mut seen = BTreeSet::new();
    let mut next: BTreeMap<String, u32> = BTreeMap::new();
    for rule in &rules {
        assert!(seen.insert(rule.id.clone()), "§{} is numbered twice", rule.id);
        let (section, n) = rule.id.rsplit_once('.').expect("a rule number has a dot");
        assert_eq!(section, rule.section, "§{} sits under heading §{}", rule.id, rule.section);
        let expected = next.entry(section.to_string()).or_insert(1);
        assert_eq!(
            n.parse::<u32>().ok(),
            Some(*expected),
            "§{} should be §{section}.{expected}",
            rule.id
        );
        *expected += 1;
        if let Some(at) = rule.text.find("Decided:") {
            assert!(
                rule.text[at..].contains("](decisions.md#"),
                "§{}: `Decided:` must link the section of docs/decisions.md that records it",
                rule.id
            );
        }
        let proven = rule.text.contains("Proven by:");
        let unproven = rule.text.contains(UNPROVEN);
        assert!(
            proven != unproven,
            "§{} needs exactly one of `Proven by:` and `{UNPROVEN}`",
            rule.id
        );
    }

    let marked: Vec<String> =
        rules.iter().filter(|r| r.text.contains(UNPROVEN)).map(|r| r.id.clone()).collect();
    assert_eq!(listed(&doc, UNPROVEN_HEADING), marked, "the `{UNPROVEN_HEADING}` list");
    let outside: Vec<String> = rules
        .iter()
        .filter(|r| r.text.contains("Proven by:") && !proven_by_suite(r))
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(listed(&doc, OUTSIDE_HEADING), outside, "the `{OUTSIDE_HEADING}` list");
}

#[test]
fn every_case_is_cited_and_every_cited_case_exists_where_its_link_says() {
    let doc = doc();
    let all = all_cases();
    let known: BTreeSet<&str> = all.iter().map(String::as_str).collect();
    let rules = rules(body(&doc));
    let mut citing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rule in &rules {
        for case in cited_cases(&rule.text) {
            let ids = citing.entry(case).or_default();
            if !ids.contains(&rule.id) {
                ids.push(rule.id.clone());
            }
        }
    }
    let uncited: Vec<&String> = all.iter().filter(|c| !citing.contains_key(*c)).collect();
    assert!(uncited.is_empty(), "cases no rule cites: {uncited:?}");
    let unknown: Vec<String> =
        cited_cases(&doc).into_iter().filter(|c| !known.contains(c.as_str())).collect();
    assert!(unknown.is_empty(), "cited cases that are not in the case lists: {unknown:?}");

    let defs = definitions(&doc);
    let docs_dir = root().join("docs");
    for case in &all {
        let path = defs.get(case).unwrap_or_else(|| panic!("no link definition `[{case}]: …`"));
        let source = read(&docs_dir.join(path));
        assert!(source.contains(&format!("pub async fn {case}(")), "{path} does not define {case}");
    }

    let index = &doc[doc.find(&format!("\n{INDEX_HEADING}\n")).expect("a case index")..];
    let rows: Vec<(String, String)> = index
        .lines()
        .filter_map(|l| l.strip_prefix("| ["))
        .filter_map(|l| l.split_once("] | "))
        .map(|(name, rest)| {
            (name.to_string(), rest.trim_end_matches(" |").trim_end_matches('|').trim().to_string())
        })
        .collect();
    let names: Vec<&String> = rows.iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        all.iter().collect::<Vec<_>>(),
        "the case index lists every case in suite order"
    );
    for (name, listed_rules) in &rows {
        let expected =
            citing[name].iter().map(|id| format!("§{id}")).collect::<Vec<_>>().join(", ");
        assert_eq!(
            listed_rules, &expected,
            "index row of {name}; expected `| [{name}] | {expected} |`"
        );
    }
}

#[test]
fn every_section_citation_in_the_code_and_the_doc_resolves() {
    let doc = doc();
    let mut ids: BTreeSet<String> = doc.lines().filter_map(heading_id).collect();
    ids.extend(rules(body(&doc)).into_iter().map(|r| r.id));

    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let mut unresolved = Vec::new();
    let mut cited = 0;
    for file in &files {
        let text = read(file);
        for (n, line) in text.lines().enumerate() {
            for id in citations(line) {
                cited += 1;
                if !ids.contains(&id) {
                    let at = file.strip_prefix(root()).unwrap_or(file).display().to_string();
                    unresolved.push(format!("{at}:{}: §{id}", n + 1));
                }
            }
        }
    }
    assert!(cited > 100, "found only {cited} § citations in the code");
    assert!(
        unresolved.is_empty(),
        "§ citations with no heading in docs/contract.md:\n{}",
        unresolved.join("\n")
    );

    let dangling: Vec<String> =
        citations(&doc).into_iter().filter(|id| !ids.contains(id)).collect();
    assert!(dangling.is_empty(), "docs/contract.md cites sections it does not have: {dangling:?}");
}

#[test]
fn every_link_finds_its_file_and_anchor() {
    let doc = doc();
    let docs_dir = root().join("docs");
    let own = anchors(&doc);
    let decisions = anchors(&read(&docs_dir.join("decisions.md")));
    let targets = inline_links(&doc).into_iter().chain(definitions(&doc).into_values());
    let mut broken = Vec::new();
    for target in targets {
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let anchors = match path {
            "" => Some(&own),
            "decisions.md" => Some(&decisions),
            _ => None,
        };
        if !path.is_empty() && !docs_dir.join(path).exists() {
            broken.push(format!("{target}: no such file"));
        } else if !anchor.is_empty() && !anchors.is_some_and(|a| a.contains(anchor)) {
            broken.push(format!("{target}: no such heading"));
        }
    }
    assert!(broken.is_empty(), "broken links in docs/contract.md:\n{}", broken.join("\n"));
}

#[test]
fn the_parsers_read_what_the_document_writes() {
    assert_eq!(citations("contract §7.4, extensions §E3–E5 and § 12."), ["7.4", "E5", "E3", "12"]);
    assert_eq!(section_id("3.4.12** x"), Some("3.4.12".into()));
    assert_eq!(section_id("Ever"), None);
    assert_eq!(heading_id("### §11.2 The shared core"), Some("11.2".into()));
    assert_eq!(slug("Retention (`prune`, §E16)"), "retention-prune-e16");
    assert_eq!(
        cited_cases("by: [c07_lease_reap], [q1_quota_hard_limit]. [c01_x](y) [w01_a]: z"),
        ["c07_lease_reap", "q1_quota_hard_limit"]
    );
}
