//! Finds the line and column of a path (`phases[2]`, `node.env.FOO`) in a
//! YAML text, for problems found after deserialization.

use yaml_rust2::parser::{Event, Parser};

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `a.b[2][0].c` into keys and indices. Only a trailing `[digits]` is an
/// index: keys may hold any other character (the fuzzer found `]` in one).
fn segments(path: &str) -> Vec<Seg> {
    let mut out = vec![];
    for part in path.split('.') {
        let mut rest = part;
        let mut indices = vec![];
        while let Some(body) = rest.strip_suffix(']') {
            let Some(open) = body.rfind('[') else { break };
            let Ok(i) = body[open + 1..].parse::<usize>() else {
                break;
            };
            indices.push(Seg::Index(i));
            rest = &body[..open];
        }
        if !rest.is_empty() {
            out.push(Seg::Key(rest.to_string()));
        }
        out.extend(indices.into_iter().rev());
    }
    out
}

enum Frame {
    Map {
        key: Option<(String, (usize, usize))>,
    },
    Seq {
        next: usize,
    },
}

/// The 1-based (line, column) where the value at `path` is written (for a
/// map entry, where its key is), or `None` if the path is not in the text.
pub fn position(text: &str, path: &str) -> Option<(usize, usize)> {
    let want = segments(path);
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = vec![];
    let mut cur: Vec<Seg> = vec![];
    loop {
        let (event, mark) = parser.next_token().ok()?;
        let here = (mark.line(), mark.col() + 1);
        let starts_node = matches!(
            event,
            Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(_)
        );
        if starts_node {
            // Is this node a key of its parent map?
            if let Some(Frame::Map { key }) = stack.last_mut() {
                if key.is_none() {
                    if let Event::Scalar(k, ..) = &event {
                        *key = Some((k.clone(), here));
                        continue;
                    }
                }
            }
            // Otherwise it is a value: name its path.
            let (seg, at) = match stack.last_mut() {
                Some(Frame::Map { key }) => {
                    let (k, at) = key.take().unwrap_or_default();
                    (Some(Seg::Key(k)), at)
                }
                Some(Frame::Seq { next }) => {
                    *next += 1;
                    (Some(Seg::Index(*next - 1)), here)
                }
                None => (None, here),
            };
            if let Some(s) = seg.clone() {
                cur.push(s);
            }
            if cur == want {
                // A map in a list: point at its first key, where people look.
                if matches!(event, Event::MappingStart(..)) && matches!(seg, Some(Seg::Index(_))) {
                    if let Ok((_, m)) = parser.next_token() {
                        return Some((m.line(), m.col() + 1));
                    }
                }
                return Some(at);
            }
            match event {
                Event::MappingStart(..) => stack.push(Frame::Map { key: None }),
                Event::SequenceStart(..) => stack.push(Frame::Seq { next: 0 }),
                _ => {
                    if seg.is_some() {
                        cur.pop();
                    }
                }
            }
        } else {
            match event {
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    if !stack.is_empty() {
                        cur.pop();
                    }
                }
                Event::StreamEnd => return None,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name: x\nnode:\n  command: [a, b]\n  env:\n    FOO: bar\nphases:\n  - run: 1s\n  - start\n  - kill: SIGKILL\n";

    #[test]
    fn finds_paths() {
        assert_eq!(position(DOC, "name"), Some((1, 1)));
        assert_eq!(position(DOC, "node.command[1]"), Some((3, 16)));
        assert_eq!(position(DOC, "node.env.FOO"), Some((5, 5)));
        assert_eq!(position(DOC, "phases[1]"), Some((8, 5)));
        assert_eq!(position(DOC, "phases[2]"), Some((9, 5)));
        assert_eq!(position(DOC, "node.missing"), None);
    }

    #[test]
    fn odd_keys_are_keys() {
        // Found by the fuzzer: a key with a `]` before any `[` panicked.
        assert_eq!(
            segments("]ssco 1:uld[x]"),
            vec![Seg::Key("]ssco 1:uld[x]".into())]
        );
        assert_eq!(
            segments("a[1][2].b"),
            vec![
                Seg::Key("a".into()),
                Seg::Index(1),
                Seg::Index(2),
                Seg::Key("b".into())
            ]
        );
        assert_eq!(position("x]: 1\n", "x]"), Some((1, 1)));
    }
}
