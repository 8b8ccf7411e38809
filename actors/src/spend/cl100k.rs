//! A compact cl100k token counter: the same counts as tiktoken's `encode_ordinary`, in about
//! 2 MiB instead of the ~32 MiB an in-memory BPE encoder takes.
//!
//! How it counts (tiktoken's rule, re-implemented): the text is split into pieces by cl100k's
//! pattern; a piece that is a token is one token; any other piece starts as single bytes (every
//! byte is a cl100k token) and the adjacent pair whose joined bytes have the lowest rank is merged,
//! leftmost first, until no adjacent pair is a token. The piece's count is the parts left.
//!
//! The merge keeps the candidate pairs in a binary heap (stale entries are skipped when popped),
//! so a piece of n bytes costs O(n log n): a hostile tool output made of one enormous piece (a
//! megabyte of punctuation) cannot make counting quadratic.
//!
//! The vocabulary is laid out by `actors/build.rs` (ranks from the `bpe-openai` crate, a build
//! dependency only) and embedded in the binary: token bytes in rank order, their offsets, and an
//! open-addressing table from bytes to rank. Nothing is built at run time except the split
//! pattern (a few milliseconds, on first use).
//!
//! Exactness is checked against two independent encoders (`tiktoken-rs` and `bpe-openai`) in the
//! tests below.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::LazyLock;

include!("cl100k_hash.rs");

static OFFSETS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_offsets.bin"));
static BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_bytes.bin"));
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_table.bin"));

/// cl100k's split pattern, as alternatives tried together. Its `\s+(?!\S)` (whitespace not
/// followed by a non-space) has no look-ahead in this regex engine; it is written as `\s+\s`,
/// whose match gives back its last character (the `true` beside it), and `\s+$`.
const SPLIT: [(&str, bool); 3] = [
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+$",
        false,
    ),
    (r"\s+\s", true),
    (r"\s+", false),
];

static SPLITTER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new_many(&SPLIT.map(|(p, _)| p)).expect("cl100k's split pattern is a valid regex"));

fn word(data: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]])
}

fn token(rank: u32) -> &'static [u8] {
    let i = rank as usize;
    &BYTES[word(OFFSETS, i) as usize..word(OFFSETS, i + 1) as usize]
}

/// The rank of the token whose bytes are `bytes`, if there is one.
pub fn rank(bytes: &[u8]) -> Option<u32> {
    let mut slot = slot_of(bytes);
    loop {
        match word(TABLE, slot) {
            0 => return None,
            v if token(v - 1) == bytes => return Some(v - 1),
            _ => slot = (slot + 1) & (TABLE_SLOTS - 1),
        }
    }
}

/// Build the split pattern now rather than in the first count.
pub fn warm_up() {
    LazyLock::force(&SPLITTER);
}

/// The end of the piece that starts at `at` (a character boundary), by the regex.
fn regex_piece_end(text: &str, at: usize) -> usize {
    // The pattern covers every character; should a piece ever not match, the rest of the
    // text is one piece, counted at most one token per byte (never undercounted).
    let mut end = text.len();
    if let Some(m) = SPLITTER.find(Input::new(&text[at..]).anchored(Anchored::Yes)) {
        end = at + m.end();
        if SPLIT[m.pattern().as_usize()].1 {
            end -= text[at..end].chars().next_back().map_or(0, char::len_utf8);
        }
    }
    if end <= at { text.len() } else { end }
}

/// The pieces of `text` by cl100k's split pattern: each one found by hand where it and the
/// bytes that decide it are ASCII (see [`ascii_piece`]), else by the regex.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let t = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= t.len() {
            return None;
        }
        let start = at;
        at = match t[start].is_ascii().then(|| ascii_piece(t, start)) {
            // Where every byte it looked at is ASCII, the classes agree with the regex's and
            // so does the piece.
            Some((end, seen)) if t[start..seen.min(t.len())].is_ascii() => end,
            _ => regex_piece_end(text, start),
        };
        // Both end at a character boundary: after an ASCII byte, or where the regex ended.
        text.get(start..at)
    })
}

/// The pieces by the regex alone (what [`pieces`] is checked against).
#[cfg(test)]
fn regex_pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= text.len() {
            return None;
        }
        let start = at;
        at = regex_piece_end(text, start);
        Some(&text[start..at])
    })
}

/// Whitespace as the split pattern's `\s` has it, on ASCII (Unicode `White_Space`).
fn space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Neither whitespace, a letter nor a digit: the pattern's `[^\s\p{L}\p{N}]` on ASCII.
fn other(b: u8) -> bool {
    !space(b) && !b.is_ascii_alphanumeric()
}

/// The end of the run of bytes from `i` on that `class` accepts.
fn run(t: &[u8], mut i: usize, class: impl Fn(u8) -> bool) -> usize {
    while i < t.len() && class(t[i]) {
        i += 1;
    }
    i
}

/// The piece that starts at `i`, read as ASCII: the split pattern's alternatives tried in
/// order, as the regex tries them, with its classes on ASCII (`\p{L}` the letters, `\p{N}` the
/// digits, `\s` [`space`]). Returns where the piece ends and where the bytes it looked at end
/// (the two after `i`, and the one that ended each run it read): [`pieces`] takes the piece
/// only where those are all ASCII. The tests check it against the regex on random text.
fn ascii_piece(t: &[u8], i: usize) -> (usize, usize) {
    let (c, next) = (t[i], t.get(i + 1).copied());
    // The byte that ended a run is looked at, and the two after `i` may be.
    let seen = |stop: usize| (stop + 1).max(i + 3);
    // `(?i:'s|'t|'re|'ve|'m|'ll|'d)`
    if c == b'\'' {
        let lower = |k: usize| t.get(i + k).map(u8::to_ascii_lowercase);
        match (lower(1), lower(2)) {
            (Some(b's' | b't' | b'm' | b'd'), _) => return (i + 2, seen(i + 2)),
            (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => {
                return (i + 3, seen(i + 2));
            }
            _ => {}
        }
    }
    // `[^\r\n\p{L}\p{N}]?\p{L}+`
    if c.is_ascii_alphabetic() {
        let end = run(t, i, |b| b.is_ascii_alphabetic());
        return (end, seen(end));
    }
    if c != b'\r' && c != b'\n' && !c.is_ascii_digit() && next.is_some_and(|b| b.is_ascii_alphabetic()) {
        let end = run(t, i + 1, |b| b.is_ascii_alphabetic());
        return (end, seen(end));
    }
    // `\p{N}{1,3}`
    if c.is_ascii_digit() {
        let end = run(t, i, |b| b.is_ascii_digit());
        return (end.min(i + 3), seen(end));
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    let punct = if other(c) { Some(i) } else { (c == b' ' && next.is_some_and(other)).then_some(i + 1) };
    if let Some(from) = punct {
        let end = run(t, run(t, from, other), |b| b == b'\r' || b == b'\n');
        return (end, seen(end));
    }
    // What is left starts with whitespace. `\s*[\r\n]+`: up to the run's last line break.
    let end = run(t, i, space);
    if let Some(last) = t[i..end].iter().rposition(|&b| b == b'\r' || b == b'\n') {
        return (i + last + 1, seen(end));
    }
    // `\s+(?!\S)`, then `\s+`: the run, less its last byte when a non-space follows it.
    (if end < t.len() && end - i >= 2 { end - 1 } else { end }, seen(end))
}

/// Scratch space of the merge, reused between pieces.
#[derive(Default)]
struct Merge {
    /// `next[i]`: where the part starting at byte `i` ends (the next part's start).
    next: Vec<u32>,
    /// `prev[i]`: the start of the part before the one starting at `i`.
    prev: Vec<u32>,
    /// `pair[i]`: rank of the part at `i` joined with the next one (`NONE` when not a token).
    pair: Vec<u32>,
    /// Whether the part starting at `i` was merged into the one before it.
    gone: Vec<bool>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

const NONE: u32 = u32::MAX;

impl Merge {
    /// Tokens of a piece that is not itself a token.
    fn count(&mut self, piece: &[u8]) -> u64 {
        let n = piece.len();
        self.next.clear();
        self.next.extend(1..=n as u32);
        self.prev.clear();
        self.prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        self.gone.clear();
        self.gone.resize(n, false);
        self.pair.clear();
        self.heap.clear();
        for i in 0..n {
            let r = if i + 1 < n { rank(&piece[i..i + 2]).unwrap_or(NONE) } else { NONE };
            self.pair.push(r);
            if r != NONE {
                self.heap.push(Reverse((r, i as u32)));
            }
        }
        let mut parts = n as u64;
        while let Some(Reverse((r, i))) = self.heap.pop() {
            let i = i as usize;
            if self.gone[i] || self.pair[i] != r {
                continue;
            }
            // Merge the part at `i` with the next one.
            let j = self.next[i] as usize;
            self.gone[j] = true;
            self.next[i] = self.next[j];
            let after = self.next[i] as usize;
            if after < n {
                self.prev[after] = i as u32;
            }
            parts -= 1;
            self.pair[i] = self.joined(piece, i);
            if i > 0 {
                let p = self.prev[i] as usize;
                self.pair[p] = self.joined(piece, p);
            }
        }
        parts
    }

    /// Rank of the part at `i` joined with its next part; pushes it as a candidate.
    fn joined(&mut self, piece: &[u8], i: usize) -> u32 {
        let j = self.next[i] as usize;
        if j >= piece.len() {
            return NONE;
        }
        let end = self.next[j] as usize;
        let r = rank(&piece[i..end]).unwrap_or(NONE);
        if r != NONE {
            self.heap.push(Reverse((r, i as u32)));
        }
        r
    }
}

thread_local! {
    static SCRATCH: RefCell<Merge> = RefCell::new(Merge::default());
}

/// The cl100k count of `text` (tiktoken's `encode_ordinary(text).len()`).
pub fn count(text: &str) -> u64 {
    SCRATCH.with(|m| {
        let mut m = m.borrow_mut();
        pieces(text)
            .map(|p| {
                let b = p.as_bytes();
                if b.len() == 1 || rank(b).is_some() { 1 } else { m.count(b) }
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> u64 {
        tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64
    }

    /// `len` characters of `alphabet`, chosen by the xorshift state `x`.
    fn random_text(x: &mut u64, alphabet: &[char], len: usize) -> String {
        (0..len)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                alphabet[(*x % alphabet.len() as u64) as usize]
            })
            .collect()
    }

    #[test]
    fn every_rank_is_found_by_its_bytes() {
        let n = OFFSETS.len() / 4 - 1;
        assert_eq!(n, 100_256, "cl100k has 100,256 ordinary tokens");
        for r in 0..n as u32 {
            assert_eq!(rank(token(r)), Some(r), "token {r}");
        }
        assert_eq!(rank(b"no such token in cl100k at all, surely"), None);
    }

    #[test]
    fn counts_equal_tiktoken_on_text_code_json_and_scripts() {
        let samples = [
            "",
            " ",
            "hello world",
            "Hello, World! It's 2026; we'll see what they've done.",
            "fn main() {\n    println!(\"{x}\");\n}\n\n\n   \t trailing   ",
            "{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"naïve café 日本語 — ok\"}]}",
            "1234567890 12 3.14159 0x1F 1e-9",
            "   leading spaces\r\n\r\nwindows\rlines  \n  ",
            "🦀🦀 emoji 👩‍👩‍👧 and Ω≈ç√∫˜µ≤≥÷ and Ελληνικά and العربية",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!??????????////////////\\\\\\\\",
            "Supercalifragilisticexpialidocious antidisestablishmentarianism",
            "src/actors/spend/cl100k.rs:42:7: warning: unused variable `x`",
            "'S 'T 'RE 'Ve 'm 'LL 'd",
        ];
        for s in samples {
            assert_eq!(count(s), reference(s), "{s:?}");
        }
    }

    #[test]
    fn counts_equal_tiktoken_on_random_text() {
        let alphabet: Vec<char> =
            "abcXYZ019 \n\r\t'.,;:!?-_/\\{}[]\"éß日本€🦀\u{a0}\u{2003}sStTreREvem ll d".chars().collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..400 {
            let text = random_text(&mut x, &alphabet, 1 + (round * 7) % 300);
            assert_eq!(count(&text), reference(&text), "{text:?}");
        }
    }

    #[test]
    fn text_splits_as_the_regex_splits_it_by_hand_or_not() {
        // Every class the pattern tells apart in ASCII, the contractions in both cases, the
        // ASCII that is not `\s` (0x1c-0x1f) beside what is; and non-ASCII letters, digits,
        // spaces (NBSP, EM SPACE, NEL), marks and symbols next to them, where the hand-found
        // piece must give way to the regex.
        let ascii: Vec<char> =
            "aZqsStTrReEvVmMlLdD0179 \t\n\r\x0b\x0c\x1c\x1f\x00\x7f'!.,;{}[]\"\\/_-".chars().collect();
        let mixed: Vec<char> = "aZsSrRe0 \n\r\t'!.é日ß٣\u{a0}\u{2003}\u{85}\u{301}€🦀".chars().collect();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..40_000 {
            let alphabet = if round % 2 == 0 { &ascii } else { &mixed };
            let text = random_text(&mut x, alphabet, 1 + round % 40);
            assert_eq!(pieces(&text).collect::<Vec<_>>(), regex_pieces(&text).collect::<Vec<_>>(), "{text:?}");
        }
        for s in [
            "'s'S'sam 'RE'rE 've'll'LL'd 'x' ''s",
            " \t\n \r\n  x  \n\n\t y \x0b",
            "a1234b 12 - -- !!\r\n\r\n ?",
            "ab\u{e9}cd 1\u{663}2 '\u{e9}s  \u{a0}x",
        ] {
            assert_eq!(pieces(s).collect::<Vec<_>>(), regex_pieces(s).collect::<Vec<_>>(), "{s:?}");
            assert_eq!(count(s), reference(s), "{s:?}");
        }
    }

    #[test]
    fn a_huge_single_piece_is_counted_in_n_log_n_and_exactly() {
        // One piece of 400 KB (no letters, digits or spaces): tiktoken's own merge is quadratic
        // here; ours must finish and agree with a linear reference (bpe-openai).
        let text: String = "!@#$%^&*()".repeat(40_000);
        let ours = count(&text);
        assert_eq!(ours, bpe_openai::cl100k_base().count(text.as_str()) as u64);
        assert!(ours > 0 && ours <= text.len() as u64);
    }
}
